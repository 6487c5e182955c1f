import Foundation

/// The bytes of an input stream as an async sequence of `Data` chunks (see `InputStream.chunks`).
public struct StreamChunks: AsyncSequence {
    public typealias Element = Data

    let stream: InputStream
    let chunkSize: Int

    public func makeAsyncIterator() -> Iterator {
        Iterator(stream: stream, chunkSize: chunkSize)
    }

    /// Reads the next chunk, suspending (not blocking a thread, for Salut's own streams) while
    /// nothing is available. Returns nil at the end of the data.
    public struct Iterator: AsyncIteratorProtocol {
        let stream: InputStream
        let chunkSize: Int

        /// - Throws: `CancellationError` when the calling task is cancelled (nothing is read then:
        ///   the bytes stay for the next read), the stream's error, or ``StreamFailure/notOpen``
        ///   when it was closed.
        public mutating func next() async throws -> Data? {
            let scratch = UnsafeMutableRawBufferPointer.allocate(byteCount: chunkSize, alignment: 16)
            defer { scratch.deallocate() }
            let n = try await stream.read(into: scratch)
            return n == 0 ? nil : Data(UnsafeRawBufferPointer(rebasing: scratch[0..<n]))
        }
    }
}

extension InputStream {
    /// The stream's bytes as `Data` chunks of up to 64 KiB: `for try await chunk in input.chunks`.
    /// Opens the stream if it is not open yet.
    public var chunks: StreamChunks { StreamChunks(stream: self, chunkSize: 64 * 1024) }

    /// The stream's bytes as chunks of up to `size` bytes (at least 1).
    public func chunks(ofSize size: Int) -> StreamChunks { StreamChunks(stream: self, chunkSize: max(1, size)) }

    /// Reads up to `buffer.count` bytes into `buffer`, suspending (not blocking a thread, for
    /// Salut's own streams) while nothing is available; other streams are read with their
    /// blocking `read`. Opens the stream if it is not open yet. The buffer is the caller's
    /// and is not kept: a reader can reuse one buffer for every read, with no allocation.
    /// - Returns: the number of bytes read, at least 1; 0 at the end of the data.
    /// - Throws: `CancellationError` when the calling task is cancelled (nothing is read then:
    ///   the bytes stay for the next read), the stream's error, or ``StreamFailure/notOpen``
    ///   when it was closed.
    public func read(into buffer: UnsafeMutableRawBufferPointer) async throws -> Int {
        try await read(into: buffer, atLeast: 1)
    }

    /// Reads up to `buffer.count` bytes into `buffer` as ``read(into:)`` does, but for Salut's
    /// own streams waits until at least `minimum` bytes are buffered (capped at `buffer.count`
    /// and at the stream's buffer size), or the data has ended or failed, before taking them.
    /// A bulk reader that wants a large block is then woken once per `minimum` bytes rather
    /// than once per packet. Other streams are read with their blocking `read`.
    ///
    /// Ask only for bytes the peer is bound to send (the rest of a length-prefixed message):
    /// a peer that stops below `minimum` and waits for an answer keeps this read waiting until
    /// it sends more, ends or fails, or the connection's own limits (an idle bound) cut it.
    /// - Returns: the number of bytes read: at least `minimum` (as capped) unless the data
    ///   ended or failed first, at least 1; 0 at the end of the data.
    /// - Throws: as ``read(into:)``.
    public func read(into buffer: UnsafeMutableRawBufferPointer, atLeast minimum: Int) async throws -> Int {
        if streamStatus == .notOpen { open() }
        guard let base = buffer.baseAddress, buffer.count > 0 else { return 0 }
        let n: Int
        if let bound = self as? BoundInputStream {
            await bound.events.settled(bound, gate: bound.gate, then: bound.refresh)
            await bound.connection?.inputWanted()
            await bound.buffer.readable(atLeast: min(minimum, buffer.count))
            try Task.checkCancellation()
            n = bound.readWithoutBlocking(base.assumingMemoryBound(to: UInt8.self), maxLength: buffer.count)
        } else {
            n = read(base.assumingMemoryBound(to: UInt8.self), maxLength: buffer.count)
        }
        if n < 0 { throw streamError ?? StreamFailure.notOpen }
        return n
    }
}

