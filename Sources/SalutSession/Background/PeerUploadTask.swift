import Foundation
import SalutDiscovery
import SalutStreams

/// A background upload to a service found by name (a background session's task, like a
/// `URLSessionUploadTask` in a background `URLSession`): it waits while the service is not
/// visible, connects when it appears, and after a lost connection waits and tries again,
/// resuming, until it succeeds, the retries run out (``PeerSessionConfiguration/maximumAttempts``)
/// or the give-up deadline passes (``PeerSessionConfiguration/timeoutIntervalForResource``).
/// Its record is kept on disk: after a crash or a restart, re-creating the session with the
/// same identifier lists it again and carries on.
open class PeerUploadTask: PeerSessionTask, @unchecked Sendable {
    // @unchecked: mutable state is guarded by the inherited `lock`; the driver runs on one
    // Swift task at a time.

    /// Where the task is in its life.
    public enum Phase: Sendable, Equatable, CustomStringConvertible {
        /// Created, not resumed.
        case notStarted
        /// Handed to the process that runs this background session: this process only queues,
        /// and its task completes with ``PeerSessionError/queuedWithRunner`` (not a failure,
        /// not a delivery) as soon as the record is written; the runner's session reports the
        /// delivery.
        case queuedWithRunner
        /// Waiting for the service to become visible in discovery.
        case waitingForService
        /// Transferring: attempt 1, 2…
        case transferring(attempt: Int)
        /// An attempt failed; the next one starts at `until` (after the service is seen again).
        case waitingToRetry(attempt: Int, until: Date)
        /// Done (see `error`).
        case completed

        public var description: String {
            switch self {
            case .notStarted: return "not started"
            case .queuedWithRunner: return "queued"
            case .waitingForService: return "waiting for the service"
            case .transferring(let attempt): return "transferring (attempt \(attempt))"
            case .waitingToRetry(let attempt, let until):
                return "waiting to retry after attempt \(attempt) (until \(ISO8601DateFormatter().string(from: until)))"
            case .completed: return "completed"
            }
        }
    }

    /// The service the body goes to.
    public let service: DiscoveredService
    /// What is sent.
    public let body: PeerUploadBody
    let background: BackgroundSessionState
    private var record: BackgroundTaskRecord
    /// The record's parts that never change, readable without the lock.
    private let recordID: String
    private let bodyKind: BackgroundTaskRecord.BodyKind
    private let filePath: String?
    private var _phase: Phase = .notStarted
    private var driver: Task<Void, Never>?
    /// Cancelled before its driver was made: it is never made.
    private var cancelledBeforeDriving = false
    private var freshStream: InputStream?
    /// A view, in a process that only queues, of a task another process runs.
    private let isSnapshot: Bool
    /// Made from a record an earlier launch (or another process) left.
    private let isReloaded: Bool
    /// When progress was last written to the record (at most once a second: see
    /// ``uploadProgressed(sent:total:)``).
    private var progressWritten = Date.distantPast
    /// The connections the attempts made in this process, for the metrics.
    private var transactions: [PeerTransactionMetrics] = []
    /// How far into the body the protocol has reported sending, at most (the task's
    /// `countOfBytesSent`: an attempt that starts again lower does not count its bytes twice).
    private var furthestSent: Int64 = 0
    /// Whether its record is removed once a delegate heard of its completion (a delivered or
    /// failed task; not one left for the next runner, nor one only queued here).
    private var forgetsRecordOnceHeard = false

    init(
        session: PeerSession, identifier: Int, background: BackgroundSessionState, record: BackgroundTaskRecord,
        body: PeerUploadBody, reloaded: Bool = false, snapshot: Bool = false
    ) {
        isSnapshot = snapshot
        isReloaded = reloaded
        self.service = DiscoveredService(
            name: record.serviceName, type: record.serviceType, domain: record.serviceDomain)
        self.body = body
        self.background = background
        self.record = record
        recordID = record.id
        bodyKind = record.bodyKind
        filePath = record.filePath
        // A reloaded stream task has no stream yet: the delegate gives one before the attempt.
        if case .stream(let stream) = body, !reloaded { freshStream = stream }
        super.init(session: session, identifier: identifier)
        self.taskDescription = record.taskDescription
        if record.bytesExpected >= 0 { countOfBytesExpectedToSend = record.bytesExpected }
        countOfBytesExpectedToReceive = 0
        // A relaunched task starts from the last count its record holds, not from 0.
        furthestSent = max(0, record.bytesSent)
        if record.bytesSent > 0 { add(sent: Int(clamping: record.bytesSent), received: 0) }
    }

