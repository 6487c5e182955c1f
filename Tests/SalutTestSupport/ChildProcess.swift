import Dispatch
import Foundation
import Glibc
import SalutStreams
import SalutTools

/// A child process spawned with `posix_spawnp` through `Spawner` (not Foundation's `Process`, which leaks
/// itself and its pipes in swift-corelibs-foundation and would hide real leaks from the
/// sanitizer runs): standard output and error go to one pipe the parent reads, standard input
/// comes from a pipe the parent writes. Every signal is unblocked and at its default in the
/// child, whatever the spawning thread had blocked.
public final class ChildProcess: @unchecked Sendable {
    // @unchecked: `reaped`, `status` and `stdinFD` are guarded by `lock`; the output is read on
    // a thread of its own, which owns the read end and reports through `onOutput`.

    /// Why a child could not be started.
    public struct SpawnError: Error, CustomStringConvertible {
        /// What failed, and why.
        public var description: String
    }

    /// The child's process id.
    public let processIdentifier: pid_t
    private let lock = StateLock()
    private var reaped = false
    private var status: Int32 = 0
    private var stdinFD: Int32
    /// The write end of the pipe that stops the output thread: closed by `deinit`.
    private let stopFD: Int32

    /// Starts `arguments[0]` (found on `PATH`) with the rest as its arguments; `onOutput` gets
    /// each piece of its output (on a thread of its own), and an empty piece at its end (none
    /// once this object is gone: then nobody listens).
    /// - Throws: ``SpawnError`` when a pipe or the spawn fails.
    public init(_ arguments: [String], onOutput: @escaping @Sendable (Data) -> Void) throws {
        precondition(!arguments.isEmpty, "a command to run")
        var options = Spawner.Options()
        options.searchesPath = true
        let started: Spawner.Piped
        do {
            started = try Spawner.spawnPiped(arguments, options, errorToOutput: true)
        } catch {
            throw SpawnError(description: "\(error)")
        }
        let pid = started.pid
        processIdentifier = pid
        stdinFD = started.input
        var stopPipe: [Int32] = [0, 0]
        guard pipe(&stopPipe) == 0 else {
            let reason = String(cString: strerror(errno))
            close(started.input); close(started.output)
            kill(pid, SIGKILL)
            var raw: Int32 = 0
            while waitpid(pid, &raw, 0) < 0 && errno == EINTR {}
            throw SpawnError(description: "pipe: \(reason)")
        }
        for fd in stopPipe { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
        stopFD = stopPipe[1]
        Self.startReading(started.output, until: stopPipe[0], onOutput: onOutput)
    }

    /// Reads the child's output on a thread of its own until end of file, or until the stop
    /// pipe's write end is closed, and then closes both descriptors.
    ///
    /// Not a libdispatch read source: on Linux those corrupt libdispatch's epoll bookkeeping when
    /// descriptors are watched and released quickly on many threads (the process dies with
    /// "source finalized twice"; swift-corelibs-libdispatch #949), and the tests start many
    /// children while Salut opens and closes sockets.
    private static func startReading(_ readFD: Int32, until stopFD: Int32, onOutput: @escaping @Sendable (Data) -> Void)
    {
        let thread = Thread {
            defer { close(readFD); close(stopFD) }
            var buffer = [UInt8](repeating: 0, count: 16 * 1024)
            var fds = [
                pollfd(fd: readFD, events: Int16(POLLIN), revents: 0),
                pollfd(fd: stopFD, events: Int16(POLLIN), revents: 0),
            ]
            while true {
                let ready = poll(&fds, 2, -1)
                if ready < 0 {
                    if errno == EINTR { continue }
                    onOutput(Data())  // cannot wait any more: report the end
                    return
                }
                if fds[1].revents != 0 { return }  // the owner is gone: nobody listens
                guard fds[0].revents != 0 else { continue }
                let n = read(readFD, &buffer, buffer.count)
                if n > 0 { onOutput(Data(buffer[..<n])); continue }
                if n < 0 && errno == EINTR { continue }
                onOutput(Data())  // end of output (or an error reading it)
                return
            }
        }
        thread.name = "salut.test.child-output"
        thread.start()
    }

    deinit {
        close(stopFD)  // the output thread sees the hang-up, stops, and closes its descriptors
        lock.withLock {
            if stdinFD >= 0 { close(stdinFD) }
        }
        if isRunning {
            kill(processIdentifier, SIGKILL)
            var raw: Int32 = 0
            while waitpid(processIdentifier, &raw, 0) < 0 && errno == EINTR {}  // no zombie left
        }
    }

    /// Whether the child still runs (reaps it once it has exited).
    public var isRunning: Bool {
        lock.withLock {
            guard !reaped else { return false }
            var raw: Int32 = 0
            let result = waitpid(processIdentifier, &raw, WNOHANG)
            if result == processIdentifier || (result < 0 && errno == ECHILD) {
                reaped = true
                status = raw
                return false
            }
            return true
        }
    }

    /// The exit code, or the signal that ended it (as Foundation's `Process` reports it).
    public var terminationStatus: Int32 {
        _ = isRunning
        let raw = lock.withLock { status }
        return raw & 0x7f == 0 ? (raw >> 8) & 0xff : raw & 0x7f
    }

    /// The signal that ended the child, or nil when it exited (or still runs).
    public var endingSignal: Int32? {
        guard !isRunning else { return nil }
        let raw = lock.withLock { status }
        return raw & 0x7f == 0 ? nil : raw & 0x7f
    }

    /// Sends SIGTERM.
    public func terminate() {
        if isRunning { kill(processIdentifier, SIGTERM) }
    }

    /// Writes to the child's standard input (all of it, blocking while the pipe is full). A child
    /// that has gone is not a crash: SIGPIPE is blocked on this thread while writing and a
    /// pending one is taken back, so the process-wide disposition stays as it was (the library's
    /// tests rely on SIGPIPE being fatal to prove that Salut never raises it).
    public func write(_ data: Data) {
        let fd = lock.withLock { stdinFD }
        guard fd >= 0 else { return }
        var pipeSignal = sigset_t(), previous = sigset_t()
        sigemptyset(&pipeSignal)
        sigaddset(&pipeSignal, SIGPIPE)
        pthread_sigmask(SIG_BLOCK, &pipeSignal, &previous)
        defer {
            var pending = sigset_t()
            sigpending(&pending)
            if sigismember(&pending, SIGPIPE) == 1 {
                var none = timespec()
                _ = sigtimedwait(&pipeSignal, nil, &none)
            }
            pthread_sigmask(SIG_SETMASK, &previous, nil)
        }
        data.withUnsafeBytes { raw in
            var offset = 0
            while offset < raw.count {
                let n = Glibc.write(fd, raw.baseAddress! + offset, raw.count - offset)
                if n > 0 { offset += n } else if errno != EINTR { return }
            }
        }
    }

    /// Closes the child's standard input (it reads end of file).
    public func closeInput() {
        lock.withLock {
            if stdinFD >= 0 { close(stdinFD); stdinFD = -1 }
        }
    }
}
