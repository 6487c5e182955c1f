import Foundation
import SalutDiscovery
import SalutStreams

/// A TCP connection to a host or a discovered service as a session task, like
/// `URLSessionStreamTask`: reads and writes are queued (each kind in order, the two
/// independent), each with its own timeout; TLS can be started and stopped in the middle; and
/// the connection can be taken over as a stream pair (``captureStreams()``).
///
/// The task completes when both sides are closed (``closeWrite()`` ran, and ``closeRead()`` ran
/// or a read reached the end of the data), when it is cancelled, when the connection fails, or
/// when the session's idle or resource timeout passes.
///
/// ```swift
/// let task = session.streamTask(withHostName: "printer.local", port: 9100)
/// task.resume()
/// try await task.write(Data("PING\n".utf8), timeout: 5)
/// let (reply, atEnd) = try await task.readData(ofMinLength: 1, maxLength: 4096, timeout: 5)
/// ```
open class PeerStreamTask: PeerSessionTask, @unchecked Sendable {
    // @unchecked: mutable state is guarded by the inherited `lock`.

    enum Target: Sendable {
        case host(String, Int)
        case service(DiscoveredService)

        /// The key for per-host connection limits and trust-on-first-use.
        var key: String {
            switch self {
            // ASCII case only, as DNS folds it (Unicode's lower case makes a Kelvin sign a `k`).
            case .host(let host, let port):
                return "\(ASCIICase.foldedText(host)):\(port)"
            case .service(let service): return "service:\(service.description)"
            }
        }
    }

    let target: Target
    private let connection = Latch<Result<BoundStreamPair, PeerSessionError>>()
    private let reads = OperationLane()
    private let writes = OperationLane()
    private var readDone = false
    private var writeDone = false
    private var readClosedReported = false
    private var captured = false
    private var holdsSlot = false
    private var pendingOperations = 0
    private var lastActivity = Date()
    private var timers: [DispatchSourceTimer] = []
    /// The work that connects; cancelled when the task ends, so a task still waiting for one of
    /// its host's slots leaves the line at once.
    private var connecting: Task<Void, Never>?
    /// Bytes a cancelled read had collected: the next read returns them first.
    private var carried = Data()
    /// Reads and writes queued behind a TLS start or stop wait for this.
    private var securityChange: Latch<Void>?

    init(session: PeerSession, identifier: Int, target: Target) {
        self.target = target
        super.init(session: session, identifier: identifier)
    }

    // MARK: Reading and writing

    /// Reads at least `minBytes` (fewer only at the end of the data) and at most `maxBytes`,
    /// after the reads queued before it. The handler gets the data (nil if none), whether the
    /// end of the data was reached, and an error: ``PeerSessionError/timedOut(_:)`` when
    /// `timeout` seconds (0: none) pass first, or why the task failed.
    public func readData(
        ofMinLength minBytes: Int, maxLength maxBytes: Int, timeout: TimeInterval,
        completionHandler: @escaping @Sendable (Data?, Bool, (any Error)?) -> Void
    ) {
        readData(
            ofMinLength: minBytes, maxLength: maxBytes, timeout: timeout, limit: OperationLimit(),
            completionHandler: completionHandler)
    }