    /// Where the task is now.
    public var phase: Phase { lock.withLock { _phase } }
    /// True for a task this process only queued or only views: another process runs it
    /// (see ``Phase/queuedWithRunner``); this process never learns how it ended.
    public var isQueuedElsewhere: Bool { isSnapshot || phase == .queuedWithRunner }
    /// Attempts made so far (by this process and, for a reloaded task, earlier ones).
    public var attempts: Int { lock.withLock { record.attempts } }
    /// The waits so far: for the service, and between attempts.
    public var waits: [PeerTaskWait] { lock.withLock { record.waits } }
    /// The task's id in the session's state folder (stable across relaunches).
    public var persistentIdentifier: String { recordID }
    /// The phase as last written to disk: for a task that another process runs, what that
    /// process last recorded.
    public var recordedPhase: String { lock.withLock { record.phase } }
    /// The last attempt's error, as recorded.
    public var recordedError: String? { lock.withLock { record.error } }
    /// Whether a process has asked the runner to cancel this task and the runner has not done
    /// it yet (it may not be running: it drops the task when it starts).
    public var isCancellationRequested: Bool { background.journal.hasCancelRequest(recordID) }

    // MARK: Life cycle

    override func startWork() {
        super.startWork()
        if isSnapshot { return }
        // A new task's file that cannot be read fails at once, as URLSession's does: no
        // attempt, no wait. (A task carried on from an earlier launch tries as before: its file
        // may be on a disk not mounted yet.)
        if !isReloaded, case .file(let url) = body, access(url.path, R_OK) != 0 {
            let reason = String(cString: strerror(errno))
            lock.withLock { _phase = .completed }
            background.journal.remove(recordID)
            return complete(with: PeerSessionError.transferFailed("cannot read \(url.path): \(reason)"))
        }
        lock.withLock {
            record.taskDescription = taskDescriptionUnlocked
            if record.firstResumed == nil { record.firstResumed = Date() }
        }
        guard background.runsTasks else {
            lock.withLock { _phase = .queuedWithRunner }
            // The runner's watcher sees the record and takes the task over; a record that could
            // not be written is a task nobody will run: say so, never "queued".
            do {
                try background.journal.save(lock.withLock { record })
            } catch {
                lock.withLock { _phase = .completed }
                return complete(with: error as? PeerSessionError ?? .transferFailed("\(error)"))
            }
            // Handed over: this process's part is done, and says so without claiming a delivery
            // (the runner's session reports that).
            complete(with: PeerSessionError.queuedWithRunner)
            return
        }
        // Made under the lock that `cancelWork` reads it under: a cancel is either seen by the
        // driver or seen here, never lost between the two.
        lock.withLock {
            guard !cancelledBeforeDriving else { return }
            driver = Task.detached { [self] in await self.drive() }
        }
    }

    override func cancelWork() {
        if isSnapshot {
            // A view of the runner's task: the runner is asked to cancel it (its watcher sees
            // the request), and the view ends here.
            try? background.journal.requestCancel(recordID)
            return complete(with: PeerSessionError.cancelled)
        }
        let driver = lock.withLock { () -> Task<Void, Never>? in
            if self.driver == nil { cancelledBeforeDriving = true }
            return self.driver
        }
        if let driver {
            driver.cancel()  // the driver completes the task as cancelled (or left, see finish)
        } else if background.isLeaving {
            complete(with: PeerSessionError.sessionInvalidated)  // the record stays for the next runner
        } else {
            background.journal.remove(recordID)
            complete(with: PeerSessionError.cancelled)
        }
    }

    override func finishWork() {
        lock.withLock {
            if _phase != .queuedWithRunner { _phase = .completed }
            driver = nil
            freshStream = nil
        }
        super.finishWork()
    }

    // MARK: For the upload protocol

    func checkpointSaved(_ checkpoint: Data) {
        lock.withLock { record.checkpoint = checkpoint }
        persist()
    }

    /// The upload protocol reported `sent` bytes of `total`: counted, and written to the
    /// record at most once a second (so a relaunched task shows the last count, and a fast
    /// protocol that reports every chunk does not rewrite its record for each).
    func uploadProgressed(sent: Int64, total: Int64) {
        let (grown, changedTotal, write) = lock.withLock { () -> (Int64, Bool, Bool) in
            let previous = furthestSent
            // Never past the body's size, when known; never lower than reached already.
            furthestSent = max(furthestSent, total >= 0 ? min(sent, total) : sent)
            let changedTotal = record.bytesExpected != total
            record.bytesSent = furthestSent
            record.bytesExpected = total
            let now = Date()
            let write = now.timeIntervalSince(progressWritten) >= 1
            if write { progressWritten = now }
            // How much this report moved it, decided under the lock (two reports at once
            // cannot both count the same bytes).
            return (furthestSent - previous, changedTotal, write)
        }
        if changedTotal { countOfBytesExpectedToSend = total }
        if grown > 0 { add(sent: Int(grown), received: 0) }
        if write { persist() }
    }

