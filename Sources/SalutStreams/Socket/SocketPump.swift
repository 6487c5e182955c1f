import Dispatch
import Foundation
import Glibc

/// What is known about a connection once it is ready to carry bytes.
package struct ConnectionDetails: Sendable, Hashable {
    /// This end's address and port.
    package var localAddress: SocketAddress?
    /// The peer's address and port.
    package var remoteAddress: SocketAddress?
    /// The peer's certificate and the negotiated TLS version and cipher, when TLS is on.
    package var tls: TLSPeerTrust?
    /// `SO_PRIORITY` and `IP_TOS`/`IPV6_TCLASS` as read back from the connected socket.
    package var socketPriority: Int32?
    package var trafficClass: Int32?
}

/// How to secure a connection: the shared OpenSSL context, the host name that was dialled (for
/// name verification), and an optional evaluator that has the last word on trust.
struct SecuritySetup: @unchecked Sendable {
    // @unchecked: TLSContext is read-only after creation; the evaluator is @Sendable.
    let context: TLSContext
    let dialledHost: String?
    let evaluator: TLSTrustEvaluator?
}

/// Moves bytes between a connected non-blocking socket and the two buffers behind a socket
/// stream pair, driven by libdispatch sources on one serial queue: no thread per connection.
///
/// Inbound, the pump is the buffer's writer: it reads from the socket only as much as the buffer
/// has room for, and pauses reading while it is full (backpressure reaches the peer through TCP).
/// Outbound, it is the reader: it sends what the user wrote, in pieces (`MSG_NOSIGNAL`: no
/// SIGPIPE), and half-closes once the user closed the output and everything is sent. With TLS it
/// first runs the handshake and the trust decision, and only then reports the connection ready;
/// a plain connection can also be upgraded to TLS later (`startTLS`). The descriptor is closed
/// when both directions are finished or the connection fails.
final class SocketPump: @unchecked Sendable {
    // @unchecked: every mutable property is used only on `queue`.

    let queue: DispatchQueue
    let inbound: BoundBuffer
    let outbound: BoundBuffer
    private var fd: Int32 = -1
    private var transport: (any ByteTransport)?
    /// Set while a TLS handshake (or the trust decision after it) is in progress.
    private var handshake: (tls: TLSConnection, setup: SecuritySetup, done: @Sendable (Result<ConnectionDetails, SocketStreamError>) -> Void)?
    private var evaluating = false
    /// An upgrade to TLS asked for while bytes were still waiting to be sent.
    private var pendingUpgrade: (setup: SecuritySetup, done: @Sendable (Result<ConnectionDetails, SocketStreamError>) -> Void)?
    /// A return to plain bytes asked for; `closeNotifySent` once our close_notify is out.
    private var pendingDowngrade: (@Sendable (Result<Void, SocketStreamError>) -> Void)?
    private var closeNotifySent = false
    private var peerCloseNotifyReceived = false
    private var details = ConnectionDetails()
    private var reader: DispatchSourceRead?
    private var writer: DispatchSourceWrite?
    private var readerSuspended = false
    private var writerSuspended = false
    private var readNeedsWritable = false
    private var writeNeedsReadable = false
    /// Bytes taken from `outbound` and not yet sent: `outScratch[sendFrom..<sendTo]`. Both
    /// scratch buffers are allocated on first use and never zeroed, so an idle connection costs
    /// no resident memory for them.
    private lazy var outScratch = UnsafeMutableRawBufferPointer.allocate(byteCount: Self.scratchSize, alignment: 16)
    private var sendFrom = 0
    private var sendTo = 0
    private var sendingFinished = false
    private var finished = false
    private lazy var scratch = UnsafeMutableRawBufferPointer.allocate(byteCount: Self.scratchSize, alignment: 16)
    private var scratchAllocated: (in: Bool, out: Bool) = (false, false)
    private static let scratchSize = 64 * 1024
    /// Called (on the queue) when the connection breaks after it was reported ready.
    var onFailure: (@Sendable (SocketStreamError) -> Void)?

    init(queue: DispatchQueue, inbound: BoundBuffer, outbound: BoundBuffer) {
        self.queue = queue
        self.inbound = inbound
        self.outbound = outbound
    }

