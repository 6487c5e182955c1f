import Dispatch
import Foundation
import Glibc
import SalutStreams

/// One end of a pipe to a child process, made non-blocking, read or written asynchronously:
/// ``PipePoller`` wakes the waiting task when the pipe is ready, so no thread waits on it.
/// Each end has one user (one task reads it, or one task writes it); ``close()`` may come from
/// anywhere, once or more, and wakes a waiting user.
final class PipeEnd: @unchecked Sendable {
    // @unchecked: `closed` is guarded by `lock` (a `StateLock`), and every call on `fd`, its
    // close included, is made under it after checking `closed`: no call reaches a closed
    // descriptor.

    enum Direction { case reading, writing }

    /// Why writing to a child failed.
    struct Closed: Error, CustomStringConvertible {
        var description: String
    }

    private let fd: Int32
    private let direction: Direction
    private let lock = StateLock()
    private var closed = false

    /// Takes ownership of `fd` (closed here if it cannot be made non-blocking).
    /// - Throws: `POSIXError` from `fcntl`.
    init(_ fd: Int32, _ direction: Direction) throws {
        let flags = fcntl(fd, F_GETFL)
        guard flags >= 0, fcntl(fd, F_SETFL, flags | O_NONBLOCK) == 0 else {
            let code = errno
            _ = Glibc.close(fd)
            throw POSIXError(POSIXErrorCode(rawValue: code) ?? .EIO)
        }
        self.fd = fd
        self.direction = direction
    }

    deinit { close() }

    /// What one non-blocking call did.
    private enum Attempt { case done(Int), wait, closed, failed(Int32) }

    /// Runs one non-blocking `read`/`write` on the descriptor, unless the end is closed: the
    /// check and the call happen under the lock that `close()` takes, so no call ever reaches a
    /// descriptor that was closed (and whose number may already be someone else's).
    private func attempt(_ call: (Int32) -> Int) -> Attempt {
        lock.withLock {
            guard !closed else { return .closed }
            while true {
                let n = call(fd)
                if n >= 0 { return .done(n) }
                if errno == EINTR { continue }
                return errno == EAGAIN ? .wait : .failed(errno)
            }
        }
    }

    /// Reads what is there (at most `limit` bytes), waiting until something is; empty at the
    /// end of the data or once closed.
    /// - Throws: `POSIXError` when reading fails.
    func read(upTo limit: Int = 64 * 1024) async throws -> Data {
        var buffer = Data(count: limit)
        while true {
            let outcome = buffer.withUnsafeMutableBytes { raw in attempt { Glibc.read($0, raw.baseAddress!, limit) } }
            switch outcome {
            case .done(let n): return buffer.prefix(n)
            case .closed: return Data()
            case .wait: guard await readiness() else { return Data() }
            case .failed(let code): throw POSIXError(POSIXErrorCode(rawValue: code) ?? .EIO)
            }
        }
    }

    /// Writes all of `data`, waiting while the pipe is full.
    /// - Throws: ``Closed`` when the child closed its end (it exited, or stopped reading) or
    ///   this end was closed.
    func write(_ data: Data) async throws {
        var offset = 0
        while offset < data.count {
            let outcome = data.withUnsafeBytes { raw in
                attempt { Glibc.write($0, raw.baseAddress! + offset, data.count - offset) }
            }
            switch outcome {
            case .done(let n): offset += n
            case .closed: throw Closed(description: "the pipe was closed")
            case .wait: guard await readiness() else { throw Closed(description: "the pipe was closed") }
            case .failed(EPIPE): throw Closed(description: "the command stopped reading its input")
            case .failed(let code): throw Closed(description: String(cString: strerror(code)))
            }
        }
    }

    /// Closes the pipe (the child sees the end of its input, or a broken pipe); wakes a
    /// waiting reader or writer.
    func close() {
        lock.withLock {
            guard !closed else { return }
            closed = true
            PipePoller.shared.forget(fd)
            _ = Glibc.close(fd)  // EINTR or EIO: the descriptor is released all the same
        }
    }

    /// Waits until the pipe is ready; false when it was closed instead.
    private func readiness() async -> Bool {
        await withCheckedContinuation { continuation in
            let waiting = lock.withLock { () -> Bool in
                guard !closed else { return false }
                PipePoller.shared.wait(for: fd, writing: direction == .writing) { continuation.resume(returning: $0) }
                return true
            }
            if !waiting { continuation.resume(returning: false) }
        }
    }
}
