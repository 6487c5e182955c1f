import Foundation
import SalutStreams
import Glibc
import PeerTransferCore
import SalutTools

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
        // The hook gets the pipes as its 0 and 1 (its 2 is the daemon's).
        var options = Spawner.Options()
        options.leadsProcessGroup = true
        options.environment = environment
        options.defaultSignals = [SIGPIPE, SIGTERM, SIGINT]
        let started: Spawner.Piped
        do {
            started = try Spawner.spawnPiped(["/bin/sh", "-c", command], options)
        } catch {
            return Outcome(status: nil, printed: Data(), failure: "\(error)")
        }
        let pid = started.pid
        var writer: Int32 = started.input, reader: Int32 = started.output
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

}