    private func readData(
        ofMinLength minBytes: Int, maxLength maxBytes: Int, timeout: TimeInterval, limit: OperationLimit,
        completionHandler: @escaping @Sendable (Data?, Bool, (any Error)?) -> Void
    ) {
        enqueue(on: reads) { pair in
            guard limit.begin() else { return }  // cancelled while queued: the caller knows
            defer { limit.finish() }
            guard let pair else { return self.session.deliver { completionHandler(nil, false, self.failure) } }
            guard maxBytes >= 1, minBytes >= 0, minBytes <= maxBytes else {
                let error = PeerSessionError.notAllowed(
                    "read lengths must satisfy 0 ≤ min ≤ max and max ≥ 1 (got \(minBytes), \(maxBytes))")
                return self.session.deliver { completionHandler(nil, false, error) }
            }
            // Bytes a cancelled read had collected come first.
            var data = self.lock.withLock { () -> Data in
                let carried = self.carried.prefix(maxBytes)
                self.carried.removeFirst(carried.count)
                return Data(carried)
            }
            if self.lock.withLock({ self.readDone }) && data.isEmpty {
                return self.session.deliver {
                    completionHandler(nil, true, PeerSessionError.notAllowed("the read side is closed"))
                }
            }
            var read = PairReadResult()
            if data.count < max(1, minBytes) {
                limit.arm(deadline: OperationLimit.deadline(after: timeout))
                read = await pair.read(
                    minimum: max(0, minBytes - data.count), maximum: maxBytes - data.count, limit: limit)
                self.noteRead(read.data.count)
                data += read.data
            }
            let result = read
            if result.stopped == .cancelled {
                // Nothing is lost: the next read starts with these bytes.
                self.lock.withLock { self.carried = data + self.carried }
                return self.session.deliver { completionHandler(nil, false, CancellationError()) }
            }
            let delivered = data.isEmpty ? nil : data
            if result.timedOut {
                return self.session.deliver { completionHandler(delivered, false, PeerSessionError.timedOut("read")) }
            }
            if let error = result.error {
                let wrapped = self.isFinished ? self.failure : PeerSessionError.wrap(error)
                self.session.deliver { completionHandler(delivered, result.atEnd, wrapped) }
                return self.complete(with: wrapped)
            }
            if result.atEnd { self.readReachedEnd() }
            self.session.deliver { completionHandler(delivered, result.atEnd, nil) }
            self.completeIfClosed()
        }
    }

    /// Writes all of `data` after the writes queued before it. The handler gets nil once the
    /// bytes are handed to the connection, or an error: ``PeerSessionError/timedOut(_:)`` when
    /// `timeout` seconds (0: none) pass first, or why the task failed.
    public func write(
        _ data: Data, timeout: TimeInterval, completionHandler: @escaping @Sendable ((any Error)?) -> Void
    ) {
        write(data, timeout: timeout, limit: OperationLimit(), completionHandler: completionHandler)
    }

    private func write(
        _ data: Data, timeout: TimeInterval, limit: OperationLimit,
        completionHandler: @escaping @Sendable ((any Error)?) -> Void
    ) {
        enqueue(on: writes) { pair in
            guard limit.begin() else { return }
            defer { limit.finish() }
            guard let pair else { return self.session.deliver { completionHandler(self.failure) } }
            if self.lock.withLock({ self.writeDone }) {
                return self.session.deliver {
                    completionHandler(PeerSessionError.notAllowed("the write side is closed"))
                }
            }
            let started = Date()
            self.metrics.update { if $0.requestStartDate == nil { $0.requestStartDate = started } }
            limit.arm(deadline: OperationLimit.deadline(after: timeout))
            let result = await pair.write(data, limit: limit)
            self.add(sent: result.written, received: 0)
            self.touch()
            self.metrics.update { $0.requestEndDate = Date() }
            if result.stopped == .cancelled {
                return self.session.deliver { completionHandler(CancellationError()) }
            }
            if result.timedOut {
                return self.session.deliver { completionHandler(PeerSessionError.timedOut("write")) }
            }
            if let error = result.error {
                let wrapped = self.isFinished ? self.failure : PeerSessionError.wrap(error)
                self.session.deliver { completionHandler(wrapped) }
                if error as? StreamFailure == .readerClosed { self.reportWriteClosed() }
                return self.complete(with: wrapped)
            }
            self.session.deliver { completionHandler(nil) }
        }
    }

    /// Closes the read side after the queued reads: the peer's further bytes are discarded.
    public func closeRead() {
        enqueue(on: reads) { pair in
            pair?.input.close()
            self.lock.withLock { self.readDone = true }
            self.completeIfClosed()
        }
    }