    deinit {
        if scratchAllocated.in { scratch.deallocate() }
        if scratchAllocated.out { outScratch.deallocate() }
    }

    /// Starts on a connected socket. Call on the queue. `ready` is called once: at once for a
    /// plain connection, after the handshake and the trust decision with TLS, or with the error.
    func run(_ fd: Int32, security: SecuritySetup?, ready: @escaping @Sendable (Result<ConnectionDetails, SocketStreamError>) -> Void) {
        self.fd = fd
        details.localAddress = SocketAddress.of(fd, peer: false)
        details.remoteAddress = SocketAddress.of(fd, peer: true)
        details.socketPriority = SocketOptions.read(fd, level: SOL_SOCKET, name: SO_PRIORITY)
        details.trafficClass = details.localAddress?.isIPv6 == true
            ? SocketOptions.read(fd, level: Int32(IPPROTO_IPV6), name: IPV6_TCLASS)
            : SocketOptions.read(fd, level: Int32(IPPROTO_IP), name: IP_TOS)
        let read = DispatchSource.makeReadSource(fileDescriptor: fd, queue: queue)
        let write = DispatchSource.makeWriteSource(fileDescriptor: fd, queue: queue)
        // The descriptor is closed only after both sources are done with it.
        let closer = DescriptorCloser(fd: fd, users: 2)
        read.setEventHandler { [weak self] in self?.readable() }
        write.setEventHandler { [weak self] in self?.writable() }
        read.setCancelHandler { closer.release() }
        write.setCancelHandler { closer.release() }
        reader = read
        writer = write
        if let security {
            read.resume()
            write.resume()
            beginHandshake(security, done: ready)
        } else {
            transport = PlainTransport(fd: fd)
            ready(.success(details))
            read.resume()
            write.resume()
        }
    }

    /// Upgrades a plain connection to TLS once everything written so far has been sent.
    ///
    /// Reading in the clear stops at once (bytes after this point belong to TLS). A server
    /// passes its go-ahead as `preface`: it is sent in the same step that starts the handshake,
    /// so the client's first TLS bytes, which can only follow it, are never read as plain data.
    func startTLS(_ security: SecuritySetup, preface: Data? = nil,
                  done: @escaping @Sendable (Result<ConnectionDetails, SocketStreamError>) -> Void) {
        queue.async {
            guard !self.finished, self.transport is PlainTransport, self.handshake == nil, self.pendingUpgrade == nil else {
                return done(.failure(.tls(.invalidConfiguration("the connection is closed, or TLS is already on"))))
            }
            self.pendingUpgrade = (security, done)
            self.upgradePreface = preface ?? Data()
            self.pauseReading()
            self.resumeWriting()
            self.writable()
        }
    }
    private var upgradePreface = Data()

    /// Sends the upgrade's preface in the clear; false while the socket is full.
    private func sendPreface(_ transport: any ByteTransport) -> Bool {
        while !upgradePreface.isEmpty {
            let outcome = upgradePreface.withUnsafeBytes { transport.send(from: $0.baseAddress!, count: $0.count) }
            switch outcome {
            case .moved(let n):
                upgradePreface.removeFirst(n)
            case .wouldBlock, .needsOtherDirection:
                return false
            case .ended, .failed:
                upgradePreface = Data()
            }
        }
        return true
    }

    /// Ends TLS on the connection once everything written so far has been sent, and carries on
    /// in the clear: sends close_notify, and switches to plain bytes when the peer's close_notify
    /// arrives (the peer must do the same). OpenSSL reads record by record, so nothing sent in
    /// the clear after the peer's close_notify is swallowed.
    func stopTLS(done: @escaping @Sendable (Result<Void, SocketStreamError>) -> Void) {
        queue.async {
            guard !self.finished, self.transport is TLSConnection, self.pendingDowngrade == nil else {
                return done(.failure(.tls(.invalidConfiguration("TLS is not on"))))
            }
            self.pendingDowngrade = done
            self.resumeWriting()
            self.writable()
        }
    }