    // MARK: The driver

    /// Runs the state machine's actions until the task completes.
    private func drive() async {
        let configuration = session.configuration
        var machine = lock.withLock {
            PeerUploadTask.StateMachine(
                attempts: record.attempts, maximumAttempts: configuration.maximumAttempts,
                deadline: record.deadline, retryDelay: configuration.retryDelay,
                maximumRetryDelay: max(configuration.retryDelay, 60), bodyIsStream: bodyKind == .stream,
                hasFreshStream: freshStream != nil)
        }
        var resolved: ResolvedService?
        // The upload protocol's own error from the last attempt, for the delegate (see
        // `PeerSessionError.underlyingError`).
        var lastError: (any Error)?
        var actions = machine.start(now: Date())
        while !actions.isEmpty {
            let action = actions.removeFirst()
            switch action {
            case .persist:
                update(from: machine)
                persist()
            case .waitForService(let until):
                if Task.isCancelled { actions += machine.cancelled(); continue }
                resolved = await waitForService(until: until)
                if Task.isCancelled {
                    actions += machine.cancelled()
                } else if resolved != nil {
                    actions += machine.serviceVisible(now: Date())
                } else {
                    actions += machine.deadlinePassed()
                }
            case .requestNewBodyStream:
                let stream = await newBodyStream()
                lock.withLock { freshStream = stream }
                actions += Task.isCancelled ? machine.cancelled() : machine.bodyStreamProvided(stream != nil)
            case .startAttempt(let attempt):
                guard let resolved, let uploader = configuration.uploadProtocol else {
                    actions += machine.attemptFailed(
                        "the session has no upload protocol (PeerSessionConfiguration.uploadProtocol)",
                        retryable: false, now: Date())
                    continue
                }
                let body = currentBody()
                let context = PeerUploadContext(
                    task: self, attempt: attempt, checkpoint: lock.withLock { record.checkpoint })
                defer {
                    let made = context.transactions()
                    lock.withLock { transactions += made }
                }
                do {
                    try await uploader.upload(body, to: resolved, context: context)
                    actions += Task.isCancelled ? machine.cancelled() : machine.attemptSucceeded()
                } catch {
                    lastError = error
                    lock.withLock { record.error = "\(error)" }
                    actions +=
                        Task.isCancelled
                        ? machine.cancelled()
                        : machine.attemptFailed("\(error)", retryable: uploader.isRetryable(error), now: Date())
                }
            case .sleep(let until):
                beginWait(.retryDelay)
                try? await Task.sleep(for: .seconds(max(0, until.timeIntervalSinceNow)))
                endWait()
                actions += Task.isCancelled ? machine.cancelled() : machine.retryDelayEnded(now: Date())
            case .complete(let failure):
                finish(failure, underlying: lastError)
            }
        }
    }

    /// The body for an attempt: the file, the stored data, or the fresh stream.
    private func currentBody() -> PeerUploadBody {
        switch bodyKind {
        case .file: return .file(URL(fileURLWithPath: filePath ?? ""))
        case .data: return .data(background.journal.body(for: recordID) ?? Data())
        case .stream:
            let stream = lock.withLock { () -> InputStream? in
                defer { freshStream = nil }
                return freshStream
            }
            return .stream(stream ?? InputStream(data: Data()))
        }
    }

    /// Resolves the service, or waits (watching discovery) until it is visible and resolves;
    /// nil when `until` passes or the task is cancelled.
    private func waitForService(until deadline: Date) async -> ResolvedService? {
        let context = session.discoveryContext
        let service = self.service
        // A service that is there resolves at once (from avahi-daemon's cache, or within a
        // moment): past half a second, the task says it waits, as its phase already does.
        if let resolved = try? await service.resolve(timeout: 0.5, context: context) { return resolved }
        beginWait(.serviceNotVisible)
        defer { endWait() }
        return await withTaskGroup(of: ResolvedService?.self) { group in
            group.addTask {
                while !Task.isCancelled {
                    do {
                        for try await update in try ServiceBrowser(
                            type: service.type, domain: service.domain, context: context)
                        where update.services.contains(where: { $0.name == service.name }) {
                            if let resolved = try? await service.resolve(timeout: 5, context: context) {
                                return resolved
                            }
                        }
                    } catch {}
                    // The daemon went away (or the browse ended): look again shortly.
                    try? await Task.sleep(for: .seconds(2))
                }
                return nil
            }
            group.addTask {
                try? await Task.sleep(for: .seconds(max(0, deadline.timeIntervalSinceNow)))
                return nil
            }
            let first = await group.next() ?? nil
            group.cancelAll()
            return first
        }
    }

