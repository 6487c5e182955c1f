import Foundation
import Glibc
import Salut

/// Copies bytes between file descriptors (stdin, stdout, a child's pipes) and streams, each
/// direction on its own thread with blocking reads and writes: simple, and backpressure comes
/// for free (a full stream buffer blocks the copying thread, which stops reading).
enum Bridge {
    /// Copies `fd` into `output` until `fd` ends, then closes `output` (a half-close: the peer
    /// sees the end of the data, and may still answer). Calls `done` with false if the stream
    /// failed first.
    static func copy(from fd: Int32, to output: OutputStream, done: @escaping @Sendable (Bool) -> Void = { _ in }) {
        let stream = UncheckedOutput(output)
        Thread.detachNewThread {
            var buffer = [UInt8](repeating: 0, count: 64 * 1024)
            var ok = true
            reading: while true {
                let n = read(fd, &buffer, buffer.count)
                if n < 0 && errno == EINTR { continue }
                if n <= 0 { break }
                var offset = 0
                while offset < n {
                    let written = buffer.withUnsafeBufferPointer { stream.output.write($0.baseAddress! + offset, maxLength: n - offset) }
                    if written <= 0 { ok = false; break reading }
                    offset += written
                }
            }
            stream.output.close()
            done(ok)
        }
    }

    /// Copies `input` into `fd` until the input ends; then calls `done` with the stream's error,
    /// if it failed.
    static func copy(from input: InputStream, to fd: Int32, done: @escaping @Sendable ((any Error)?) -> Void) {
        let stream = UncheckedInput(input)
        Thread.detachNewThread {
            var buffer = [UInt8](repeating: 0, count: 64 * 1024)
            while true {
                let n = stream.input.read(&buffer, maxLength: buffer.count)
                if n < 0 { return done(stream.input.streamError ?? StreamFailure.notOpen) }
                if n == 0 { return done(nil) }
                var offset = 0
                while offset < n {
                    let written = buffer.withUnsafeBufferPointer { Glibc.write(fd, $0.baseAddress! + offset, n - offset) }
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

    /// Copies `fd` into the pair's output until `fd` ends, then half-closes and returns once
    /// every byte has been handed to the network.
    /// - Throws: ``UploadFailure`` when the connection failed first (not all of it reached the
    ///   peer).
    static func upload(from fd: Int32, to pair: BoundStreamPair) async throws {
        let written = await withCheckedContinuation { continuation in
            copy(from: fd, to: pair.output) { continuation.resume(returning: $0) }
        }
        do {
            try await pair.finishSending()
        } catch {
            throw UploadFailure(reason: "\(error)")
        }
        if !written { throw UploadFailure(reason: pair.output.streamError.map { "\($0)" } ?? "the connection closed") }
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
    private var busy = false
    private var waiting: [CheckedContinuation<Void, Never>] = []
    private let input = SharedStandardInput()

    /// Bridges `connection` to stdin/stdout once it is its turn, until the peer's data ends.
    /// `spoke` is told when the peer's first bytes (or end) arrive; `evicted` says whether the
    /// connection was ended to make room for another.
    func serve(_ connection: AcceptedConnection, peer: String, spoke: @escaping @Sendable () -> Void, evicted: EvictionMark,
               report: @Sendable (String, String, Int?, String?) -> Void) async {
        // Whether the peer has spoken is known only once it is read; while it waits its turn,
        // look at the buffer.
        let watcher = Task {
            while !Task.isCancelled {
                if connection.input.hasBytesAvailable || connection.input.streamStatus != .open { return spoke() }
                try? await Task.sleep(nanoseconds: 50_000_000)
            }
        }
        defer { watcher.cancel() }
        await takeTurn()
        defer { endTurn() }
        guard !Task.isCancelled, !evicted.isSet else { return }
        report("connected", peer, nil, nil)
        input.attach(connection.output)
        var failure: String?
        await withTaskCancellationHandler {
            do { try await Bridge.drain(connection.input, to: 1) } catch { failure = evicted.isSet ? ConnectionServer.evictionReason : "\(error)" }
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

    private func takeTurn() async {
        guard busy else { busy = true; return }
        await withCheckedContinuation { waiting.append($0) }
    }

    private func endTurn() {
        if waiting.isEmpty { busy = false } else { waiting.removeFirst().resume() }
    }
}

/// Standard input shared by the connections `publish --listen` serves one at a time: a single
/// reader thread hands what it reads to the current connection, and closes each connection's
/// output once standard input has ended.
final class SharedStandardInput: @unchecked Sendable {
    // @unchecked: `current`, `ended` and `pending` are guarded by `condition`.
    private let condition = NSCondition()
    private var current: UncheckedOutput?
    private var ended = false
    /// Bytes read from standard input and not yet handed to a connection.
    private var pending = false

    init() {
        Thread.detachNewThread { self.run() }
    }

    /// Makes `output` the receiver of standard input (closing it at once if input has ended).
    func attach(_ output: OutputStream) {
        condition.lock()
        if ended {
            condition.unlock()
            output.close()
            return
        }
        current = UncheckedOutput(output)
        condition.broadcast()
        condition.unlock()
    }

    /// Detaches the current connection (it is over), once the bytes already read from standard
    /// input have gone to it: a peer that half-closes quickly must still get the line that was
    /// waiting for it.
    func detach() {
        condition.lock()
        while pending && current != nil { condition.wait() }
        current = nil
        condition.unlock()
    }

    private func run() {
        var buffer = [UInt8](repeating: 0, count: 64 * 1024)
        while true {
            let n = read(0, &buffer, buffer.count)
            if n < 0 && errno == EINTR { continue }
            condition.lock()
            if n <= 0 {
                ended = true
                current?.output.close()
                condition.unlock()
                return
            }
            pending = true
            while current == nil { condition.wait() }   // hold the bytes for the next connection
            let target = current!
            condition.unlock()
            var offset = 0
            while offset < n {
                let written = buffer.withUnsafeBufferPointer { target.output.write($0.baseAddress! + offset, maxLength: n - offset) }
                if written <= 0 { break }   // that connection went away; the rest is dropped
                offset += written
            }
            condition.lock()
            pending = false
            condition.broadcast()
            condition.unlock()
        }
    }
}

struct UncheckedOutput: @unchecked Sendable {
    // @unchecked: one thread writes to the stream at a time.
    let output: OutputStream
    init(_ output: OutputStream) { self.output = output }
}

struct UncheckedInput: @unchecked Sendable {
    // @unchecked: one thread reads from the stream at a time.
    let input: InputStream
    init(_ input: InputStream) { self.input = input }
}