    /// What a direct send did.
    enum DirectSend {
        /// This many bytes went.
        case sent(Int)
        /// The socket is full; nothing went. Waiting for it to drain (`poll` on `fd`) and
        /// trying again keeps the bytes on the direct path.
        case socketFull(fd: Int32)
        /// Buffer the bytes instead (data queued ahead, TLS not ready, or the connection failed:
        /// a failure also ends the buffers, so the buffered write then reports it).
        case useBuffer
    }

    /// Sends straight from the caller's bytes when nothing is queued ahead of them (called from
    /// the writing thread, never on `queue`): saves the copy through the buffer and the hop to
    /// the queue, which is most of the cost of a busy writer.
    func sendDirectly(from buffer: UnsafeRawPointer, length: Int) -> DirectSend {
        queue.sync {
            guard !finished, handshake == nil, !evaluating, pendingUpgrade == nil, pendingDowngrade == nil, !writeNeedsReadable,
                  let transport, writer != nil, sendFrom == sendTo, outbound.snapshot.available == 0 else { return .useBuffer }
            switch transport.send(from: buffer, count: length) {
            case .moved(let n):
                return .sent(n)
            case .wouldBlock:
                return .socketFull(fd: fd)
            case .ended:
                return .useBuffer
            case .needsOtherDirection:
                // TLS must read before it can write: the buffered copy of these bytes is sent
                // (first, and at least as long) once the socket has been read.
                writeNeedsReadable = true
                resumeReading()
                return .useBuffer
            case .failed(let error):
                fail(error)
                return .useBuffer
            }
        }
    }

    /// The user read from the inbound buffer (room again) or closed the input stream.
    func inboundChanged() {
        queue.async {
            if self.inbound.readerClosed { self.stopReading() } else if self.handshake == nil && !self.evaluating { self.resumeReading() }
            self.closeIfDone()
        }
    }

    /// The user wrote to the outbound buffer or closed the output stream.
    func outboundChanged() {
        queue.async {
            guard self.handshake == nil, !self.evaluating, self.writer != nil, self.writerSuspended, !self.writeNeedsReadable else { return }
            self.resumeWriting()
            self.writable()
        }
    }

    // MARK: TLS set-up

    private func beginHandshake(_ setup: SecuritySetup, done: @escaping @Sendable (Result<ConnectionDetails, SocketStreamError>) -> Void) {
        do {
            let tls = try TLSConnection(context: setup.context, fd: fd, dialledHost: setup.dialledHost)
            handshake = (tls, setup, done)
            stepHandshake()
        } catch {
            failSetup(.tls(error as? TLSError ?? .handshakeFailed("\(error)")), done: done)
        }
    }

    private func stepHandshake() {
        guard let current = handshake else { return }
        switch current.tls.handshakeStep() {
        case .wantRead:
            resumeReadingSource()
            pauseWriting()
        case .wantWrite:
            resumeWriting()
        case .failed(let error):
            handshake = nil
            failSetup(.tls(error), done: current.done)
        case .done:
            handshake = nil
            evaluating = true
            pauseReading()
            pauseWriting()
            let trust = current.tls.peerTrust()
            if let evaluator = current.setup.evaluator {
                evaluator(trust) { accepted in
                    self.queue.async { self.decided(trust, accepted: accepted, tls: current.tls, done: current.done) }
                }
            } else {
                decided(trust, accepted: trust.policyFailure == nil, tls: current.tls, done: current.done)
            }
        }
    }

    private func decided(_ trust: TLSPeerTrust, accepted: Bool, tls: TLSConnection,
                         done: @Sendable (Result<ConnectionDetails, SocketStreamError>) -> Void) {
        evaluating = false
        guard !finished else { return done(.failure(.cancelled)) }
        guard accepted else {
            return failSetup(.tls(trust.policyFailure ?? .rejectedByEvaluator), done: done)
        }
        transport = tls
        details.tls = trust
        done(.success(details))
        resumeReading()
        resumeWriting()
        writable()
    }

    private func failSetup(_ error: SocketStreamError, done: @Sendable (Result<ConnectionDetails, SocketStreamError>) -> Void) {
        let wasReady = transport != nil
        fail(error, report: wasReady)
        done(.failure(error))
    }