extension OutputStream {
    /// Writes all of `data`, suspending while the buffer is full (for Salut's own streams; other
    /// streams are written with their blocking `write`). Opens the stream if needed.
    /// - Throws: `CancellationError` when the calling task is cancelled (the bytes written
    ///   before stay written), ``StreamFailure/readerClosed`` when the reading end closes first,
    ///   or the stream's own error.
    public func write(_ data: Data) async throws {
        try await write(data, within: nil)
    }

    /// Writes all of `data` as ``write(_:)`` does, but gives up once `timeout` has passed with
    /// bytes still waiting for room: a reader that stops taking them cannot hold the writer
    /// longer. For Salut's own streams; others are written with their blocking `write`, unbounded.
    /// A socket stream still connecting is waited for first, within its own connection bounds
    /// and not `timeout` (open it with `BoundStreamPair.open()` first).
    /// - Throws: ``StreamFailure/timedOut`` when the time passed first (the bytes written before
    ///   stay written: the stream is best closed), otherwise as ``write(_:)``.
    public func write(_ data: Data, timeout: Duration) async throws {
        let limit = OperationLimit(deadline: .now + timeout)
        defer { limit.finish() }
        try await write(data, within: limit)  // (a cancelled task leaves the wait by itself)
    }

    /// Writes all of `data`, waiting for room within `limit` (none: unbounded) for Salut's own
    /// streams.
    private func write(_ data: Data, within limit: OperationLimit?) async throws {
        if streamStatus == .notOpen { open() }
        var offset = 0
        while offset < data.count {
            let n: Int
            if let bound = self as? BoundOutputStream {
                await bound.events.settled(bound, gate: bound.gate, then: bound.refresh)
                await bound.buffer.writable(toWrite: data.count - offset, within: limit)
                if limit?.state == .deadlinePassed { throw StreamFailure.timedOut }
                try Task.checkCancellation()
                n = await bound.write(data, from: offset)
            } else {
                n = data.withUnsafeBytes { raw in
                    write(raw.bindMemory(to: UInt8.self).baseAddress! + offset, maxLength: data.count - offset)
                }
            }
            if n < 0 { throw streamError ?? StreamFailure.notOpen }
            offset += n
        }
    }
}

extension BoundStreamPair {
    /// Opens both streams and returns once they are open: at once for a bound pair; for socket
    /// streams once the connection is made (and, with TLS, the peer trusted).
    /// - Throws: the ``SocketStreamError`` that failed the connection (the streams are then in
    ///   status `.error`), or `CancellationError` when the calling task is cancelled first
    ///   (both streams are then closed, which abandons the connection).
    public func open() async throws {
        input.open()
        output.open()
        guard let stream = input as? BoundInputStream, let gate = stream.gate else { return }
        await gate.settled()
        if Task.isCancelled, case .connecting = gate.current {
            input.close()
            output.close()
            throw CancellationError()
        }
        stream.connectionSettled()
        (output as? BoundOutputStream)?.connectionSettled()
        if case .failed(let error) = gate.current { throw error }
    }

    /// Closes the output stream and returns once everything written to it has been handed to
    /// the kernel and this side's end of the data has been queued behind it (TLS close_notify,
    /// then the TCP half-close): what a tool that uploads must wait for before it says it is
    /// done. (Whether the peer's application read it all, only its answer can tell.) For a
    /// bound pair it closes the output and returns at once.
    /// - Throws: the ``SocketStreamError`` of a connection that failed before its output was
    ///   all sent (the peer reset it, for example: some of the bytes may not have reached it);
    ///   ``StreamFailure/notOpen`` for socket streams that were never opened; `CancellationError`
    ///   when the calling task is cancelled first (the streams are then closed).
    public func finishSending() async throws {
        guard let connection else { return output.close() }
        if let gate = connection.gate, case .idle = gate.current {
            output.close()
            throw StreamFailure.notOpen
        }
        output.close()
        let outcome = await withTaskCancellationHandler {
            await connection.sendingEnded()
        } onCancel: {
            connection.stopWaitingForSending()
        }
        if Task.isCancelled, outcome == .cancelled {
            input.close()
            throw CancellationError()
        }
        if let outcome { throw outcome }
    }

