import Foundation

/// What a timed read on a stream pair produced.
package struct PairReadResult: Sendable {
    /// The bytes read (possibly fewer than asked for, on a timeout, the end, or an error).
    package var data: Data
    /// The peer finished sending and everything it sent has been read.
    package var atEnd: Bool
    /// Why the read stopped early, if it did.
    package var error: (any Error)?
    /// The deadline passed first.
    package var timedOut: Bool
}

/// Reads and writes with deadlines for Salut's own stream pairs, used by the session layer.
/// Waiting never consumes data: a read that times out leaves unread bytes for the next one.
extension BoundStreamPair {
    private var boundInput: BoundInputStream? { input as? BoundInputStream }
    private var boundOutput: BoundOutputStream? { output as? BoundOutputStream }

    /// Reads until at least `minimum` bytes (at most `maximum`) have arrived, the data ends,
    /// the stream fails, or `deadline` passes.
    package func read(minimum: Int, maximum: Int, deadline: Date?) async -> PairReadResult {
        var result = PairReadResult(data: Data(), atEnd: false, error: nil, timedOut: false)
        guard let stream = boundInput else {
            result.error = StreamFailure.notOpen
            return result
        }
        let wanted = max(1, minimum)
        while result.data.count < wanted {
            let buffer = stream.buffer
            guard await Self.wait(until: deadline, for: { await buffer.readable() }) else {
                result.timedOut = true
                return result
            }
            // Read into scratch that is neither zero-filled nor kept between calls, then append.
            let room = min(256 * 1024, maximum - result.data.count)
            let n = withUnsafeTemporaryAllocation(of: UInt8.self, capacity: room) { scratch -> Int in
                let n = stream.readWithoutBlocking(scratch.baseAddress!, maxLength: room)
                if n > 0 { result.data.append(scratch.baseAddress!, count: n) }
                return n
            }
            if n < 0 {
                result.error = stream.streamError ?? StreamFailure.notOpen
                return result
            }
            if n == 0 {
                let state = stream.buffer.snapshot
                if state.available == 0 && state.writerClosed {
                    result.atEnd = true
                    if stream.streamStatus == .error { result.error = stream.streamError }
                    return result
                }
                continue
            }
            if minimum == 0 { break }
        }
        return result
    }

    /// Writes all of `data` unless the stream fails or `deadline` passes; returns how much
    /// went into the stream, and why it stopped early.
    package func write(_ data: Data, deadline: Date?) async -> (written: Int, error: (any Error)?, timedOut: Bool) {
        guard let stream = boundOutput else { return (0, StreamFailure.notOpen, false) }
        var offset = 0
        while offset < data.count {
            let buffer = stream.buffer
            guard await Self.wait(until: deadline, for: { await buffer.writable() }) else {
                return (offset, nil, true)
            }
            let n = data.withUnsafeBytes { raw in
                stream.writeWithoutBlocking(raw.bindMemory(to: UInt8.self).baseAddress! + offset, length: data.count - offset)
            }
            if n < 0 { return (offset, stream.streamError ?? StreamFailure.notOpen, false) }
            offset += n
        }
        return (offset, nil, false)
    }

    /// Waits for `ready` to return, or until `deadline`; false when the deadline came first.
    private static func wait(until deadline: Date?, for ready: @escaping @Sendable () async -> Void) async -> Bool {
        guard let deadline else {
            await ready()
            return true
        }
        let remaining = deadline.timeIntervalSinceNow
        guard remaining > 0 else { return false }
        return await withTaskGroup(of: Bool.self) { group in
            group.addTask {
                await ready()
                return !Task.isCancelled
            }
            group.addTask {
                try? await Task.sleep(nanoseconds: UInt64(remaining * 1e9))
                return false
            }
            let first = await group.next() ?? false
            group.cancelAll()
            return first
        }
    }

    /// Socket options to apply when the connection is made; set before opening.
    package func setSocketOptions(_ options: SocketOptions) {
        connection?.state.withLock { $0.socketOptions = options }
    }

    /// Ends TLS once what was written has been sent, and carries on in the clear (the peer must
    /// do the same).
    package func stopTLS(done: @escaping @Sendable (Result<Void, SocketStreamError>) -> Void) {
        guard let connection else { return done(.failure(.tls(.invalidConfiguration("not a socket connection")))) }
        connection.pump.stopTLS { result in
            if case .success = result { connection.state.withLock { $0.details?.tls = nil } }
            done(result)
        }
    }
}