    // MARK: Events

    /// Reads until the socket has nothing more, the buffer is full, or the peer closed.
    /// libdispatch does not promise another event while data remains, so one event drains all.
    private func readable() {
        if writeNeedsReadable {
            writeNeedsReadable = false
            resumeWriting()
            queue.async { self.writable() }
        }
        if handshake != nil { return stepHandshake() }
        guard !evaluating, pendingUpgrade == nil, let transport else { return }
        if peerCloseNotifyReceived && pendingDowngrade == nil { return awaitPeerIntent() }
        while reader != nil {
            let room = inbound.snapshot.space
            guard room > 0 else { return pauseReading() }
            scratchAllocated.in = true
            let buffer = scratch
            switch transport.receive(into: buffer.baseAddress!, count: min(room, buffer.count)) {
            case .moved(let n):
                _ = inbound.write(from: buffer.baseAddress!.assumingMemoryBound(to: UInt8.self), length: n, blocking: false)
            case .ended where pendingDowngrade != nil:
                // The peer's close_notify: TLS ends once ours is out too.
                peerCloseNotifyReceived = true
                if closeNotifySent { return finishDowngrade() }
                pauseReading()      // nothing more comes over TLS; wait for ours to go
                return
            case .ended where transport is TLSConnection:
                // close_notify: the peer either closes the connection (TCP end follows) or
                // leaves TLS and goes on in the clear (when we stop TLS too). Tell them apart
                // by what comes next on the socket.
                peerCloseNotifyReceived = true
                return awaitPeerIntent()
            case .ended:
                inbound.closeWriter()          // the peer closed: end of data after the buffered bytes
                stopReading()
                closeIfDone()
                return
            case .wouldBlock:
                return
            case .needsOtherDirection:
                readNeedsWritable = true
                resumeWriting()
                return
            case .failed(let error):
                return fail(error)
            }
        }
    }

    /// Sends until the socket is full or nothing is left to send; then pauses, starts a pending
    /// TLS upgrade, or half-closes once the user has closed the output and everything is sent.
    private func writable() {
        if handshake != nil { return stepHandshake() }
        guard !evaluating, let transport else { return }
        if readNeedsWritable {
            readNeedsWritable = false
            readable()
        }
        while writer != nil {
            if sendFrom == sendTo && outbound.snapshot.available == 0 {
                // Nothing to send: decide without touching (allocating) the scratch buffer.
                if let upgrade = pendingUpgrade {
                    guard sendPreface(transport) else { return }
                    pendingUpgrade = nil
                    return beginHandshake(upgrade.setup, done: upgrade.done)
                } else if pendingDowngrade != nil {
                    return sendCloseNotify()
                } else if outbound.writerClosed || outbound.readerClosed {
                    return finishSending(transport)
                } else {
                    return pauseWriting()
                }
            }
            scratchAllocated.out = true
            let buffer = outScratch
            if sendFrom == sendTo {
                let got = outbound.read(into: buffer.baseAddress!.assumingMemoryBound(to: UInt8.self), maxLength: buffer.count, blocking: false)
                if let got, got > 0 {
                    sendFrom = 0
                    sendTo = got
                } else if let upgrade = pendingUpgrade {
                    pendingUpgrade = nil
                    return beginHandshake(upgrade.setup, done: upgrade.done)
                } else if outbound.writerClosed || outbound.readerClosed {
                    return finishSending(transport)
                } else {
                    return pauseWriting()
                }
            }
            switch transport.send(from: buffer.baseAddress! + sendFrom, count: sendTo - sendFrom) {
            case .moved(let n):
                sendFrom += n
            case .wouldBlock:
                return
            case .needsOtherDirection:
                writeNeedsReadable = true
                pauseWriting()
                resumeReading()
                return
            case .ended:
                return fail(.connectionLost("the connection was closed while sending"))
            case .failed(let error):
                return fail(error)
            }
        }
    }

