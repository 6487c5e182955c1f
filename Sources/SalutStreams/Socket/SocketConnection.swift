import Dispatch
import Foundation
import Glibc
import Synchronization

/// One TCP connection behind a socket stream pair: the buffers, the pump, the gate that holds
/// the streams in `opening`, the properties set on the streams, and how the connection is made
/// (dialled out, or already accepted by a listener).
final class SocketConnection: @unchecked Sendable {
    // @unchecked: mutable state is in `state` (locked); the pump is confined to `queue`; the
    // streams are held weakly and are themselves thread-safe.

    enum Origin {
        /// Resolve and dial out when opened.
        case outgoing(host: String, port: Int, connectTimeout: TimeInterval, resolver: TargetResolver)
        /// An accepted descriptor; TLS (server side) with this context when not nil; the
        /// listener's limits.
        case accepted(fd: Int32, tls: TLSContext?, limits: ConnectionLimits)
    }

    struct State {
        var tls: TLSConfiguration?
        var evaluator: TLSTrustEvaluator?
        var securityLevel: StreamSocketSecurityLevel = .none
        var sslSettings: [String: Any]?
        var details: ConnectionDetails?
        var connector: HappyEyeballs?
        var unopenedFD: Int32?
        var observer: (@Sendable (ConnectionEvent) -> Void)?
        var socketOptions = SocketOptions()
        /// The pump has been given the socket: TLS asked for from now on is an upgrade of the
        /// open connection, no longer part of setting it up.
        var pumpStarted = false
        /// The name TLS checks the certificate against, once dialled.
        var dialledHost: String?
        /// TLS was asked for through the properties after `open()`.
        var tlsRequestedAfterOpen = false
        /// Asked for on the open connection by the security level alone: it starts when the SSL
        /// settings follow, at the application's first read or write, or after a short grace
        /// period, whichever comes first.
        var pendingUpgrade = false
        /// TLS was asked for before `open()` with a value that cannot be honoured (a bad
        /// settings dictionary, an insecure level): the streams fail with this on open rather
        /// than connect in the clear. Cleared by a later request that can be honoured (the
        /// level `.none` among them: TLS turned off on purpose).
        var refusedTLS: TLSError?
        /// How sending ended (nil inside: all sent), once it has; and who waits to know.
        var sendingOutcome: SocketStreamError??
        var sendingWaiters: [CheckedContinuation<SocketStreamError?, Never>] = []
    }

    /// The connection's serial queue (pump, Happy Eyeballs). Every connection's queue targets the
    /// global pool, which runs at most as many threads as there are cores: a serial queue made
    /// without a target goes to libdispatch's overcommit pool, which starts a thread for each
    /// busy queue (a burst of 1,000 closing connections left 250 threads behind).
    let queue = DispatchQueue(label: "salut.socket", target: .global())
    let inbound: BoundBuffer
    let outbound: BoundBuffer
    let pump: SocketPump
    private(set) var gate: ConnectionGate!
    let state: Locked<State>
    /// Set by the streams when the application has read or written a byte: TLS can no longer
    /// start on the connection after that (it would follow bytes that went in the clear).
    let carriedBytes = Atomic<Bool>(false)
    /// Set once the application uses its input stream (reads, asks for bytes, schedules it): a
    /// dialled plain connection reads from the network only from then on.
    private let inputUsed = Atomic<Bool>(false)
    private weak var input: BoundInputStream?
    private weak var output: BoundOutputStream?
    private let origin: Origin

    init(origin: Origin, bufferSize: Int, tls: TLSConfiguration? = nil) {
        self.origin = origin
        inbound = BoundBuffer(capacity: max(1, bufferSize), allocatesLazily: true)
        // The output always holds at least one whole TLS record, and hands the pump a record's
        // bytes in one piece even where they wrap around: a TLS write that found the socket
        // full must be retried with at least the bytes of the record it began.
        outbound = BoundBuffer(
            capacity: max(TLSConnection.largestRecord, bufferSize), allocatesLazily: true,
            contiguousRun: TLSConnection.largestRecord)
        pump = SocketPump(queue: queue, inbound: inbound, outbound: outbound)
        var initial = State()
        initial.tls = tls
        if tls != nil { initial.securityLevel = .negotiatedSSL }
        if case .accepted(let fd, let context, _) = origin {
            initial.unopenedFD = fd
            initial.tls = context?.configuration
            // A listener's TLS connection is secured as a dialled one is: Apple code that asks
            // for TLS on it finds it there (not a second handshake, nor a refusal).
            if context != nil { initial.securityLevel = .negotiatedSSL }
        }
        state = Locked(initial)
        gate = ConnectionGate { [weak self] in self?.start() }
    }