    /// Closes the write side after the queued writes (the peer reads the end of the data), and
    /// tells the delegate `writeClosedFor`.
    public func closeWrite() {
        enqueue(on: writes) { pair in
            guard let pair else { return }
            // Told before the end of the data leaves: the peer's answer to it (its own end, so
            // readClosedFor) can then never reach the delegate first.
            self.reportWriteClosed()
            pair.output.close()
            self.completeIfClosed()
        }
    }

    /// Starts TLS once the queued writes are sent; reads and writes queued after it wait for
    /// the handshake. The peer is judged by the session's trust policy and then the session
    /// delegate's trust challenge. If the handshake or the trust decision fails, the task
    /// completes with the ``PeerSessionError/connection(_:)`` error that says why.
    public func startSecureConnection() {
        changeSecurity { pair, done in
            let configuration = self.session.configuration.tlsConfiguration()
            pair.startTLS(
                configuration, evaluator: self.trustEvaluator(), dialledHost: self.dialledHost,
                shared: self.session.sharedTLSContext,
                handshakeTimeout: self.session.configuration.timeoutIntervalForTLSHandshake
            ) { result in
                switch result {
                case .success(let details): self.metrics.record(.ready(details)); done(nil)
                case .failure(let error): done(error)
                }
            }
        }
    }

    /// Ends TLS once the queued writes are sent and continues in the clear (the peer must stop
    /// TLS too: each side sends close_notify and waits for the other's).
    public func stopSecureConnection() {
        changeSecurity { pair, done in
            pair.stopTLS { result in
                if case .failure(let error) = result { done(error) } else { done(nil) }
            }
        }
    }

    /// Finishes the queued reads and writes, then hands the connection to the delegate as a
    /// stream pair (`didBecome inputStream:outputStream:`, already open) and completes. The
    /// task no longer closes the streams: they are the delegate's.
    public func captureStreams() {
        let readsDone = Latch<Void>()
        enqueue(on: reads) { _ in readsDone.open(()) }
        enqueue(on: writes) { pair in
            await readsDone.wait()
            guard let pair else { return }
            self.lock.withLock { self.captured = true }
            let streams = HandedOver(pair)  // to the delegate queue, which alone uses it from now on
            self.session.deliverToDelegate { delegate in
                (delegate as? PeerSessionStreamDelegate)?.peerSession(
                    self.session, streamTask: self, didBecome: streams.value.input,
                    outputStream: streams.value.output)
            }
            self.complete(with: nil)
        }
    }

    // MARK: Async versions

    /// `readData(ofMinLength:maxLength:timeout:completionHandler:)` as an async call: the data
    /// (empty at the end) and whether the end was reached.
    /// - Throws: the ``PeerSessionError`` the handler would have received, or
    ///   `CancellationError` as soon as the calling task is cancelled (bytes the read had
    ///   collected are kept for the next read).
    public func readData(
        ofMinLength minBytes: Int, maxLength maxBytes: Int, timeout: TimeInterval
    ) async throws -> (Data, Bool) {
        try await cancellable { limit, finish in
            self.readData(ofMinLength: minBytes, maxLength: maxBytes, timeout: timeout, limit: limit) {
                data, atEnd, error in
                finish(error.map { .failure($0) } ?? .success((data ?? Data(), atEnd)))
            }
        }
    }

    /// `write(_:timeout:completionHandler:)` as an async call.
    /// - Throws: the ``PeerSessionError`` the handler would have received, or
    ///   `CancellationError` as soon as the calling task is cancelled (bytes already handed to
    ///   the connection are sent).
    public func write(_ data: Data, timeout: TimeInterval) async throws {
        try await cancellable { limit, finish in
            self.write(data, timeout: timeout, limit: limit) { error in
                finish(error.map { .failure($0) } ?? .success(()))
            }
        }
    }

