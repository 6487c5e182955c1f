import Foundation
import SalutTools
import Glibc
import Salut
import SalutStreams

/// Copies bytes between file descriptors (stdin, stdout, a child's pipes) and streams, each
/// direction on its own thread with blocking reads and writes: simple, and backpressure comes
/// for free (a full stream buffer blocks the copying thread, which stops reading).
enum Bridge {
    /// Copies `fd` into `output` until `fd` ends, then closes `output` (a half-close: the peer
    /// sees the end of the data, and may still answer). Calls `done` with false if the stream
    /// failed first.
    static func copy(from fd: Int32, to output: OutputStream, done: @escaping @Sendable (Bool) -> Void = { _ in }) {
        let stream = HandedOver(output)
        Thread.detachNewThread {
            var buffer = [UInt8](repeating: 0, count: 64 * 1024)
            var ok = true
            reading: while true {
                let n = read(fd, &buffer, buffer.count)
                if n < 0 && errno == EINTR { continue }
                if n <= 0 { break }
                var offset = 0
                while offset < n {
                    let written = buffer.withUnsafeBufferPointer {
                        stream.value.write($0.baseAddress! + offset, maxLength: n - offset)
                    }
                    if written <= 0 { ok = false; break reading }
                    offset += written
                }
            }
            stream.value.close()
            done(ok)
        }
    }

    /// Copies `input` into `fd` until the input ends; then calls `done` with the stream's error,
    /// if it failed.
    static func copy(from input: InputStream, to fd: Int32, done: @escaping @Sendable ((any Error)?) -> Void) {
        let stream = HandedOver(input)
        Thread.detachNewThread {
            var buffer = [UInt8](repeating: 0, count: 64 * 1024)
            while true {
                let n = stream.value.read(&buffer, maxLength: buffer.count)
                if n < 0 { return done(stream.value.streamError ?? StreamFailure.notOpen) }
                if n == 0 { return done(nil) }
                var offset = 0
                while offset < n {
                    let written = buffer.withUnsafeBufferPointer {
                        Glibc.write(fd, $0.baseAddress! + offset, n - offset)
                    }
                    if written < 0 && errno == EINTR { continue }
                    if written <= 0 { return done(POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO)) }
                    offset += written
                }
            }
        }
    }

    /// Copies `input` into `fd` and returns once the input has ended.
    /// - Throws: the stream's error when it failed.
    static func drain(_ input: InputStream, to fd: Int32) async throws {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
            copy(from: input, to: fd) { error in
                if let error { continuation.resume(throwing: error) } else { continuation.resume() }
            }
        }
    }

}

/// `netsvc connect`'s upload: standard input copied to the connection on a thread of its own
/// (a blocking read of stdin must not hold a pool thread), with what it is doing visible, so
/// that the end of the service's side can be told apart from a lost upload.
final class StandardInputUpload: @unchecked Sendable {
    // @unchecked: `phase` and `moved` are guarded by `lock` (a `StateLock`); the stream is
    // written by the upload's own thread only.

    enum Phase: Equatable {
        /// Waiting for standard input.
        case reading
        /// Handing bytes to the connection (which may be waiting for the peer to read).
        case writing
        /// Standard input ended and all of it was written (true), or the connection failed.
        case finished(Bool)
    }

    private let lock = StateLock()
    private var phase = Phase.reading
    private var moved = 0

    init(to output: OutputStream) {
        let stream = HandedOver(output)
        Thread.detachNewThread { self.run(stream.value) }
    }

    private var state: (phase: Phase, moved: Int) { lock.withLock { (phase, moved) } }

    /// Whether any of standard input was handed to the connection.
    var sentAnything: Bool { state.moved > 0 }

    private func set(_ phase: Phase, moved count: Int = 0) {
        lock.withLock {
            self.phase = phase
            moved += count
        }
    }