    /// Suspends until the output has ended: nil once everything written was sent (after
    /// ``finishSending()`` or a close), or the error that ended the connection (a reset, a
    /// limit). Returns nil at once for a bound pair.
    package func outputEnded() async -> SocketStreamError? {
        guard let connection else { return nil }
        return await connection.sendingEnded()
    }

    /// Waits until the input has bytes to read, or has ended (for Salut's own streams; returns
    /// at once for others).
    package func waitUntilReadable() async {
        guard let bound = input as? BoundInputStream else { return }
        await bound.connection?.inputWanted()
        await bound.buffer.readable()
    }

    /// Whether the peer has sent at least one byte, read since or not: its end alone does not
    /// count (false for streams other than Salut's own).
    package var hasReceivedBytes: Bool {
        (input as? BoundInputStream)?.buffer.hasBeenWrittenTo ?? false
    }

    /// Ends the connection at once with a reset (RST) instead of an orderly end: what is not
    /// sent yet is dropped, and the peer sees a refusal rather than an end of data. For a
    /// connection that must stop now: a peer that broke the protocol, or made no progress
    /// within its bound. Both streams are closed at once, so a read or write waiting on them
    /// fails (most often as ``StreamFailure/notOpen``); `error` is the connection's own reason,
    /// which a later look at the connection's failure gives. For the two ends of a bound pair
    /// or a connection in memory, it only closes both streams.
    public func reset(_ error: SocketStreamError = .cancelled) {
        connection?.pump.reset(error)
        input.close()
        output.close()
    }

    /// The connection behind socket streams (nil for a bound pair).
    var connection: SocketConnection? { (input as? BoundInputStream)?.connection }

    /// What the TLS peer presented and how the handshake went (its certificate's and public
    /// key's SHA-256, the protocol version, the cipher suite), once the streams are open over
    /// TLS; nil before then and for plain or bound streams. A server that asks for client
    /// certificates without pinning learns here who connected.
    public var peerTrust: TLSPeerTrust? { connection?.details?.tls }

    /// The peer's address once a socket connection is ready (nil for a bound pair).
    public var remoteAddress: SocketAddress? { connection?.details?.remoteAddress }

    /// The bytes the socket connection carried each way so far (nil for a bound pair).
    package var traffic: TrafficCounter? { connection?.pump.traffic }

    /// Addresses and TLS details once a socket connection is ready.
    package var connectionDetails: ConnectionDetails? { connection?.details }

    /// Watches the steps of making the connection (for metrics); set before opening. (An
    /// accepted connection has started before its handler sees it: only its later events are
    /// seen.)
    package func observeConnection(_ observer: @escaping @Sendable (ConnectionEvent) -> Void) {
        connection?.state.withLock { $0.observer = observer }
    }

    /// Upgrades open plain socket streams to TLS after what was written so far is sent (and
    /// then `preface`, a server's go-ahead, in the same step as the handshake starts). The
    /// peer's part of the handshake is bounded by `handshakeTimeout` seconds.
    package func startTLS(
        _ configuration: TLSConfiguration, evaluator: TLSTrustEvaluator?, dialledHost: String?,
        preface: Data? = nil, shared: SharedTLSContext? = nil, handshakeTimeout: TimeInterval? = 10,
        done: @escaping @Sendable (Result<ConnectionDetails, SocketStreamError>) -> Void
    ) {
        guard let connection else { return done(.failure(.tls(.invalidConfiguration("not a socket connection")))) }
        connection.startTLS(
            configuration, evaluator: evaluator, dialledHost: dialledHost, preface: preface, shared: shared,
            handshakeTimeout: handshakeTimeout, done: done)
    }
}