    /// Runs a queued operation for an async caller: the caller's cancellation cancels the
    /// operation (at once if it is still queued, else by waking its wait).
    private func cancellable<T: Sendable>(
        _ start: (OperationLimit, @escaping @Sendable (Result<T, any Error>) -> Void) -> Void
    ) async throws -> T {
        let limit = OperationLimit()
        let answer = Latch<Result<T, any Error>>()
        return try await withTaskCancellationHandler {
            start(limit) { answer.open($0) }
            return try await answer.wait().get()
        } onCancel: {
            if limit.cancelBeforeStart() { answer.open(.failure(CancellationError())) }
        }
    }

    /// ``startSecureConnection()``, returning once TLS is up.
    /// - Throws: ``PeerSessionError/connection(_:)`` with the TLS failure, or
    ///   `CancellationError` when the calling task is cancelled first (the change goes on).
    public func secureConnection() async throws {
        startSecureConnection()
        try await awaitSecurityChange()
    }

    /// ``stopSecureConnection()``, returning once the connection is back in the clear.
    /// - Throws: ``PeerSessionError/connection(_:)`` when TLS could not be ended, or
    ///   `CancellationError` when the calling task is cancelled first (the change goes on).
    public func insecureConnection() async throws {
        stopSecureConnection()
        try await awaitSecurityChange()
    }

    /// ``captureStreams()`` for async code: returns the stream pair (the delegate is told too).
    /// - Throws: the task's error when it completed first.
    public func capturedStreams() async throws -> (InputStream, OutputStream) {
        let handed = Latch<Result<HandedOver<BoundStreamPair>, PeerSessionError>>()
        enqueue(on: reads) { _ in }
        enqueue(on: writes) { pair in
            if let pair { handed.open(.success(HandedOver(pair))) } else { handed.open(.failure(self.failure)) }
        }
        captureStreams()
        let pair = try await handed.waitUnlessCancelled().get().value
        return (pair.input, pair.output)
    }

    // MARK: Task life

    override func startWork() {
        armTimers()
        let connecting = Task.detached { await self.connect() }
        lock.withLock { self.connecting = connecting }
        if isFinished { connecting.cancel() }  // ended before the handle was kept
    }

    override func cancelWork() {
        complete(with: PeerSessionError.cancelled)
    }

    override func finishWork() {
        let (timers, captured, holdsSlot, connecting) = lock.withLock {
            () -> ([DispatchSourceTimer], Bool, Bool, Task<Void, Never>?) in
            defer { self.timers = []; self.holdsSlot = false; self.connecting = nil }
            return (self.timers, self.captured, self.holdsSlot, self.connecting)
        }
        timers.forEach { $0.cancel() }
        connecting?.cancel()
        connection.open(.failure(failure))
        if !captured, case .success(let pair)? = connection.current {
            if (error as? PeerSessionError) == .cancelled {
                // Cancelled, as URLSession's cancel does: the connection is cut (a reset), so a
                // peer that reads on sees a failure, never the clean end of a finished upload.
                pair.reset(.cancelled)
            } else {
                pair.input.close()
                pair.output.close()
            }
        }
        if holdsSlot {
            session.slots.release(target.key)
        }
    }

    /// The error operations report once the task has completed.
    var failure: PeerSessionError {
        (error as? PeerSessionError) ?? (state == .completed ? .notAllowed("the task has completed") : .cancelled)
    }

    /// Addresses, TLS and socket options of the connection, once made.
    var connectionDetails: ConnectionDetails? {
        if case .success(let pair)? = connection.current { return pair.connectionDetails }
        return nil
    }

    private var dialledHost: String? {
        if case .host(let host, _) = target { return host }
        return nil
    }