    /// After the peer's close_notify, with no return to plain bytes asked for: the end of the
    /// TCP stream is the end of the data; plain bytes wait (unread) for `stopTLS`.
    private func awaitPeerIntent() {
        var byte: UInt8 = 0
        let n = recv(fd, &byte, 1, Int32(MSG_PEEK) | Int32(MSG_DONTWAIT))
        if n == 0 {
            inbound.closeWriter()
            stopReading()
            closeIfDone()
        } else if n > 0 {
            pauseReading()          // stopTLS picks these up
        } else if errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR {
            fail(.connectionLost(String(cString: strerror(errno))))
        }
    }

    /// Sends our close_notify for `stopTLS`, then waits (reading) for the peer's.
    private func sendCloseNotify() {
        guard let tls = transport as? TLSConnection, !closeNotifySent else { return pauseWriting() }
        switch tls.sendCloseNotify() {
        case .wouldBlock: return
        case .needsOtherDirection:
            writeNeedsReadable = true
            pauseWriting()
        case .failed(let error):
            let done = pendingDowngrade
            pendingDowngrade = nil
            fail(error)
            done?(.failure(error))
        default:
            closeNotifySent = true
            pauseWriting()
            if peerCloseNotifyReceived { finishDowngrade() } else { resumeReading() }
        }
    }

    /// Both close_notify alerts have crossed: carry on in the clear.
    private func finishDowngrade() {
        guard let done = pendingDowngrade else { return }
        pendingDowngrade = nil
        closeNotifySent = false
        peerCloseNotifyReceived = false
        transport = PlainTransport(fd: fd)
        details.tls = nil
        done(.success(()))
        resumeWriting()
        queue.async { self.writable() }
        resumeReading()
        readable()
    }

    private func finishSending(_ transport: any ByteTransport) {
        guard !sendingFinished else { return }
        switch transport.finishSending() {
        case .wouldBlock: return
        case .needsOtherDirection:
            writeNeedsReadable = true
            pauseWriting()
        default:
            sendingFinished = true
            stopWriting()
            closeIfDone()
        }
    }

    // MARK: Sources

    private func pauseReading() {
        guard let reader, !readerSuspended else { return }
        readerSuspended = true
        reader.suspend()
    }

    private func resumeReadingSource() {
        guard let reader, readerSuspended else { return }
        readerSuspended = false
        reader.resume()
    }

    private func resumeReading() {
        guard reader != nil, readerSuspended else { return }
        resumeReadingSource()
        // Bytes (or the peer's EOF) that arrived while suspended, or plaintext OpenSSL holds,
        // may not raise a new event; look once now.
        readable()
    }

    private func pauseWriting() {
        guard let writer, !writerSuspended else { return }
        writerSuspended = true
        writer.suspend()
    }

    private func resumeWriting() {
        guard let writer, writerSuspended else { return }
        writerSuspended = false
        writer.resume()
    }

    private func stopReading() {
        guard let reader else { return }
        if readerSuspended { reader.resume(); readerSuspended = false }
        reader.cancel()
        self.reader = nil
    }

    private func stopWriting() {
        guard let writer else { return }
        if writerSuspended { writer.resume(); writerSuspended = false }
        writer.cancel()
        self.writer = nil
    }

    /// Both directions finished (or both streams closed): release the socket.
    private func closeIfDone() {
        let inputDone = reader == nil || inbound.readerClosed
        let outputDone = writer == nil   // stopped after the half-close, or never to write again
        guard inputDone && outputDone, !finished else { return }
        finished = true
        stopReading()
        stopWriting()
    }

    private func fail(_ error: SocketStreamError, report: Bool = true) {
        guard !finished else { return }
        finished = true
        stopReading()
        stopWriting()
        inbound.closeWriter()
        outbound.closeReader()
        if report { onFailure?(error) }
    }
}

/// Closes a descriptor once every dispatch source using it has been cancelled.
final class DescriptorCloser: @unchecked Sendable {
    // @unchecked: `users` is guarded by `lock`.
    private let lock = NSLock()
    private let fd: Int32
    private var users: Int

    init(fd: Int32, users: Int) {
        self.fd = fd
        self.users = users
    }

    func release() {
        lock.lock()
        users -= 1
        let last = users == 0
        lock.unlock()
        if last { close(fd) }
    }
}
