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
    /// `SO_PRIORITY` and `IP_TOS`/`IPV6_TCLASS` as read back from the connected socket, when
    /// the connection set either (nil otherwise: the system's defaults apply).
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
    /// Whether `evaluator` is asked inside the handshake, once the peer's chain is verified (a
    /// listener's, which judges and records nothing: see `StreamListener`), rather than at its
    /// end. Inside, the peer has not yet proved it holds the key (its CertificateVerify comes
    /// next), so an evaluator that records keys (a session's trust on first use) waits for the end.
    var asksEvaluatorInHandshake = false
}

/// Moves bytes between a connected non-blocking socket and the two buffers behind a socket
/// stream pair, driven by the ``ReadinessLoop`` on one serial queue: no thread per connection.
///
/// This is the I/O shell around ``SocketPump.StateMachine``, which makes every decision: the
/// shell turns socket readiness and the user's reads, writes and closes into the machine's
/// events, performs the actions it returns (receive, send, handshake steps, half-close,
/// release), reports their outcomes back as events, and tells the socket's ``ReadinessWatch``
/// what the machine wants to hear of.
///
/// Inbound, the pump is the buffer's writer: it reads from the socket only as much as the buffer
/// has room for (backpressure reaches the peer through TCP). Outbound, it is the reader: it sends
/// what the user wrote, in pieces (`MSG_NOSIGNAL`: no SIGPIPE), and half-closes once the user
/// closed the output and everything is sent. With TLS it runs the handshake and the trust
/// decision before reporting the connection ready. The descriptor is closed when both
/// directions are finished or the connection fails; until then the pump keeps itself alive, so
/// streams dropped without closing still end it (their deinit closes the buffers).
final class SocketPump: @unchecked Sendable {
    // @unchecked: every mutable property is used only on `queue` (the public entry points hop
    // onto it; a thread's `sendDirectly` runs inside `queue.sync`, a task's in `queue.async`).

    let queue: DispatchQueue
    let inbound: BoundBuffer
    let outbound: BoundBuffer
    private var machine = SocketPump.StateMachine()
    private var fd: Int32 = -1
    private var transport: (any ByteTransport)?
    /// The TLS session being set up (handshake, trust decision) and its policy.
    private var pendingTLS: (connection: TLSConnection, setup: SecuritySetup)?
    /// The trust evaluator's verdict on the peer of `pendingTLS`, asked during its handshake.
    private var pendingVerdict: HandshakeVerdict?
    /// What the peer of `pendingTLS` presented, once its handshake is done.
    private var pendingTrust: TLSPeerTrust?
    /// Security for an upgrade that has not reached its handshake yet.
    private var upgradeSetup: SecuritySetup?
    private var upgradePreface = Data()
    /// Told once when the connection (or an upgrade) is ready or has failed.
    private var pendingReady: (@Sendable (Result<ConnectionDetails, SocketStreamError>) -> Void)?
    /// A ready report waiting for the end of the current `handle` (after the watch is set):
    /// whoever it wakes finds the queue free.
    private var readyReport:
        (callback: @Sendable (Result<ConnectionDetails, SocketStreamError>) -> Void, details: ConnectionDetails)?
    /// Told once when a return to plain bytes is done or has failed.
    private var pendingDowngrade: (@Sendable (Result<Void, SocketStreamError>) -> Void)?
    private var details = ConnectionDetails()
    /// The socket's watch in the ``ReadinessLoop``, made the first time the machine wants to
    /// hear from the socket: a dormant connection, and one whose writes all go straight out,
    /// never has one.
    private var watcher: ReadinessWatch?
    /// Whether the descriptor is still the pump's (until ``release()`` closes it).
    private var holdsDescriptor = false
    private var watching: Readiness = []
    private var readerWasResumed = false
    /// Itself, from `run` until released: the watch holds the pump weakly.
    private var keepAlive: SocketPump?
    /// The most bytes received into `inbound` in one step. (Neither direction copies through
    /// scratch space: bytes are received straight into `inbound` and sent from `outbound`.)
    private static let receiveSize = 64 * 1024
    /// The most bytes received in one step before `inbound` has its storage.
    private static let firstReceiveSize = 4 * 1024
    /// Called (on the queue) when the connection breaks after it was reported ready.
    var onFailure: (@Sendable (SocketStreamError) -> Void)?
    /// Called once (on the queue) when the output is done: nil once everything was sent and our
    /// end of the data went out, or the error that stopped it.
    var onSendingEnded: (@Sendable (SocketStreamError?) -> Void)?
    /// Called once (on the queue) when the connection's set-up ends: it is set up (see
    /// ``ConnectionDeadlines``), or it ended before that. Set before `run`.
    var onSetUpEnded: (@Sendable () -> Void)?
    /// The connection's time bounds, and the one timer that enforces them (armed for
    /// `timerDeadline`; created on first need).
    private var deadlines: ConnectionDeadlines?
    private var timer: DispatchSourceTimer?
    private var timerDeadline: ContinuousClock.Instant?