    deinit {
        // An accepted connection whose streams were never opened still owns its descriptor.
        if let fd = state.value.unopenedFD { close(fd) }
    }

    /// Makes the stream pair; call once.
    func makePair() -> BoundStreamPair {
        let input = BoundInputStream(buffer: inbound, connection: self)
        let output = BoundOutputStream(buffer: outbound, connection: self)
        self.input = input
        self.output = output
        // Safe from the pump's thread: a stream's `refresh` takes only its own locks.
        let weakInput = WeaklyHandedOver(input), weakOutput = WeaklyHandedOver(output)
        inbound.readerChanged = { weakInput.object?.refresh() }
        // Weak: the pump keeps itself alive while it runs, and must not keep the buffers (which
        // hold these closures) alive in a cycle after it has finished.
        inbound.writerChanged = { [weak pump] in pump?.inboundChanged() }
        outbound.readerChanged = { [weak pump] in pump?.outboundChanged() }
        outbound.writerChanged = { weakOutput.object?.refresh() }
        pump.onFailure = { [weak self] error in self?.broke(error) }
        pump.onSendingEnded = { [weak self] error in self?.sendingEnded(error) }
        return BoundStreamPair(input: input, output: output)
    }

    /// The application used its input stream: start reading from the network if the pump
    /// waits for that (cheap after the first call: one atomic load).
    func inputWanted() {
        guard !inputUsed.load(ordering: .relaxed) else { return }
        if !inputUsed.exchange(true, ordering: .acquiringAndReleasing) { pump.readingWanted() }
    }

    /// ``inputWanted()`` for a task, which waits suspended instead of blocking its thread.
    func inputWanted() async {
        guard !inputUsed.load(ordering: .relaxed) else { return }
        if !inputUsed.exchange(true, ordering: .acquiringAndReleasing) { await pump.readingWanted() }
    }

    /// Details of the connection once it is ready (addresses, TLS).
    var details: ConnectionDetails? { state.value.details }

    // MARK: Connecting

    private func start() {
        switch origin {
        case .outgoing(let host, let port, let timeout, let resolver):
            // An address literal needs no resolver: connect at once, on the caller's thread (the
            // new queue is idle, so `sync` runs the block here: no thread wakes up). Nothing in it
            // blocks: the socket is non-blocking, and on loopback it is connected when `connect`
            // returns, so the streams may be open by the time `open()` returns.
            if port > 0, port <= 65535, let address = SocketAddress.literal(host, port: UInt16(port)) {
                return queue.sync { self.connect(to: [address], host: host, port: port, timeout: timeout) }
            }
            Task.detached { await self.dial(host: host, port: port, timeout: timeout, resolver: resolver) }
        case .accepted(let fd, let context, let limits):
            if let refused = state.value.refusedTLS {
                state.withLock { $0.unopenedFD = nil }
                Glibc.close(fd)
                return settle(.failure(.tls(refused)))
            }
            state.withLock {
                $0.unopenedFD = nil
                $0.pumpStarted = true
            }
            let security = context.map {
                SecuritySetup(
                    context: $0, dialledHost: nil, evaluator: state.value.evaluator, asksEvaluatorInHandshake: true)
            }
            queue.async {
                self.notify(.secureConnectStart, when: security != nil)
                self.pump.run(fd, security: security, limits: limits) { self.ready($0) }
            }
        }
    }

    private func dial(host: String, port: Int, timeout: TimeInterval, resolver: TargetResolver) async {
        let addresses: [SocketAddress]
        let hostName: String?
        do {
            guard (0...65535).contains(port) else { throw SocketStreamError.invalidAddress("port \(port)") }
            notify(.lookupStart)
            let resolved = try await resolver(host, UInt16(port))
            addresses = resolved.addresses
            hostName = resolved.hostName
        } catch {
            return settle(.failure(error as? SocketStreamError ?? .nameNotFound(host, detail: "\(error)")))
        }
        queue.async {
            self.connect(to: addresses, host: host, port: port, timeout: timeout, hostName: hostName, resolved: true)
        }
    }

