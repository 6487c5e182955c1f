import Foundation

/// What a timed read on a stream pair produced.
package struct PairReadResult: Sendable {
    /// The bytes read (possibly fewer than asked for, on a timeout, the end, or an error).
    package var data: Data
    /// The peer finished sending and everything it sent has been read.
    package var atEnd: Bool
    /// Why the read stopped early, if it did.
    package var error: (any Error)?
    /// Why the read stopped before it was satisfied: its deadline passed, or it was cancelled.
    package var stopped: OperationLimit.Ending?
    /// The deadline passed first.
    package var timedOut: Bool { stopped == .deadlinePassed }

    package init(
        data: Data = Data(), atEnd: Bool = false, error: (any Error)? = nil, stopped: OperationLimit.Ending? = nil
    ) {
        self.data = data
        self.atEnd = atEnd
        self.error = error
        self.stopped = stopped
    }
}

/// What a timed write on a stream pair did.
package struct PairWriteResult: Sendable {
    /// How many bytes went into the stream (they will be sent).
    package var written: Int
    /// Why the write stopped early, if it failed.
    package var error: (any Error)?
    /// Why the write stopped before it was done: its deadline passed, or it was cancelled.
    package var stopped: OperationLimit.Ending?
    /// The deadline passed first.
    package var timedOut: Bool { stopped == .deadlinePassed }

    init(written: Int, error: (any Error)? = nil, stopped: OperationLimit.Ending? = nil) {
        self.written = written
        self.error = error
        self.stopped = stopped
    }
}

/// Reads and writes with deadlines for Salut's own stream pairs, used by the session layer.
/// Waiting never consumes data: a read that times out leaves unread bytes for the next one.
extension BoundStreamPair {
    private var boundInput: BoundInputStream? { input as? BoundInputStream }
    private var boundOutput: BoundOutputStream? { output as? BoundOutputStream }

    /// Reads until at least `minimum` bytes (at most `maximum`) have arrived, the data ends,
    /// the stream fails, or `limit` ends (deadline or cancellation). Bytes read before a stop
    /// are in the result, never dropped.
    package func read(minimum: Int, maximum: Int, limit: OperationLimit) async -> PairReadResult {
        var result = PairReadResult()
        guard let stream = boundInput else {
            result.error = StreamFailure.notOpen
            return result
        }
        let wanted = max(1, minimum)
        await stream.connection?.inputWanted()
        while result.data.count < wanted {
            let buffer = stream.buffer
            await buffer.readable(within: limit)
            if let stop = limit.state {
                result.stopped = stop
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

    /// Writes all of `data` unless the stream fails or `limit` ends; says how much went into
    /// the stream, and why it stopped early.
    package func write(_ data: Data, limit: OperationLimit) async -> PairWriteResult {
        guard let stream = boundOutput else { return PairWriteResult(written: 0, error: StreamFailure.notOpen) }
        var offset = 0
        while offset < data.count {
            let buffer = stream.buffer
            await buffer.writable(toWrite: data.count - offset, within: limit)
            if let stop = limit.state { return PairWriteResult(written: offset, stopped: stop) }
            let n = await stream.write(data, from: offset)
            if n < 0 { return PairWriteResult(written: offset, error: stream.streamError ?? StreamFailure.notOpen) }
            offset += n
        }
        return PairWriteResult(written: offset)
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