    /// The bytes this connection carried each way (see ``TrafficCounter``).
    let traffic = TrafficCounter()

    init(queue: DispatchQueue, inbound: BoundBuffer, outbound: BoundBuffer) {
        self.queue = queue
        self.inbound = inbound
        self.outbound = outbound
        queue.setSpecific(key: Self.queueKey, value: ObjectIdentifier(self))
    }

    /// Marks the pump's queue, so that `sendDirectly` can tell it is called from it.
    private static let queueKey = DispatchSpecificKey<ObjectIdentifier>()

    /// Starts on a connected socket. Call on the queue. `ready` is called once: at once for a
    /// plain connection, after the handshake and the trust decision with TLS, or with the error.
    /// `limits` bound the handshake, the first byte and silence (see ``ConnectionDeadlines``),
    /// counted from now. `readsTrafficOptions`: read the priority and traffic class back into
    /// the details (two system calls, spent only when the connection set them). `readsAtOnce`:
    /// false leaves a plain connection without deadlines unread until ``readingWanted()``.
    /// `remoteAddress`: where a dialled socket was connected (saves asking the system).
    func run(
        _ fd: Int32, security: SecuritySetup?, limits: ConnectionLimits? = nil, readsTrafficOptions: Bool = false,
        readsAtOnce: Bool = true, remoteAddress: SocketAddress? = nil,
        ready: @escaping @Sendable (Result<ConnectionDetails, SocketStreamError>) -> Void
    ) {
        dispatchPrecondition(condition: .onQueue(queue))
        self.fd = fd
        keepAlive = self
        pendingReady = ready
        deadlines = limits?.deadlines(secure: security != nil, now: .now)
        details.localAddress = SocketAddress.of(fd, peer: false)
        details.remoteAddress = remoteAddress ?? SocketAddress.of(fd, peer: true)
        if readsTrafficOptions {
            details.socketPriority = SocketOptions.read(fd, level: SOL_SOCKET, name: SO_PRIORITY)
            details.trafficClass =
                details.localAddress?.isIPv6 == true
                ? SocketOptions.read(fd, level: Int32(IPPROTO_IPV6), name: IPV6_TCLASS)
                : SocketOptions.read(fd, level: Int32(IPPROTO_IP), name: IP_TOS)
        }
        holdsDescriptor = true
        if let security {
            upgradeSetup = security
            handle { $0.start(secure: true) }
        } else {
            transport = PlainTransport(fd: fd)
            handle { $0.start(secure: false, readsAtOnce: readsAtOnce || deadlines != nil) }
            // The first look at the socket waits for its watch, so an input stream
            // closed before the pump started (its news reached an idle machine) is told now.
            if inbound.snapshot.readerClosed { handle { $0.inboundChanged(readerClosed: true) } }
        }
    }