    /// Connects to resolved (or literal) addresses, then starts the pump. Runs on the queue.
    private func connect(
        to resolved: [SocketAddress], host: String, port: Int, timeout: TimeInterval,
        hostName: String? = nil, resolved wasResolved: Bool = false
    ) {
        // Port 0 means the resolver supplied the port (a discovered service).
        let target = ConnectTarget(host: host, port: port)
        let options = state.value
        let addresses = options.socketOptions.filter(resolved)
        let security: SecuritySetup?
        // TLS asked for and refused: no connection at all, rather than one in the clear.
        if let refused = options.refusedTLS { return settle(.failure(.tls(refused))) }
        do {
            let context = try options.tls.map { try TLSContext($0) }  // bad TLS settings fail before any traffic
            guard !addresses.isEmpty else {
                let which =
                    options.socketOptions.families == .any
                    ? "" : options.socketOptions.families == .ipv4Only ? "IPv4 " : "IPv6 "
                throw SocketStreamError.nameNotFound(host, detail: "no \(which)addresses")
            }
            if !wasResolved { notify(.lookupStart) }
            notify(.lookupEnd(addresses))
            security = context.map {
                SecuritySetup(context: $0, dialledHost: hostName ?? host, evaluator: options.evaluator)
            }
        } catch let error as TLSError {
            return settle(.failure(.tls(error)))
        } catch {
            return settle(.failure(error as? SocketStreamError ?? .nameNotFound(host, detail: "\(error)")))
        }
        guard !bothClosed else { return settle(.failure(.cancelled)) }  // closed while resolving
        notify(.connectStart)
        let socketOptions = options.socketOptions
        let connector = HappyEyeballs(
            addresses: addresses, target: target, queue: queue, timeout: timeout,
            prepare: { try socketOptions.apply(to: $0, for: $1) }
        ) { result in
            switch result {
            case .success(let connected):
                let fd = connected.fd
                self.notify(.connectEnd)
                // TLS asked for while the connection was being made (set after `open()`) starts
                // with it: from here on, asking for it is an upgrade of the open connection.
                // A TLS request refused while the connection was being made (or just as it
                // began): no connection is kept, rather than one in the clear.
                if let refused = self.state.value.refusedTLS {
                    close(fd)
                    return self.settle(.failure(.tls(refused)))
                }
                let late = self.state.withLock { state -> TLSConfiguration? in
                    state.pumpStarted = true
                    state.dialledHost = hostName ?? host
                    return security == nil ? state.tls : nil
                }
                var security = security
                if let late {
                    do {
                        security = SecuritySetup(
                            context: try TLSContext(late), dialledHost: hostName ?? host,
                            evaluator: self.state.value.evaluator)
                    } catch {
                        close(fd)
                        return self.settle(.failure(.tls(error as? TLSError ?? .invalidConfiguration("\(error)"))))
                    }
                }
                self.notify(.secureConnectStart, when: security != nil)
                // A server that accepts and then never answers the ClientHello must not hold
                // the streams in `opening` for ever.
                let limits =
                    security == nil
                    ? nil
                    : ConnectionLimits(
                        handshakeTimeout: Self.dialledHandshakeTimeout,
                        firstByteTimeout: nil)
                let setsTraffic = socketOptions.trafficClass != nil || socketOptions.priority != nil
                // A plain connection reads once its input is used (a TLS handshake reads anyway).
                let readsAtOnce = security != nil || self.inputUsed.load(ordering: .acquiring)
                // The address dialled is the peer's, except that the kernel fills in the scope of
                // a link-local IPv6 address dialled without one (bound to an interface).
                let address = connected.address
                let known = address.isIPv6LinkLocal && address.scopeID == 0 ? nil : address
                self.pump.run(
                    fd, security: security, limits: limits, readsTrafficOptions: setsTraffic,
                    readsAtOnce: readsAtOnce, remoteAddress: known
                ) { self.ready($0) }
            case .failure(let error):
                self.settle(.failure(error))
            }
        }
        state.withLock { $0.connector = connector }
        connector.start()
    }

    private func ready(_ result: Result<ConnectionDetails, SocketStreamError>) {
        if case .success(let details) = result {
            state.withLock {
                $0.details = details; $0.connector = nil
            }
            notify(.ready(details))
        }
        settle(result)
    }

    private func settle(_ result: Result<ConnectionDetails, SocketStreamError>) {
        state.withLock { $0.connector = nil }
        switch result {
        case .success: gate.settle(.connected)
        case .failure(let error):
            notify(.failed(error))
            gate.settle(.failed(error))
        }
        input?.connectionSettled()
        output?.connectionSettled()
        if case .failure(let error) = result {
            sendingEnded(error)
            // Nothing will ever arrive or leave: waits on the buffers end (with the error the
            // streams already have).
            inbound.closeWriter()
            outbound.closeReader()
        }
    }

    /// Seconds a dialled TLS connection has for its handshake.
    static let dialledHandshakeTimeout: TimeInterval = 10

