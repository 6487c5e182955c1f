import Dispatch
import Foundation
import Glibc

/// One end of a pipe to a child process, made non-blocking, read or written asynchronously: a
/// dispatch source wakes the waiting task when the pipe is ready, so no thread waits on it.
/// Each end has one user (one task reads it, or one task writes it); ``close()`` may come from
/// anywhere, once or more, and wakes a waiting user.
final class PipeEnd: @unchecked Sendable {
    // @unchecked: `waiter`, `watching` and `closed` are guarded by `lock`; `fd` is read-only
    // (closed only by the source's cancel handler, after which nothing uses it).

    enum Direction { case reading, writing }

    /// Why writing to a child failed.
    struct Closed: Error, CustomStringConvertible {
        var description: String
    }

    private let fd: Int32
    private let source: any DispatchSourceProtocol
    private let lock = NSLock()
    private var waiter: CheckedContinuation<Bool, Never>?
    private var watching = false
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
        let queue = DispatchQueue.global()
        source = direction == .reading
            ? DispatchSource.makeReadSource(fileDescriptor: fd, queue: queue)
            : DispatchSource.makeWriteSource(fileDescriptor: fd, queue: queue)
        source.setEventHandler { [weak self] in self?.ready() }
        source.setCancelHandler { _ = Glibc.close(fd) }
    }

    deinit { close() }

    /// Reads what is there (at most `limit` bytes), waiting until something is; empty at the
    /// end of the data or once closed.
    /// - Throws: `POSIXError` when reading fails.
    func read(upTo limit: Int = 64 * 1024) async throws -> Data {
        var buffer = Data(count: limit)
        while true {
            let n = buffer.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress!, limit) }
            if n >= 0 { return buffer.prefix(n) }
            switch errno {
            case EINTR: continue
            case EAGAIN: guard await readiness() else { return Data() }
            case EBADF: return Data()   // closed meanwhile
            default: throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO)
            }
        }
    }

    /// Writes all of `data`, waiting while the pipe is full.
    /// - Throws: ``Closed`` when the child closed its end (it exited, or stopped reading) or
    ///   this end was closed.
    func write(_ data: Data) async throws {
        var offset = 0
        while offset < data.count {
            let n = data.withUnsafeBytes { Glibc.write(fd, $0.baseAddress! + offset, data.count - offset) }
            if n > 0 { offset += n; continue }
            switch errno {
            case EINTR: continue
            case EAGAIN: guard await readiness() else { throw Closed(description: "the pipe was closed") }
            case EPIPE: throw Closed(description: "the command stopped reading its input")
            default: throw Closed(description: String(cString: strerror(errno)))
            }
        }
    }

    /// Closes the pipe (the child sees the end of its input, or a broken pipe); wakes a
    /// waiting reader or writer.
    func close() {
        lock.lock()
        guard !closed else { return lock.unlock() }
        closed = true
        let woken = waiter
        waiter = nil
        let suspended = !watching
        lock.unlock()
        source.cancel()
        if suspended { source.resume() }   // a suspended source never runs its cancel handler
        woken?.resume(returning: false)
    }

    /// Waits until the pipe is ready; false when it was closed instead.
    private func readiness() async -> Bool {
        await withCheckedContinuation { continuation in
            lock.lock()
            guard !closed else {
                lock.unlock()
                return continuation.resume(returning: false)
            }
            waiter = continuation
            watching = true
            lock.unlock()
            source.resume()
        }
    }

    private func ready() {
        lock.lock()
        guard watching, !closed else { return lock.unlock() }
        watching = false
        source.suspend()
        let woken = waiter
        waiter = nil
        lock.unlock()
        woken?.resume(returning: true)
    }
}