    /// Asks the delegate for a fresh stream; nil when it has none (or is not an upload delegate).
    private func newBodyStream() async -> InputStream? {
        let answered = OnceFlag()
        let answer = await withCheckedContinuation {
            (continuation: CheckedContinuation<HandedOver<InputStream>?, Never>) in
            let reply: @Sendable (InputStream?) -> Void = { stream in
                // The attempt alone reads the stream from now on.
                if answered.claim() { continuation.resume(returning: stream.map(HandedOver.init)) }
            }
            session.deliverToDelegate(orElse: { reply(nil) }) { delegate in
                guard let uploadDelegate = delegate as? PeerSessionUploadDelegate else { return reply(nil) }
                uploadDelegate.peerSession(self.session, task: self, needNewBodyStream: reply)
            }
        }
        return answer?.value
    }

    private func beginWait(_ reason: PeerTaskWait.Reason) {
        let phase = lock.withLock { () -> Phase in
            record.waits.append(PeerTaskWait(reason: reason, start: Date(), end: nil))
            return _phase
        }
        persist()
        session.deliverToDelegate { delegate in
            (delegate as? PeerSessionUploadDelegate)?.peerSession(self.session, task: self, isWaiting: phase)
        }
    }

    private func endWait() {
        lock.withLock {
            if let last = record.waits.indices.last, record.waits[last].end == nil { record.waits[last].end = Date() }
        }
        persist()
    }

    private func update(from machine: PeerUploadTask.StateMachine) {
        lock.withLock {
            record.attempts = machine.attempts
            switch machine.phase {
            case .notStarted: _phase = .notStarted
            case .waitingForService, .awaitingBodyStream: _phase = .waitingForService
            case .transferring(let attempt): _phase = .transferring(attempt: attempt)
            case .waitingToRetry(let attempt, let until): _phase = .waitingToRetry(attempt: attempt, until: until)
            case .finished: _phase = .completed
            }
            record.phase = _phase.description
        }
    }

    private func finish(_ failure: PeerUploadTask.StateMachine.Failure?, underlying: (any Error)? = nil) {
        if case .cancelled? = failure, background.isLeaving {
            // Stopped because this runner is going away: the record stays pending as last
            // written, for the next runner to adopt; only this process's object ends.
            lock.withLock { _phase = .completed }
            return complete(with: PeerSessionError.sessionInvalidated)
        }
        let error: PeerSessionError?
        switch failure {
        case nil: error = nil
        case .cancelled?: error = .cancelled
        case .deadline?: error = .timedOut("resource")
        case .noBodyStream?:
            error = .transferFailed("a retry needed the body again and the delegate gave no new body stream")
        case .failed(let reason, let attempts, let retryable)?:
            error = .transferFailed(
                retryable ? "gave up after \(attempts) attempts; the last failed with: \(reason)" : reason,
                underlying: underlying)
        }
        lock.withLock {
            record.outcome = error == nil ? .succeeded : .failed
            record.error = error?.description
        }
        if error == .cancelled {
            background.journal.remove(recordID)
        } else {
            persist()
        }
        lock.withLock { forgetsRecordOnceHeard = true }
        complete(with: error)
    }

    /// Once a delegate has heard of its completion, the record has served its purpose: it is
    /// removed in the same delivery, before did-finish-events (an app that exits then must not
    /// hear the completion again at its next launch). With none to hear it, the record keeps
    /// the outcome, and the next launch delivers it.
    override func completionDelivered(heard: Bool) {
        guard heard, lock.withLock({ forgetsRecordOnceHeard }) else { return }
        background.journal.remove(recordID)
    }

    /// Shows the task as handed to the runner.
    func markQueued() {
        lock.withLock { _phase = .queuedWithRunner }
    }

    /// Completes a task reloaded from a finished record: its events were not delivered before.
    func completeFromRecord(_ record: BackgroundTaskRecord) {
        lock.withLock { _phase = .completed }
        lock.withLock { forgetsRecordOnceHeard = true }
        complete(with: record.outcome == .succeeded ? nil : PeerSessionError.transferFailed(record.error ?? "failed"))
    }

    private func persist() {
        let snapshot = lock.withLock { record }
        // A record that cannot be written costs only the crash safety of this task.
        try? background.journal.save(snapshot)
    }

    /// Metrics carry the waits and the attempts, and their interval starts at the first
    /// `resume()`, in this process or an earlier one.
    override func completedMetrics(_ metrics: PeerTaskMetrics) -> PeerTaskMetrics {
        var metrics = metrics
        lock.withLock {
            metrics.waits = record.waits
            metrics.attempts = record.attempts
            metrics.transactionMetrics = transactions
            if let first = record.firstResumed, first < metrics.taskInterval.start {
                metrics.taskInterval = DateInterval(start: first, end: metrics.taskInterval.end)
            }
        }
        return metrics
    }
}