    /// Starts an accepted connection at once (its TLS handshake runs, its first bytes are
    /// buffered), before its streams are opened: a listener bounds its set-up from the moment
    /// it is accepted, whatever its user does meanwhile.
    func startAccepted() {
        gate.requestOpen()
    }

    /// How the output ended: nil once every byte written and our end of the data were sent,
    /// or the error that stopped it. Suspends until then.
    func sendingEnded() async -> SocketStreamError? {
        await withCheckedContinuation { continuation in
            let outcome = state.withLock { state -> SocketStreamError?? in
                if let outcome = state.sendingOutcome { return outcome }
                state.sendingWaiters.append(continuation)
                return nil
            }
            if let outcome { continuation.resume(returning: outcome) }
        }
    }

    /// Wakes whoever waits in ``sendingEnded()`` with `.cancelled` (their task was cancelled);
    /// how the output really ends is still recorded when it does.
    func stopWaitingForSending() {
        let waiters = state.withLock { state -> [CheckedContinuation<SocketStreamError?, Never>] in
            defer { state.sendingWaiters = [] }
            return state.sendingWaiters
        }
        for waiter in waiters { waiter.resume(returning: .cancelled) }
    }

    /// Records how the output ended (the first report counts) and wakes whoever waits.
    private func sendingEnded(_ error: SocketStreamError?) {
        let waiters = state.withLock { state -> [CheckedContinuation<SocketStreamError?, Never>] in
            guard state.sendingOutcome == nil else { return [] }
            state.sendingOutcome = .some(error)
            defer { state.sendingWaiters = [] }
            return state.sendingWaiters
        }
        for waiter in waiters { waiter.resume(returning: error) }
    }

    /// The connection broke after it was made.
    private func broke(_ error: SocketStreamError) {
        // Streams opened after this (an accepted connection not yet opened) fail with the error.
        gate.settle(.failed(error))
        notify(.failed(error))
        if let input {
            input.events.fail(error)
            input.events.post(.errorOccurred, to: input, once: true)
        }
        if let output {
            output.events.fail(error)
            output.events.post(.errorOccurred, to: output, once: true)
        }
    }

    private var bothClosed: Bool {
        (input?.streamStatus ?? .closed) == .closed && (output?.streamStatus ?? .closed) == .closed
    }

    /// A stream was closed: when both are, a connection still being made is abandoned.
    func streamClosed() {
        guard bothClosed else { return }
        if case .connecting = gate.current { state.value.connector?.cancel() }
        pump.abandon()  // a TLS handshake nobody waits for any more is given up
    }

    // MARK: Upgrading

    /// How long TLS asked for by the security level alone waits for the SSL settings that
    /// Apple code often sets next, before the handshake starts without them.
    static let upgradeGracePeriod: DispatchTimeInterval = .milliseconds(20)

    /// TLS asked for through the streams' properties after `open()`: Apple starts the
    /// handshake on the open socket when it is asked for before the first byte. Before the
    /// socket is up, the request becomes part of setting it up; once up and before any byte
    /// went either way, the connection is upgraded; after that it is refused loudly: the
    /// streams fail with an error and the connection is reset, never left carrying on in the
    /// clear. `sslSettings` is nil for the security level, the dictionary for the settings.
    /// - Returns: false when refused (after bytes went: the streams have failed), or for
    ///   settings that come after TLS has started.
    func requestTLSAfterOpening(
        _ configuration: TLSConfiguration, level: StreamSocketSecurityLevel,
        sslSettings: [String: Any]?
    ) -> Bool {
        enum Decision {
            case accepted, refused, tooLate, pending, upgrade(TLSConfiguration, String?, TLSTrustEvaluator?)
        }
        let isSettings = sslSettings != nil
        // Bytes the peer already sent in the clear make TLS too late even when nobody has read
        // them: a dormant input looks at the socket now (outside the lock: waking it takes the
        // pump's queue), so that they are in the buffer for the check below. Always the pump's
        // look itself, not the once-only flag: a task's first read may have set the flag and
        // still be on its way to the queue.
        inputUsed.store(true, ordering: .releasing)
        pump.readingWanted()
        let decision = state.withLock { state -> Decision in
            func apply() {
                if let sslSettings {
                    state.sslSettings = sslSettings
                    state.tls = configuration
                    if state.securityLevel == .none { state.securityLevel = .negotiatedSSL }
                } else {
                    if state.securityLevel == .none { state.securityLevel = level }
                    if state.tls == nil { state.tls = configuration }
                }
                state.tlsRequestedAfterOpen = true
            }
            if state.securityLevel != .none && !state.tlsRequestedAfterOpen {
                // TLS from the start: its settings were fixed when connecting began.
                return isSettings ? .refused : .accepted
            }
            if !state.pumpStarted {
                apply()  // taken up when the socket is connected
                return .accepted
            }
            if state.pendingUpgrade {
                guard isSettings else { return .accepted }
                apply()
                state.pendingUpgrade = false
                return .upgrade(state.tls!, state.dialledHost, state.evaluator)
            }
            if state.tlsRequestedAfterOpen { return isSettings ? .refused : .accepted }  // under way
            if carriedBytes.load(ordering: .acquiring) || inbound.snapshot.available > 0 { return .tooLate }
            apply()
            if isSettings { return .upgrade(state.tls!, state.dialledHost, state.evaluator) }
            state.pendingUpgrade = true
            return .pending
        }
        switch decision {
        case .accepted:
            return true
        case .refused:
            return false
        case .tooLate:
            let error = SocketStreamError.tls(
                .invalidConfiguration(
                    "TLS was asked for after bytes had gone over the connection in the clear; the connection is closed rather than carried on unencrypted"
                ))
            pump.reset(error)
            broke(error)
            return false
        case .pending:
            queue.asyncAfter(deadline: .now() + Self.upgradeGracePeriod) { [weak self] in self?.startPendingUpgrade() }
            return true
        case .upgrade(let configuration, let host, let evaluator):
            upgrade(configuration, host: host, evaluator: evaluator)
            return true
        }
    }