    /// Upgrades a plain connection to TLS once everything written so far has been sent.
    ///
    /// Reading in the clear stops at once (bytes after this point belong to TLS). A server
    /// passes its go-ahead as `preface`: it is sent in the same step that starts the handshake,
    /// so the client's first TLS bytes, which can only follow it, are never read as plain data.
    /// `handshakeTimeout` bounds the whole change, from this call (nil: the connection's own
    /// handshake limit, if it has one).
    func startTLS(
        _ security: SecuritySetup, preface: Data? = nil, handshakeTimeout: TimeInterval? = nil,
        done: @escaping @Sendable (Result<ConnectionDetails, SocketStreamError>) -> Void
    ) {
        queue.async {
            if self.pendingReady != nil || self.pendingDowngrade != nil {
                return done(.failure(.tls(.invalidConfiguration("a TLS change is already under way"))))
            }
            self.pendingReady = done
            self.upgradeSetup = security
            self.upgradePreface = preface ?? Data()
            self.handle { machine in
                let actions = machine.startTLS()
                // The bound runs once the change is under way (a refused one arms nothing).
                if !actions.contains(where: { if case .rejectChange = $0 { true } else { false } }) {
                    let limit = ConnectionLimits.duration(handshakeTimeout)
                    if self.deadlines == nil, limit != nil {
                        self.deadlines = ConnectionDeadlines(
                            handshake: limit, firstByte: nil, idle: nil, secure: false, now: .now)
                    }
                    self.deadlines?.handshakeStarted(at: .now, limit: limit)
                }
                return actions
            }
        }
    }