    private func connect() async {
        // A task cancelled while it waits leaves the line and never takes a slot.
        guard await session.slots.acquire(target.key, priority: priority) else { return }
        let stillWanted =
            lock.withLock { () -> Bool in
                holdsSlot = true
                return true
            } && !isFinished
        guard stillWanted else {
            finishWork()
            return
        }
        metrics.update { $0.fetchStartDate = Date() }
        let configuration = session.configuration
        let pair: BoundStreamPair
        switch target {
        case .host(let host, let port):
            pair = SocketStreams.pair(
                toHost: host, port: port, connectTimeout: configuration.timeoutIntervalForConnect,
                resolver: session.resolver)
        case .service(let service):
            pair = SocketStreams.pair(
                toHost: service.description, port: 0, connectTimeout: configuration.timeoutIntervalForConnect,
                targetResolver: service.targetResolver(timeout: 5, context: session.discoveryContext))
        }
        pair.setSocketOptions(configuration.socketOptions)
        let metrics = self.metrics
        pair.observeConnection { metrics.record($0) }
        do {
            try await pair.open()
            // The first value wins: a task cancelled while connecting has set its failure, and
            // then nobody will use this pair. (Checking `isFinished` after publishing would be a
            // race: queued work may already have run, captured the streams and completed.)
            connection.open(.success(pair))
            guard case .success(let held)? = connection.current, held.input === pair.input else {
                pair.input.close()
                pair.output.close()
                return
            }
            touch()
        } catch {
            let wrapped = PeerSessionError.wrap(error)
            connection.open(.failure(wrapped))
            complete(with: wrapped)
        }
    }

    /// Queues `operation` on `lane`; it runs once the task runs and is connected, with the
    /// streams (nil when the task failed or completed: report `failure`).
    private func enqueue(on lane: OperationLane, _ operation: @escaping @Sendable (BoundStreamPair?) async -> Void) {
        lock.withLock { pendingOperations += 1 }
        let change = lock.withLock { securityChange }
        lane.enqueue {
            defer { self.lock.withLock { self.pendingOperations -= 1 } }
            await self.waitUntilRunning()
            if let change { await change.wait() }
            let result = await self.connection.wait()
            guard case .success(let pair) = result, !self.isFinished else { return await operation(nil) }
            self.touch()
            await operation(pair)
        }
    }

    private func changeSecurity(
        _ body: @escaping @Sendable (BoundStreamPair, @escaping @Sendable (SocketStreamError?) -> Void) -> Void
    ) {
        let done = Latch<Void>()
        let outcome = Latch<SocketStreamError?>()
        enqueue(on: writes) { pair in
            defer { done.open(()) }
            guard let pair else { return outcome.open(.cancelled) }
            let error = await withCheckedContinuation { continuation in
                body(pair) { continuation.resume(returning: $0) }
            }
            outcome.open(error)
            if let error { self.complete(with: PeerSessionError.connection(error)) }
        }
        lock.withLock {
            securityChange = done
            securityOutcome = outcome
        }
        // Reads queued from now on wait for the change.
        enqueue(on: reads) { _ in await done.wait() }
    }
    private var securityOutcome: Latch<SocketStreamError?>?

    private func awaitSecurityChange() async throws {
        guard let outcome = lock.withLock({ securityOutcome }) else { return }
        if let error = try await outcome.waitUnlessCancelled() {
            throw error == .cancelled ? failure : PeerSessionError.connection(error)
        }
    }