    /// TLS asked for on the open connection with a value that cannot be honoured: the streams
    /// fail and the connection is reset, rather than carrying on in the clear.
    func refuseTLSAfterOpening(_ error: TLSError) {
        let failure = SocketStreamError.tls(error)
        // Still being made: remembered, so that the connection is closed when it comes up.
        state.withLock { $0.refusedTLS = error }
        pump.reset(failure)
        broke(failure)
    }

    /// Starts TLS asked for by the security level alone, if it has not started: called before
    /// the application's first read or write, and when the grace period ends.
    func startPendingUpgrade() {
        let go = state.withLock { state -> (TLSConfiguration, String?, TLSTrustEvaluator?)? in
            guard state.pendingUpgrade, let tls = state.tls else { return nil }
            state.pendingUpgrade = false
            return (tls, state.dialledHost, state.evaluator)
        }
        if let (configuration, host, evaluator) = go { upgrade(configuration, host: host, evaluator: evaluator) }
    }

    private func upgrade(_ configuration: TLSConfiguration, host: String?, evaluator: TLSTrustEvaluator?) {
        startTLS(configuration, evaluator: evaluator, dialledHost: host) { [weak self] result in
            // A change that could not start leaves no plaintext connection behind either.
            if case .failure(let error) = result, let self {
                self.pump.reset(error)
                self.broke(error)
            }
        }
    }

    /// Starts TLS on an open plain connection once everything written so far has been sent.
    func startTLS(
        _ configuration: TLSConfiguration, evaluator: TLSTrustEvaluator?, dialledHost: String?, preface: Data? = nil,
        shared: SharedTLSContext? = nil, handshakeTimeout: TimeInterval? = dialledHandshakeTimeout,
        done: @escaping @Sendable (Result<ConnectionDetails, SocketStreamError>) -> Void
    ) {
        let context: TLSContext
        if let shared {
            context = shared.context
        } else {
            do { context = try TLSContext(configuration) } catch {
                return done(.failure(.tls(error as? TLSError ?? .invalidConfiguration("\(error)"))))
            }
        }
        notify(.secureConnectStart)
        pump.startTLS(
            SecuritySetup(context: context, dialledHost: dialledHost, evaluator: evaluator), preface: preface,
            handshakeTimeout: handshakeTimeout
        ) { result in
            if case .success(let details) = result {
                self.state.withLock { $0.details = details }
                self.notify(.ready(details))
            }
            done(result)
        }
    }

    // MARK: Observation

    private func notify(_ event: ConnectionEvent, when condition: Bool = true) {
        guard condition, let observer = state.withLock({ $0.observer }) else { return }
        observer(event)
    }
}

/// Steps of making a connection, for metrics.
package enum ConnectionEvent: Sendable {
    case lookupStart
    case lookupEnd([SocketAddress])
    case connectStart
    case connectEnd
    case secureConnectStart
    /// Ready to carry bytes (after TLS, when on).
    case ready(ConnectionDetails)
    case failed(SocketStreamError)
}
