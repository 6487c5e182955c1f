import Foundation
import SalutStreams

/// Calls back when a file is written into a folder (inotify), on a thread of its own, until
/// stopped: how a background session's runner learns that another process queued a task.
final class TaskFolderWatcher: @unchecked Sendable {
    // @unchecked: the descriptors are set in init and closed once, by the thread, after `stop`
    // has written to the stop pipe; `stopped` is guarded by `lock`.
    private let inotify: Int32
    private let stopPipe: [Int32]
    private let lock = StateLock()
    private var stopped = false

    /// Watches `folder`; nil when inotify or the pipe cannot be set up (the runner then sees
    /// queued tasks only when it starts).
    init?(folder: String, onChange: @escaping @Sendable () -> Void) {
        let inotify = inotify_init1(Int32(IN_CLOEXEC))
        guard inotify >= 0 else { return nil }
        guard inotify_add_watch(inotify, folder, UInt32(IN_CLOSE_WRITE | IN_MOVED_TO)) >= 0 else {
            close(inotify)
            return nil
        }
        var fds: [Int32] = [0, 0]
        guard pipe(&fds) == 0 else {
            close(inotify)
            return nil
        }
        for fd in fds { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
        self.inotify = inotify
        stopPipe = fds
        let thread = Thread { [inotify, fds] in
            var buffer = [UInt8](repeating: 0, count: 4096)
            var polled = [
                pollfd(fd: inotify, events: Int16(POLLIN), revents: 0),
                pollfd(fd: fds[0], events: Int16(POLLIN), revents: 0),
            ]
            while true {
                let ready = poll(&polled, 2, -1)
                if ready < 0 && errno == EINTR { continue }
                if ready < 0 || polled[1].revents != 0 { break }
                if polled[0].revents & Int16(POLLIN) != 0 {
                    _ = read(inotify, &buffer, buffer.count)
                    onChange()
                } else if polled[0].revents != 0 {
                    break
                }
            }
            close(inotify)
            close(fds[0])
        }
        thread.name = "salut.background.watcher"
        thread.start()
    }

    /// Stops the thread (it closes the descriptors on its way out).
    func stop() {
        let first = lock.withLock { () -> Bool in
            defer { stopped = true }
            return !stopped
        }
        guard first else { return }
        var byte: UInt8 = 1
        _ = write(stopPipe[1], &byte, 1)
        close(stopPipe[1])
    }

    deinit { stop() }
}