    private func run(_ output: OutputStream) {
        var buffer = [UInt8](repeating: 0, count: 64 * 1024)
        while true {
            let n = read(0, &buffer, buffer.count)
            if n < 0 && errno == EINTR { continue }
            if n <= 0 {
                output.close()  // the half-close: the service sees the end of our data
                return set(.finished(n == 0))
            }
            set(.writing)
            var offset = 0
            while offset < n {
                let written = buffer.withUnsafeBufferPointer {
                    output.write($0.baseAddress! + offset, maxLength: n - offset)
                }
                if written <= 0 { return set(.finished(false)) }
                offset += written
                set(.writing, moved: written)
            }
            set(.reading)
        }
    }

    /// How the upload ended, once the service's side has ended (or failed): nil when nothing
    /// was lost, else why not all of the input reached the service.
    ///
    /// If standard input is idle (nothing waiting to be read), the service ended the session
    /// with nothing of ours pending: the upload is closed, and that is a clean end. Otherwise
    /// the rest of the input is sent while the service still takes it, and it is a failure if
    /// the connection breaks or nothing moves for `stall` seconds.
    func outcome(of pair: BoundStreamPair, stall: Double = 30) async -> String? {
        var lastMoved = -1
        var stalledSince = Date()
        while true {
            let now = state
            switch now.phase {
            case .finished(let complete):
                let closed = await Self.finishSending(pair)
                guard complete else { return closed ?? Self.describe(pair.output.streamError) }
                // An empty standard input has nothing to lose: a service that closed first
                // is not a failed upload.
                return now.moved == 0 ? nil : closed
            case .reading where !Self.standardInputHasMore():
                return await Self.finishSending(pair)
            case .reading, .writing:
                if now.moved != lastMoved {
                    lastMoved = now.moved
                    stalledSince = Date()
                } else if -stalledSince.timeIntervalSinceNow > stall {
                    pair.output.close()
                    return "the service took nothing for \(Int(stall)) s"
                }
                try? await Task.sleep(nanoseconds: 20_000_000)
            }
        }
    }

    private static func finishSending(_ pair: BoundStreamPair) async -> String? {
        do {
            try await pair.finishSending()
            return nil
        } catch {
            return "\(error)"
        }
    }

    private static func describe(_ error: (any Error)?) -> String {
        error.map { "\($0)" } ?? "the connection closed"
    }

    /// Whether standard input has bytes (or its end) waiting to be read.
    private static func standardInputHasMore() -> Bool {
        var entry = pollfd(fd: 0, events: Int16(POLLIN), revents: 0)
        return poll(&entry, 1, 0) > 0
    }
}

/// Bytes meant for the peer did not all reach it.
struct UploadFailure: Error, CustomStringConvertible {
    var reason: String
    var description: String { "not all of the input reached the peer: \(reason)" }
}

/// Standard input and output, lent to one connection at a time (`publish --listen` without
/// `--exec`), in the order the connections ask; the others wait their turn (their bytes are
/// buffered meanwhile, up to the stream buffer, then TCP holds the peer back).
actor StdioTurns {
    private let turn = AsyncTurn()
    private let input = SharedStandardInput()

    /// Bridges `connection` to stdin/stdout once it is its turn, until the peer's data ends.
    /// `spoke` is told when the peer's first bytes arrive (its end alone is not speaking);
    /// `evicted` says whether the connection was ended to make room for another.
    func serve(
        _ connection: AcceptedConnection, peer: String, spoke: @escaping @Sendable () -> Void, evicted: EvictionMark,
        report: @Sendable (String, String, Int?, String?) -> Void
    ) async {
        // Whether the peer has spoken is known once its first bytes are buffered, even while
        // it waits for its turn.
        let watcher = Task {
            await connection.streams.waitUntilReadable()
            if !Task.isCancelled, connection.streams.hasReceivedBytes { spoke() }
        }
        defer { watcher.cancel() }
        // (A connection cut while it waits, evicted or at the end, stops waiting at once.)
        guard await turn.take() else { return }
        defer { turn.release() }
        guard !Task.isCancelled, !evicted.isSet else { return }
        report("connected", peer, nil, nil)
        input.attach(connection.output)
        var failure: String?
        await withTaskCancellationHandler {
            do { try await Bridge.drain(connection.input, to: 1) } catch {
                failure = evicted.isSet ? ConnectionServer.evictionReason : "\(error)"
            }
        } onCancel: {
            connection.input.close()
            connection.output.close()
        }
        // Detaching may wait for bytes being written to this connection: not on the pool.
        let stdin = input
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            Thread.detachNewThread {
                stdin.detach()
                done.resume()
            }
        }
        do {
            try await connection.streams.finishSending()
        } catch {
            failure = failure ?? "\(UploadFailure(reason: "\(error)"))"
        }
        connection.input.close()
        report("disconnected", peer, nil, failure)
    }
}