    /// Ends TLS on the connection once everything written so far has been sent, and carries on
    /// in the clear: sends close_notify, and switches to plain bytes when the peer's close_notify
    /// arrives (the peer must do the same). Plain bytes the socket BIO read ahead along with
    /// that close_notify are handed to the plain transport first, so none is swallowed.
    func stopTLS(done: @escaping @Sendable (Result<Void, SocketStreamError>) -> Void) {
        queue.async {
            if self.pendingReady != nil || self.pendingDowngrade != nil {
                return done(.failure(.tls(.invalidConfiguration("a TLS change is already under way"))))
            }
            self.pendingDowngrade = done
            self.handle { $0.stopTLS() }
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
    /// a writing thread, never on `queue` nor from a task: see ``sendDirectly(_:from:)``): saves
    /// the copy through the buffer and the hop to the queue, which is most of the cost of a busy
    /// writer.
    func sendDirectly(from buffer: UnsafeRawPointer, length: Int) -> DirectSend {
        // Never from the queue itself (a trust evaluator or connection observer writing): that
        // would wait for itself. The buffered path is taken instead.
        guard DispatchQueue.getSpecific(key: Self.queueKey) != ObjectIdentifier(self) else { return .useBuffer }
        // The non-generic `sync` (the generic one wraps the block in closures of its own).
        var outcome = DirectSend.useBuffer
        queue.sync { outcome = sendDirectlyOnQueue(from: buffer, length: length) }
        return outcome
    }

    /// `sendDirectly` for a task (the async write): the same send, made on `queue` while the
    /// task waits suspended. A task must not block in `queue.sync` as a thread may: the
    /// cooperative pool's threads come from the global pool that `queue` targets, so with every
    /// one of them waiting on a queue that has work queued, nothing runs that work until
    /// libdispatch adds a thread (about a second later).
    func sendDirectly(_ data: Data, from offset: Int) async -> DirectSend {
        await onQueue {
            data.withUnsafeBytes { raw in
                self.sendDirectlyOnQueue(from: raw.baseAddress! + offset, length: raw.count - offset)
            }
        }
    }

    /// Runs `work` on `queue` while the calling task waits suspended: how a task does what a
    /// thread does in `queue.sync`.
    private func onQueue<Result: Sendable>(_ work: @escaping @Sendable () -> Result) async -> Result {
        await withCheckedContinuation { (continuation: CheckedContinuation<Result, Never>) in
            queue.async { continuation.resume(returning: work()) }
        }
    }

    /// `sendDirectly` on the queue.
    private func sendDirectlyOnQueue(from buffer: UnsafeRawPointer, length: Int) -> DirectSend {
        guard machine.allowsDirectSend, let transport, outbound.snapshot.available == 0 else {
            return .useBuffer
        }
        // As much as the socket takes in this one visit (TLS sends a record a call): a writer
        // that came back for each record would pay a hop to the queue per 16 KiB. With TLS, a
        // record at a time: a write that finds the socket full must be retried with all the
        // bytes of the call that began its pending record (OpenSSL refuses fewer), and these
        // bytes may have to be retried from the output buffer, which hands over one record's
        // worth in one piece (see `SocketConnection`), not more.
        let piece = transport is TLSConnection ? TLSConnection.largestRecord : length
        var sent = 0
        var outcome = TransferOutcome.moved(0)
        while sent < length {
            outcome = transport.send(from: buffer + sent, count: min(piece, length - sent))
            guard case .moved(let n) = outcome, n > 0 else { break }
            sent += n
        }
        if sent > 0 {
            traffic.add(sent: sent)
            if deadlines != nil { carried() }
        }
        // What stopped the loop is told now; once some bytes went, the next write meets it.
        var cutShort = false
        switch outcome {
        case .moved, .ended:
            break
        case .wouldBlock:
            guard sent > 0 else { return .socketFull(fd: fd) }
            cutShort = true
        case .needsOtherDirection:
            // TLS must read before it can write: the buffered copy of the bytes left is sent
            // (first, and at least as long) once the socket has been read.
            handle { $0.directSendNeedsReadable() }
            cutShort = true
        case .failed(let error):
            handle { $0.directSendFailed(error) }
        }
        guard sent > 0 else { return .useBuffer }
        if cutShort, transport is TLSConnection {
            // The piece cut short may be a record OpenSSL holds, pending: its bytes must be the
            // next ones sent, so they go into the (empty) output buffer now, not back to a
            // caller that might never write them again (a cancelled or timed-out write).
            let cut = min(piece, length - sent)
            let from = (buffer + sent).assumingMemoryBound(to: UInt8.self)
            if case .wrote(let n) = outbound.write(from: from, length: cut, blocking: false) { sent += n }
        }
        return .sent(sent)
    }

    /// The application started using its input stream (see ``SocketPump.StateMachine/Input/dormant``):
    /// done before returning, so that what already waits in the socket is in the buffer for the
    /// caller's next look. From the queue itself (a trust evaluator or observer), it follows the
    /// current handler instead.
    func readingWanted() {
        if DispatchQueue.getSpecific(key: Self.queueKey) == ObjectIdentifier(self) {
            queue.async { self.handle { $0.readingWanted() } }
        } else {
            queue.sync { handle { $0.readingWanted() } }
        }
    }

    /// `readingWanted` for a task: done on `queue` while the task waits suspended (never
    /// `queue.sync` from a task: see ``sendDirectly(_:from:)``).
    func readingWanted() async {
        await onQueue { self.handle { $0.readingWanted() } }
    }

    /// The user read from the inbound buffer (room again) or closed the input stream.
    func inboundChanged() {
        queue.async {
            let closed = self.inbound.snapshot.readerClosed
            self.handle { $0.inboundChanged(readerClosed: closed) }
        }
    }

    /// The user wrote to the outbound buffer or closed the output stream.
    func outboundChanged() {
        queue.async { self.handle { $0.outboundChanged() } }
    }

    /// Both streams were closed: a connection still in its TLS handshake is given up.
    func abandon() {
        queue.async { self.handle { $0.abandoned() } }
    }

    /// Cuts the connection with `error` if it is still setting up (a listener making room for
    /// a new connection; one that finished meanwhile is left alone).
    func cutIfSettingUp(_ error: SocketStreamError) {
        queue.async {
            guard self.onSetUpEnded != nil else { return }
            self.handle { $0.failed(error) }
        }
    }

    /// Ends the connection with a reset (RST) rather than a close: its peer sees a refusal,
    /// not an empty answer. Whoever waits on the streams gets `error`.
    func reset(_ error: SocketStreamError) {
        queue.async {
            guard !self.machine.isClosed, self.fd >= 0 else { return }
            var linger = Glibc.linger(l_onoff: 1, l_linger: 0)
            // Should this fail, the close that follows is an orderly one: still an end.
            _ = setsockopt(self.fd, SOL_SOCKET, SO_LINGER, &linger, socklen_t(MemoryLayout<Glibc.linger>.size))
            self.handle { $0.failed(error) }
        }
    }

    // MARK: The shell

    /// Feeds one event to the machine and performs what follows, in order, until nothing is
    /// left; then watches the socket as the machine wants.
    private func handle(_ event: (inout SocketPump.StateMachine) -> [SocketPump.StateMachine.Action]) {
        var work = event(&machine)[...]
        while true {
            while let action = work.popFirst() {
                let more = perform(action)
                if !more.isEmpty { work = more[...] + work }
            }
            // Reading resumed after a pause: bytes OpenSSL or our socket BIO already hold make
            // the socket no more readable, so look once at once.
            guard watch() else { break }
            work = machine.socketReadable()[...]
        }
        if deadlines != nil, !machine.isClosed { armTimer() }
        if let report = readyReport {
            readyReport = nil
            report.callback(.success(report.details))
        }
    }

    /// Performs one action; returns the machine's answer to its outcome.
    private func perform(_ action: SocketPump.StateMachine.Action) -> [SocketPump.StateMachine.Action] {
        switch action {
        case .stepHandshake:
            return stepHandshake()
        case .evaluateTrust:
            return evaluateTrust()
        case .reportReady:
            if let tls = pendingTLS {
                transport = tls.connection
                details.tls = pendingTrust ?? tls.connection.peerTrust()
                tls.connection.judgeInHandshake = nil  // (never asked: no certificate was verified)
                pendingTLS = nil
                pendingVerdict = nil
                pendingTrust = nil
            }
            if let ready = pendingReady { readyReport = (ready, details) }
            pendingReady = nil
            return []
        case .receive:
            return receive()
        case .send:
            return send()
        case .sendPreface:
            return machine.prefaceSent(complete: sendPreface())
        case .sendCloseNotify:
            guard let tls = transport as? TLSConnection else { return machine.closeNotifySent(.ended) }
            return machine.closeNotifySent(tls.sendCloseNotify())
        case .finishSending:
            let outcome = transport?.finishSending() ?? .ended
            switch outcome {
            case .moved, .ended: sendingEnded(nil)
            case .failed(let error): sendingEnded(error)
            case .wouldBlock, .needsOtherDirection: break
            }
            return machine.sendingFinished(outcome)
        case .peekAtSocket:
            return machine.peeked(peek())
        case .endInbound:
            inbound.closeWriter()
            return []
        case .switchToPlain:
            // What TLS read ahead past the peer's close_notify is the start of the plain bytes.
            let carried = (transport as? TLSConnection)?.takeUnreadBytes() ?? []
            transport = PlainTransport(fd: fd, carriedOver: carried)
            details.tls = nil
            let done = pendingDowngrade
            pendingDowngrade = nil
            done?(.success(()))
            return []
        case .rejectChange(let reason):
            // Only the request being refused is pending here (a change under way refuses
            // another before it reaches the machine).
            failPendingRequests(.tls(.invalidConfiguration(reason)))
            return []
        case .fail(let error, _, let breaks):
            // The streams learn the error before their buffers end, so a reader woken by the
            // end sees the failure, never a clean end of data. A ready report not yet delivered
            // (the connection failed in the step that made it ready) becomes the failure.
            if let report = readyReport {
                readyReport = nil
                report.callback(.failure(error))
            } else if breaks {
                onFailure?(error)
            }
            sendingEnded(error)
            failPendingRequests(error)
            inbound.closeWriter()
            outbound.closeReader()
            return []
        case .release:
            release()
            return []
        }
    }

    /// Tells whoever waits for a connect, an upgrade or a downgrade that it failed.
    private func failPendingRequests(_ error: SocketStreamError) {
        let ready = pendingReady, downgrade = pendingDowngrade
        pendingReady = nil
        pendingDowngrade = nil
        ready?(.failure(error))
        downgrade?(.failure(error))
    }

    private func stepHandshake() -> [SocketPump.StateMachine.Action] {
        if pendingTLS == nil {
            guard let setup = upgradeSetup else {
                return machine.handshakeStepped(.failed(.invalidConfiguration("no TLS settings")))
            }
            upgradeSetup = nil
            // What an earlier TLS session read ahead and was not read in the clear comes after
            // the switch, so it belongs to this session (as bytes still in the socket would).
            let carried = (transport as? PlainTransport)?.takeCarriedOver() ?? []
            do {
                let connection = try TLSConnection(
                    context: setup.context, fd: fd, dialledHost: setup.dialledHost,
                    carriedOver: carried)
                if let evaluator = setup.evaluator, setup.asksEvaluatorInHandshake {
                    // An evaluator that answers at once refuses inside the handshake (the peer
                    // hears an alert); a later answer is waited for at the handshake's end.
                    let verdict = HandshakeVerdict()
                    let peer = details.remoteAddress.map { "\($0)" } ?? "?"
                    connection.judgeInHandshake = { trust in
                        let accepted = verdict.ask(evaluator, about: trust)
                        if accepted == false {
                            SalutLogging.logger.notice(
                                "TLS peer \(peer) (key SHA-256 \(trust.publicKeySHA256)) refused by the trust evaluator during the handshake"
                            )
                        }
                        return accepted
                    }
                    pendingVerdict = verdict
                } else if setup.evaluator == nil {
                    // Without an evaluator to overrule it, a pin is final: checked as the peer's
                    // certificate arrives, before ours goes out.
                    connection.pinsCheckedInHandshake = setup.context.configuration.pinnedSHA256
                        .compactMap(Fingerprint.decode).map(Fingerprint.hex)
                }
                pendingTLS = (connection, setup)
            } catch {
                return machine.handshakeStepped(.failed(error as? TLSError ?? .handshakeFailed("\(error)")))
            }
        }
        return machine.handshakeStepped(pendingTLS!.connection.handshakeStep())
    }

    private func evaluateTrust() -> [SocketPump.StateMachine.Action] {
        guard let (tls, setup) = pendingTLS else { return [] }
        // The peer's part is done; the trust decision is ours (a delegate may ask a person).
        if deadlines?.handshakeFinished(at: .now) == true { setUpEnded() }
        let trust = tls.peerTrust()
        pendingTrust = trust
        let failure = trust.policyFailure ?? .rejectedByEvaluator
        let peer = details.remoteAddress.map { "\($0)" } ?? "?"
        guard let evaluator = setup.evaluator else {
            if let refusal = trust.policyFailure {
                SalutLogging.logger.notice(
                    "TLS peer \(peer) refused (key SHA-256 \(trust.publicKeySHA256)): \(refusal)")
            } else {
                SalutLogging.logger.debug(
                    "TLS peer \(peer) trusted (key SHA-256 \(trust.publicKeySHA256), \(trust.protocolVersion))")
            }
            return machine.trustDecided(accepted: trust.policyFailure == nil, failure: failure)
        }
        // The first answer counts: an evaluator that calls back twice changes nothing after it.
        let answered = OnceFlag()
        let decide: @Sendable (Bool) -> Void = { [weak self] accepted in
            guard answered.claim(), let self else { return }
            if !accepted {
                SalutLogging.logger.notice(
                    "TLS peer \(peer) (key SHA-256 \(trust.publicKeySHA256)) refused by the trust evaluator")
            }
            self.queue.async { self.handle { $0.trustDecided(accepted: accepted, failure: failure) } }
        }
        // Asked during the handshake already (it accepted, or answers later): that answer.
        if let verdict = pendingVerdict, verdict.whenAnswered(decide) { return [] }
        evaluator(trust, decide)
        return []
    }

    /// Receives once into the inbound buffer.
    private func receive() -> [SocketPump.StateMachine.Action] {
        guard let transport else { return [] }
        let buffer = inbound.snapshot
        // A reader that closed before the pump ran (or during a handshake) is told now.
        if buffer.readerClosed { return machine.inboundChanged(readerClosed: true) }
        guard buffer.space > 0 else { return machine.inboundFull() }
        var outcome = TransferOutcome.wouldBlock
        if inbound.hasStorage {
            // Received (decrypted) straight into the buffer's free space: no copy through
            // scratch. The pump is the buffer's only writer, and the reader only ever frees
            // room, so the room seen above is still there.
            _ = inbound.fill(atMost: Self.receiveSize) { region in
                outcome = transport.receive(into: region.baseAddress!, count: region.count)
                return outcome.movedCount
            }
        } else {
            // Until the first bytes come, through a little memory on the stack: a connection
            // that stays silent never allocates its input buffer.
            withUnsafeTemporaryAllocation(byteCount: Self.firstReceiveSize, alignment: 16) { first in
                // (No more than the buffer has room for: a small one takes only part.)
                outcome = transport.receive(into: first.baseAddress!, count: min(first.count, buffer.space))
                if case .moved(let n) = outcome {
                    _ = inbound.write(
                        from: first.baseAddress!.assumingMemoryBound(to: UInt8.self), length: n, blocking: false)
                }
            }
        }
        switch outcome {
        case .moved(let n):
            traffic.add(received: n)
            if deadlines != nil { carried() }
        case .ended:
            if deadlines != nil { carried() }
        default:
            break
        }
        return machine.received(outcome)
    }

    /// Sends once from the outbound buffer, straight from its storage: no copy through scratch.
    /// A record TLS could not finish sending is finished by the next call, whose bytes start
    /// with the same ones (they stay unread until sent; OpenSSL accepts them at a new address).
    private func send() -> [SocketPump.StateMachine.Action] {
        guard let transport else { return [] }
        var outcome: TransferOutcome?
        _ = outbound.drain(atMost: .max) { region in
            let result = transport.send(from: region.baseAddress!, count: region.count)
            outcome = result
            return result.movedCount
        }
        guard let outcome else {
            let state = outbound.snapshot
            return machine.nothingToSend(outputClosed: state.writerClosed || state.readerClosed)
        }
        if case .moved(let n) = outcome {
            traffic.add(sent: n)
            if deadlines != nil { carried() }
        }
        return machine.sent(outcome)
    }

    /// Sends the upgrade's preface in the clear; false while the socket is full.
    private func sendPreface() -> Bool {
        guard let transport else { return true }
        while !upgradePreface.isEmpty {
            let outcome = upgradePreface.withUnsafeBytes { transport.send(from: $0.baseAddress!, count: $0.count) }
            switch outcome {
            case .moved(let n):
                upgradePreface.removeFirst(n)
                traffic.add(sent: n)
            case .wouldBlock, .needsOtherDirection:
                return false
            case .ended, .failed:
                upgradePreface = Data()  // the handshake that follows reports the broken connection
            }
        }
        return true
    }

    /// After the peer's close_notify: has the TCP stream ended, or do plain bytes follow?
    private func peek() -> SocketPump.StateMachine.Peek {
        // Plain bytes may already have been read ahead, along with the close_notify.
        if let tls = transport as? TLSConnection, tls.hasUnreadBytes { return .data }
        var byte: UInt8 = 0
        let n = recv(fd, &byte, 1, Int32(MSG_PEEK) | Int32(MSG_DONTWAIT))
        if n == 0 { return .endOfStream }
        if n > 0 { return .data }
        if errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR { return .nothingYet }
        return .failed(.connectionLost(String(cString: strerror(errno))))
    }

    // MARK: Readiness

    /// Tells the socket's watch what the machine wants to hear of; true when reading was just
    /// resumed after a pause (the caller then looks at the socket once).
    private func watch() -> Bool {
        guard holdsDescriptor else { return false }  // released
        var wanted: Readiness = []
        if machine.wantsReadable { wanted.insert(.readable) }
        if machine.wantsWritable { wanted.insert(.writable) }
        guard wanted != watching else { return false }
        // Bytes OpenSSL or our socket BIO already hold make the socket no more readable: after
        // a pause, look once. (A new watch needs no look: epoll reports what is already there.)
        let resumedReading = wanted.contains(.readable) && !watching.contains(.readable) && readerWasResumed
        if wanted.contains(.readable) { readerWasResumed = true }
        watching = wanted
        do throws(SocketStreamError) {
            if watcher == nil {
                if wanted.isEmpty { return false }
                watcher = try ReadinessWatch(fd: fd, queue: queue) { [weak self] ready in self?.socketReady(ready) }
            }
            try watcher?.want(wanted)
        } catch {
            queue.async { [self] in handle { $0.failed(error) } }
            return false
        }
        return resumedReading
    }

    /// The loop's news: tell the machine what became ready (or that the socket is lost).
    private func socketReady(_ ready: Result<Readiness, SocketStreamError>) {
        switch ready {
        case .success(let ready):
            if ready.contains(.readable) { handle { $0.socketReadable() } }
            if ready.contains(.writable) { handle { $0.socketWritable() } }
        case .failure(let error):
            handle { $0.failed(error) }
        }
    }

    /// Both directions are done or the connection failed: stop watching, close the descriptor
    /// and stop keeping the pump alive.
    private func release() {
        watcher?.cancel()  // from its return the loop is done with the descriptor
        watcher = nil
        if holdsDescriptor { close(fd) }
        holdsDescriptor = false
        watching = []
        transport = nil
        pendingTLS = nil
        pendingVerdict = nil
        timer?.cancel()
        timer = nil
        deadlines = nil
        setUpEnded()
        sendingEnded(.connectionLost("the connection ended before its output was sent"))
        queue.async { self.keepAlive = nil }  // after the current handler has returned
    }
}

// MARK: - Deadlines

extension SocketPump {
    /// Bytes moved (or the peer ended its data): the first byte ends the set-up.
    private func carried() {
        if deadlines?.carried(at: .now) == true { setUpEnded() }
    }

    /// Tells, once, how the output ended.
    private func sendingEnded(_ error: SocketStreamError?) {
        let told = onSendingEnded
        onSendingEnded = nil
        told?(error)
    }

    /// Tells the listener, once, that this connection no longer counts as setting up.
    private func setUpEnded() {
        let told = onSetUpEnded
        onSetUpEnded = nil
        told?()
    }

    /// Arms the timer for the next instant a bound may pass (or drops it when none can). The
    /// idle bound moves with every byte; the timer is not moved for each: when it fires early,
    /// it is armed again for the new instant.
    fileprivate func armTimer() {
        guard let next = deadlines?.nextCheck else {
            timer?.cancel()
            timer = nil
            timerDeadline = nil
            return
        }
        guard next != timerDeadline else { return }
        if let armed = timerDeadline, armed < next, timer != nil { return }  // fires first; re-armed then
        let made =
            timer
            ?? {
                let source = DispatchSource.makeTimerSource(queue: queue)
                source.setEventHandler { [weak self] in self?.timerFired() }
                source.resume()
                return source
            }()
        timer = made
        timerDeadline = next
        made.schedule(deadline: .now() + OperationLimit.dispatchInterval(ContinuousClock.now.duration(to: next)))
    }

    private func timerFired() {
        timerDeadline = nil
        guard let deadlines else { return }
        if let error = deadlines.expired(at: .now) {
            handle { $0.failed(error) }
        } else {
            armTimer()
        }
    }
}
