import Foundation
import SalutStreams
import Glibc
import PeerTransferCore

/// Runs `--accept ask --hook`'s command on a thread of its own, never on the shared pool of
/// async threads (a hook that takes its time, or one whose background child keeps its output
/// open, must not stop the daemon answering other peers).
///
/// The hook is `sh -c COMMAND` in a process group of its own, with SIGPIPE back at its default
/// and no signal blocked. It gets the offered paths on standard input and has `limit` seconds.
/// When `sh` exits, what it printed until then (and within one more second) is its answer, and
/// whatever it left running in its group is killed; at the limit the whole group is killed and
/// the offer declined.
enum HookRunner {
    /// How the hook ended.
    struct Outcome: Sendable {
        /// `sh`'s exit status, or nil when it was killed (at the limit) or did not start.
        var status: Int32?
        /// What it printed on standard output (at most 16 MiB).
        var printed: Data
        /// Why it could not start, if it could not.
        var failure: String?
    }

    /// Runs the hook and returns once it has ended (never later than `limit` plus a second).
    /// Cancelling the calling task ends it as the limit does, within 50 ms: its group is
    /// killed and it has no status (the offer's sender left, or the daemon stops).
    static func run(_ command: String, environment: [String: String], input: Data, limit: TimeInterval) async -> Outcome
    {
        let cancelled = Locked(false)
        return await withTaskCancellationHandler {
            await onThreadOfItsOwn {
                runBlocking(
                    command, environment: environment, input: input, limit: limit,
                    cancelled: { cancelled.withLock { $0 } })
            }
        } onCancel: {
            cancelled.withLock { $0 = true }
        }
    }

    private static func runBlocking(
        _ command: String, environment: [String: String], input: Data, limit: TimeInterval,
        cancelled: () -> Bool
    ) -> Outcome {
        var toChild: [Int32] = [-1, -1], fromChild: [Int32] = [-1, -1]
        guard pipe(&toChild) == 0 else {
            return Outcome(status: nil, printed: Data(), failure: "pipe: \(String(cString: strerror(errno)))")
        }
        guard pipe(&fromChild) == 0 else {
            close(toChild[0]); close(toChild[1])
            return Outcome(status: nil, printed: Data(), failure: "pipe: \(String(cString: strerror(errno)))")
        }
        // Only the hook gets them, as its 0 and 1 (dup2 clears the flag on those copies).
        for fd in toChild + fromChild { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
        let (spawned, failure) = spawn(command, environment: environment, stdin: toChild[0], stdout: fromChild[1])
        guard let pid = spawned else {
            for fd in toChild + fromChild { close(fd) }
            return Outcome(status: nil, printed: Data(), failure: failure)
        }
        close(toChild[0]); close(fromChild[1])
        var writer: Int32 = toChild[1], reader: Int32 = fromChild[0]
        _ = fcntl(writer, F_SETFL, fcntl(writer, F_GETFL) | O_NONBLOCK)
        _ = fcntl(reader, F_SETFL, fcntl(reader, F_GETFL) | O_NONBLOCK)

        let deadline = Date().addingTimeInterval(limit)
        var exitedAt: Date?
        var status: Int32?
        var written = 0
        var printed = Data()
        var buffer = [UInt8](repeating: 0, count: 64 * 1024)
        if input.isEmpty { close(writer); writer = -1 }
        while true {
            if exitedAt == nil {
                var raw: Int32 = 0
                if waitpid(pid, &raw, WNOHANG) == pid {
                    exitedAt = Date()
                    // Exited normally: its status; killed by a signal: no status (declined).
                    status = (raw & 0x7f) == 0 ? (raw >> 8) & 0xff : nil
                }
            }
            if let exitedAt, reader < 0 || -exitedAt.timeIntervalSinceNow > 1 { break }
            if Date() >= deadline || cancelled() { break }
            var watched: [pollfd] = []
            if writer >= 0 { watched.append(pollfd(fd: writer, events: Int16(POLLOUT), revents: 0)) }
            if reader >= 0 { watched.append(pollfd(fd: reader, events: Int16(POLLIN), revents: 0)) }
            _ = poll(&watched, nfds_t(watched.count), 50)
            if writer >= 0 {
                let n = input.withUnsafeBytes { write(writer, $0.baseAddress! + written, $0.count - written) }
                if n > 0 { written += n }
                // Done, or the hook stopped reading its input (EPIPE): either way, no more.
                if written == input.count || (n < 0 && errno != EAGAIN && errno != EINTR) { close(writer); writer = -1 }
            }
            if reader >= 0 {
                let n = read(reader, &buffer, buffer.count)
                if n > 0, printed.count < 16 << 20 { printed.append(contentsOf: buffer[0..<n]) }
                if n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR) { close(reader); reader = -1 }
            }
        }
        // The group goes: `sh` at the limit, and whatever it left behind in any case.
        kill(-pid, SIGKILL)
        if exitedAt == nil {
            var raw: Int32 = 0
            while waitpid(pid, &raw, 0) < 0 && errno == EINTR {}
            status = nil
        }
        if writer >= 0 { close(writer) }
        if reader >= 0 { close(reader) }
        return Outcome(status: status, printed: printed, failure: nil)
    }

    /// `sh -c command` with `stdin` and `stdout` as its 0 and 1 (2 is the daemon's), leading a
    /// process group of its own, with default signal dispositions and an empty signal mask.
    private static func spawn(
        _ command: String, environment: [String: String], stdin: Int32, stdout: Int32
    ) -> (pid_t?, String?) {
        var actions = posix_spawn_file_actions_t()
        var attributes = posix_spawnattr_t()
        guard posix_spawn_file_actions_init(&actions) == 0 else { return (nil, "posix_spawn_file_actions_init failed") }
        defer { posix_spawn_file_actions_destroy(&actions) }
        guard posix_spawnattr_init(&attributes) == 0 else { return (nil, "posix_spawnattr_init failed") }
        defer { posix_spawnattr_destroy(&attributes) }
        var defaults = sigset_t(), empty = sigset_t()
        sigemptyset(&defaults)
        sigaddset(&defaults, SIGPIPE)
        sigaddset(&defaults, SIGTERM)
        sigaddset(&defaults, SIGINT)
        sigemptyset(&empty)
        let flags = Int16(POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK)
        guard posix_spawn_file_actions_adddup2(&actions, stdin, 0) == 0,
            posix_spawn_file_actions_adddup2(&actions, stdout, 1) == 0,
            posix_spawnattr_setflags(&attributes, flags) == 0,
            posix_spawnattr_setpgroup(&attributes, 0) == 0,
            posix_spawnattr_setsigdefault(&attributes, &defaults) == 0,
            posix_spawnattr_setsigmask(&attributes, &empty) == 0
        else {
            return (nil, "cannot prepare the hook's process")
        }
        let words: [String] = ["/bin/sh", "-c", command]
        let arguments: [UnsafeMutablePointer<CChar>?] = words.map { strdup($0) } + [nil]
        let variables: [UnsafeMutablePointer<CChar>?] = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer {
            for pointer in arguments { free(pointer) }
            for pointer in variables { free(pointer) }
        }
        var pid: pid_t = 0
        let result = posix_spawn(&pid, "/bin/sh", &actions, &attributes, arguments, variables)
        guard result == 0 else { return (nil, "cannot start /bin/sh: \(String(cString: strerror(result)))") }
        return (pid, nil)
    }
}