/// Standard input shared by the connections `publish --listen` serves one at a time: a single
/// reader thread hands what it reads to the current connection, and closes each connection's
/// output once standard input has ended.
final class SharedStandardInput: @unchecked Sendable {
    // @unchecked: `current`, `ended`, `pending` and `detachWaits` are guarded by `lock`. The two semaphores say
    // "something changed": each waiter checks its condition again under the lock after a wake (a
    // signal given before the wait is kept, so none is lost; one that finds nothing to do is
    // harmless), as with a condition variable.
    private let lock = StateLock()
    private var current: HandedOver<OutputStream>?
    private var ended = false
    /// Bytes read from standard input and not yet handed to a connection.
    private var pending = false
    /// Signalled when a connection is attached.
    private let attached = DispatchSemaphore(value: 0)
    /// Signalled when the bytes read have gone to a connection, while a detach waits for them.
    private let delivered = DispatchSemaphore(value: 0)
    /// Whether a detach waits for ``delivered``.
    private var detachWaits = false

    init() {
        Thread.detachNewThread { self.run() }
    }

    /// Makes `output` the receiver of standard input (closing it at once if input has ended).
    func attach(_ output: OutputStream) {
        let inputEnded = lock.withLock { () -> Bool in
            if !ended { current = HandedOver(output) }
            return ended
        }
        if inputEnded { return output.close() }
        attached.signal()
    }

    /// Detaches the current connection (it is over), once the bytes already read from standard
    /// input have gone to it: a peer that half-closes quickly must still get the line that was
    /// waiting for it.
    func detach() {
        while true {
            // Checked and detached under one hold: bytes read meanwhile wait for the next one.
            let detached = lock.withLock { () -> Bool in
                guard !(pending && current != nil) else {
                    detachWaits = true
                    return false
                }
                current = nil
                return true
            }
            if detached { return }
            delivered.wait()
        }
    }

    private func run() {
        var buffer = [UInt8](repeating: 0, count: 64 * 1024)
        while true {
            let n = read(0, &buffer, buffer.count)
            if n < 0 && errno == EINTR { continue }
            if n <= 0 {
                // Under the lock: a detach cannot hand the connection on while it is closed.
                lock.withLock {
                    ended = true
                    current?.value.close()
                }
                return
            }
            // Hold the bytes for the next connection.
            var target = lock.withLock { () -> HandedOver<OutputStream>? in
                pending = true
                return current
            }
            while target == nil {
                attached.wait()
                target = lock.withLock { current }
            }
            var offset = 0
            while offset < n {
                let written = buffer.withUnsafeBufferPointer {
                    target!.value.write($0.baseAddress! + offset, maxLength: n - offset)
                }
                if written <= 0 {
                    // That connection went away mid-write: say what it did not get.
                    note("\(n - offset) bytes of standard input were not delivered: the connection ended first")
                    break
                }
                offset += written
            }
            let detachWaited = lock.withLock { () -> Bool in
                pending = false
                defer { detachWaits = false }
                return detachWaits
            }
            if detachWaited { delivered.signal() }
        }
    }
}