    /// The trust decision for `startSecureConnection`: the session's policy (and its
    /// trust-on-first-use store), then the delegate's challenge.
    private func trustEvaluator() -> TLSTrustEvaluator {
        let session = self.session, target = self.target
        return { [weak self] trust, decide in
            var verdict = trust
            if session.configuration.trustPolicy == .trustOnFirstUse, verdict.policyFailure == nil {
                verdict.policyFailure = session.trustStore.check(peer: target.key, fingerprint: trust.publicKeySHA256)
            }
            let trusted = verdict.policyFailure == nil
            guard let self else { return decide(false) }
            let (host, port): (String, Int) =
                switch target {
                case .host(let host, let port): (host, port)
                case .service(let service): (service.description, 0)
                }
            let challenge = PeerTrustChallenge(
                host: host, port: port, peerTrust: verdict,
                proposedDisposition: verdict.policyFailure == nil ? .useCredential : .cancelAuthenticationChallenge)
            // A first-use key is remembered only once the whole decision trusted it: a key the
            // delegate refuses is not pinned.
            let firstUse = session.configuration.trustPolicy == .trustOnFirstUse && verdict.policyFailure == nil
            let decided: @Sendable (Bool) -> Void = { accepted in
                // Another first use may have pinned another key meanwhile: then this one stops.
                if accepted && firstUse {
                    return decide(session.trustStore.remember(peer: target.key, fingerprint: trust.publicKeySHA256))
                }
                decide(accepted)
            }
            session.deliverToDelegate(orElse: { decided(trusted) }) { delegate in
                delegate.peerSession(session, task: self, didReceive: challenge) { disposition in
                    switch disposition {
                    case .useCredential: decided(true)
                    case .cancelAuthenticationChallenge: decided(false)
                    case .performDefaultHandling: decided(trusted)
                    }
                }
            }
        }
    }

    private func noteRead(_ count: Int) {
        guard count > 0 else { return }
        let now = Date()
        metrics.update { metrics in
            if metrics.responseStartDate == nil { metrics.responseStartDate = now }
            metrics.responseEndDate = now
        }
        add(sent: 0, received: count)
        touch()
    }

    private func readReachedEnd() {
        let first = lock.withLock { () -> Bool in
            readDone = true
            defer { readClosedReported = true }
            return !readClosedReported
        }
        guard first else { return }
        session.deliverToDelegate { delegate in
            (delegate as? PeerSessionStreamDelegate)?.peerSession(self.session, readClosedFor: self)
        }
    }

    private func reportWriteClosed() {
        let first = lock.withLock { () -> Bool in
            defer { writeDone = true }
            return !writeDone
        }
        guard first else { return }
        session.deliverToDelegate { delegate in
            (delegate as? PeerSessionStreamDelegate)?.peerSession(self.session, writeClosedFor: self)
        }
    }

    private func completeIfClosed() {
        if lock.withLock({ readDone && writeDone }) { complete(with: nil) }
    }

    private func touch() {
        lock.withLock { lastActivity = Date() }
    }

    /// The resource timeout, and the idle timeout: an operation waiting with nothing moving for
    /// `timeoutIntervalForRequest` fails the task (not counted while suspended). Each is one
    /// timer; the idle one fires when the limit could first have passed, and when something
    /// moved meanwhile it is set again for the new last activity (it never polls).
    private func armTimers() {
        let configuration = session.configuration
        let queue = DispatchQueue.global()
        let resource = DispatchSource.makeTimerSource(queue: queue)
        resource.schedule(deadline: .now() + configuration.timeoutIntervalForResource)
        resource.setEventHandler { [weak self] in self?.complete(with: PeerSessionError.timedOut("resource")) }
        let idle = DispatchSource.makeTimerSource(queue: queue)
        let limit = configuration.timeoutIntervalForRequest
        idle.schedule(deadline: .now() + limit)
        idle.setEventHandler { [weak self] in
            // The timer is found through the task: capturing it here would keep it alive.
            guard let self, let idle = self.lock.withLock({ self.timers.last }) else { return }
            let (waiting, since) = self.lock.withLock { (self.pendingOperations > 0, self.lastActivity) }
            if self.state == .suspended || !waiting {
                self.touch()
                return idle.schedule(deadline: .now() + limit)
            }
            let quiet = Date().timeIntervalSince(since)
            if quiet >= limit { return self.complete(with: PeerSessionError.timedOut("idle")) }
            idle.schedule(deadline: .now() + (limit - quiet))
        }
        lock.withLock { timers = [resource, idle] }
        resource.resume()
        idle.resume()
    }
}
