import Foundation
import SalutDiscovery
import SalutStreams

/// A configured set of peer-stream tasks, like `URLSession`: one session, many tasks, created
/// suspended, observed by a delegate or by completion handlers, measured by metrics.
///
/// ```swift
/// let session = PeerSession(configuration: .ephemeral, delegate: self, delegateQueue: nil)
/// let task = session.streamTask(with: DiscoveredService(name: "Kitchen", type: "_salut._tcp"))
/// task.resume()
/// ```
///
/// Delegate calls and completion handlers run one at a time on `delegateQueue`. The session
/// holds its delegate until it is invalidated (``finishTasksAndInvalidate()`` or
/// ``invalidateAndCancel()``); after that, new tasks complete at once with
/// ``PeerSessionError/sessionInvalidated``.
open class PeerSession: NSObject, @unchecked Sendable {
    // @unchecked: mutable state is guarded by `lock` (a `StateLock`); delegate calls go through
    // `deliver`, one at a time and in order.

    /// A session with the default configuration and no delegate (invalidating it does nothing).
    public static let shared = PeerSession(configuration: .default, delegate: nil, delegateQueue: nil, isShared: true)

    /// A copy of the configuration the session was made with.
    public let configuration: PeerSessionConfiguration
    /// Where delegate calls and completion handlers run (a serial queue unless one was given).
    public let delegateQueue: OperationQueue
    /// Free text for the app's own use.
    public var sessionDescription: String? {
        get { lock.withLock { description_ } }
        set { lock.withLock { description_ = newValue } }
    }

    let slots: AsyncSlots
    let trustStore: TrustStore
    let discoveryContext: DiscoveryContext
    /// Resolves host names (`.local` ones through the avahi-daemon).
    let resolver: AddressResolver

    /// The TLS context every task's `startSecureConnection` shares (built on first use), so that
    /// trust roots and the identity are loaded once per session.
    var sharedTLSContext: SharedTLSContext? {
        lock.withLock {
            if tlsContext == nil { tlsContext = try? SharedTLSContext(configuration.tlsConfiguration()) }
            return tlsContext
        }
    }
    private var tlsContext: SharedTLSContext?

    /// The background session's state (nil for other sessions).
    let background: BackgroundSessionState?

    private let lock = StateLock()
    private let isShared: Bool
    private var delegateObject: (any PeerSessionDelegate)?
    private var tasks: [Int: PeerSessionTask] = [:]
    private var nextIdentifier = 1
    private var invalidating = false
    private var invalidated = false
    private var description_: String?
    /// Deliveries waiting for the one on `delegateQueue` to finish (guarded by `lock`).
    private var pendingDeliveries: [@Sendable () -> Void] = []
    private var delivering = false
    /// Whether this session found events pending when it was made (completions no delegate
    /// heard, tasks to carry on), and so calls
    /// ``PeerSessionUploadDelegate/peerSessionDidFinishEvents(forBackgroundSession:)`` once
    /// they are delivered; false when it will not call it (nothing was pending, or this process
    /// only queues). An app that relaunches to finish its uploads waits for that call when
    /// this is true (its delegate must be a ``PeerSessionUploadDelegate`` to hear it), and has
    /// nothing to wait for otherwise.
    public var deliversRelaunchEvents: Bool { lock.withLock { relaunchEvents } }
    private var relaunchEvents = false

    /// Why a background session's state folder could not be used (its upload tasks fail
    /// saying so), nil when it could.
    let backgroundFailure: String?
    /// After a relaunch with tasks pending: the identifiers of the tasks carried on whose
    /// completion did-finish-events waits for (guarded by `lock`); nil once it was called, or
    /// when there was nothing to wait for.
    private var eventsAwaited: Set<Int>?

    /// Makes a session.
    /// - Parameters:
    ///   - configuration: copied; later changes to it do not reach the session.
    ///   - delegate: held strongly until the session is invalidated.
    ///   - delegateQueue: where delegate calls and handlers run; nil makes a serial queue.
    public convenience init(
        configuration: PeerSessionConfiguration, delegate: (any PeerSessionDelegate)? = nil,
        delegateQueue: OperationQueue? = nil
    ) {
        self.init(configuration: configuration, delegate: delegate, delegateQueue: delegateQueue, isShared: false)
    }

    init(
        configuration: PeerSessionConfiguration, delegate: (any PeerSessionDelegate)?, delegateQueue: OperationQueue?,
        isShared: Bool, context: DiscoveryContext = .shared
    ) {
        self.configuration = configuration
        self.delegateObject = delegate
        self.isShared = isShared
        if let delegateQueue {
            self.delegateQueue = delegateQueue
        } else {
            let queue = OperationQueue()
            queue.maxConcurrentOperationCount = 1
            queue.name = "salut.session.delegate"
            self.delegateQueue = queue
        }
        slots = AsyncSlots(limit: configuration.maximumConnectionsPerHost)
        trustStore = TrustStore(file: configuration.isEphemeral ? nil : configuration.trustStoreURL)
        discoveryContext = context
        resolver = context.addressResolver
        if let identifier = configuration.identifier, let directory = configuration.backgroundStateDirectory {
            // A folder that cannot be made leaves a session whose upload tasks fail at once,
            // saying why.
            do {
                background = try BackgroundSessionState(
                    identifier: identifier, directory: directory,
                    wantsToRun: configuration.runsBackgroundTasks)
                backgroundFailure = nil
            } catch {
                background = nil
                backgroundFailure = "\(error)"
            }
        } else {
            background = nil
            backgroundFailure = nil
        }
        super.init()
        if let background, background.runsTasks {
            // A relaunch with something pending: the events of the completions no delegate
            // heard, and of the tasks carried on once they end, then did-finish-events (as
            // URLSession calls it after the events of a relaunch). Nothing pending: no call.
            let (delivered, carried) = adoptQueuedTasks()
            if delivered > 0 || !carried.isEmpty {
                lock.withLock { relaunchEvents = true }
                // (Those already completed are not waited for: they left `tasks` first.)
                lock.withLock { eventsAwaited = Set(carried.filter { tasks[$0] != nil }) }
                finishEventsIfAllDelivered()
            }
            background.watch { [weak self] in self?.adoptQueuedTasks() }
        } else {
            viewQueuedTasks()
        }
    }

    /// True when this process runs the background session's tasks; false when it only queues
    /// them for another process (and for sessions that are not background sessions).
    public var runsBackgroundTasks: Bool { background?.runsTasks ?? false }

    /// The delegate, until the session is invalidated.
    public var delegate: (any PeerSessionDelegate)? { lock.withLock { delegateObject } }

    // MARK: Making tasks

    /// A stream task to `hostname` (IPv4, IPv6 literal, DNS or `.local` name) and `port`,
    /// suspended: call `resume()`.
    public func streamTask(withHostName hostname: String, port: Int) -> PeerStreamTask {
        register { PeerStreamTask(session: self, identifier: $0, target: .host(hostname, port)) }
    }

    /// A stream task to a discovered service (resolved when the task starts), suspended.
    public func streamTask(with service: DiscoveredService) -> PeerStreamTask {
        register { PeerStreamTask(session: self, identifier: $0, target: .service(service)) }
    }

    /// A stream task to a `NetService` by its name, type and domain (resolved when the task
    /// starts), suspended.
    public func streamTask(with service: NetService) -> PeerStreamTask {
        let trim = { (text: String) in text.hasSuffix(".") ? String(text.dropLast()) : text }
        let domain = trim(service.domain)
        return streamTask(
            with: DiscoveredService(
                name: service.name, type: trim(service.type), domain: domain.isEmpty ? "local" : domain))
    }

    /// Registers a task reloaded from disk under its old identifier (later ones count on).
    func registerKeeping<T: PeerSessionTask>(_ identifier: Int, _ make: (Int) -> T) -> T {
        lock.withLock {
            let id = tasks[identifier] == nil && identifier > 0 ? identifier : nextIdentifier
            nextIdentifier = max(nextIdentifier, id + 1)
            let task = make(id)
            tasks[id] = task
            return task
        }
    }

    /// New tasks get identifiers above `identifier` (those of tasks other processes made).
    func reserveIdentifiers(through identifier: Int) {
        lock.withLock { nextIdentifier = max(nextIdentifier, identifier + 1) }
    }

    /// Registers a new task; after invalidation the task is born completed with
    /// ``PeerSessionError/sessionInvalidated``.
    func register<T: PeerSessionTask>(_ make: (Int) -> T) -> T {
        let (task, closed) = lock.withLock { () -> (T, Bool) in
            let identifier = nextIdentifier
            nextIdentifier += 1
            let closed = invalidating || invalidated
            let task = make(identifier)
            if !closed { tasks[identifier] = task }
            return (task, closed)
        }
        if closed { task.complete(with: PeerSessionError.sessionInvalidated) }
        return task
    }

    /// Every task that has not completed. In a process that only queues for a background
    /// session's runner, also views of the tasks the runner has pending (their phase is
    /// ``PeerUploadTask/Phase/queuedWithRunner``; ``PeerUploadTask/recordedPhase`` says what
    /// the runner last recorded).
    public var allTasks: [PeerSessionTask] {
        let own = lock.withLock { Array(tasks.values) }
        return (own + (background?.snapshots ?? [])).sorted { $0.taskIdentifier < $1.taskIdentifier }
    }

    /// ``allTasks``, handed to `completionHandler` on the delegate queue (Foundation's
    /// `getAllTasks(completionHandler:)`): after a relaunch, a background session's tasks.
    public func getAllTasks(completionHandler: @escaping @Sendable ([PeerSessionTask]) -> Void) {
        let current = allTasks
        deliver { completionHandler(current) }
    }

    // MARK: Invalidation

    /// Lets running tasks finish, refuses new ones, then tells the delegate
    /// `didBecomeInvalidWithError(nil)` and lets go of it. Does nothing on ``shared``.
    public func finishTasksAndInvalidate() {
        guard !isShared else { return }
        let done = lock.withLock { () -> Bool in
            guard !invalidating else { return false }
            invalidating = true
            return tasks.isEmpty
        }
        if done { becomeInvalid() }
    }

    /// Cancels every task, refuses new ones, then tells the delegate
    /// `didBecomeInvalidWithError(nil)` and lets go of it. Does nothing on ``shared``.
    public func invalidateAndCancel() {
        guard !isShared else { return }
        let (running, done) = lock.withLock { () -> ([PeerSessionTask], Bool) in
            invalidating = true
            return (Array(tasks.values), tasks.isEmpty)
        }
        running.forEach { $0.cancel() }
        if done { becomeInvalid() }
    }

    /// For the process that runs a background session and is stopping (a daemon told to quit):
    /// stops its upload tasks without ending them. Their records stay pending on disk, so the
    /// next runner with this identifier adopts and resumes them, as a system daemon carries on
    /// with a background `URLSession`'s tasks when the app goes away. Here each task object
    /// completes with ``PeerSessionError/sessionInvalidated``; then the session is invalidated
    /// as by ``invalidateAndCancel()``. On other sessions, the same as ``invalidateAndCancel()``.
    public func invalidateLeavingBackgroundTasks() {
        background?.leave()
        background?.stopWatching()
        invalidateAndCancel()
    }

    private func becomeInvalid() {
        let first = lock.withLock { () -> Bool in
            defer { invalidated = true }
            return !invalidated
        }
        guard first else { return }
        background?.stopWatching()
        background?.dropSnapshots()
        deliverToDelegate { delegate in delegate.peerSession(self, didBecomeInvalidWithError: nil) }
        deliver { self.lock.withLock { self.delegateObject = nil } }
    }

    // MARK: Delivery

    /// Runs `body` on the delegate queue, after every earlier delivery has finished.
    /// No thread waits for it: the next delivery is added to the queue when the previous one
    /// has run, so deliveries stay in order even on a concurrent delegate queue.
    func deliver(_ body: @escaping @Sendable () -> Void) {
        let idle = lock.withLock { () -> Bool in
            pendingDeliveries.append(body)
            defer { delivering = true }
            return !delivering
        }
        if idle { deliverNext() }
    }

    private func deliverNext() {
        let next = lock.withLock { () -> (@Sendable () -> Void)? in
            guard !pendingDeliveries.isEmpty else {
                delivering = false
                return nil
            }
            return pendingDeliveries.removeFirst()
        }
        guard let next else { return }
        delegateQueue.addOperation {
            next()
            self.deliverNext()
        }
    }

    /// Runs `body` with the delegate on the delegate queue; `orElse` (on the same path) when
    /// there is none.
    func deliverToDelegate(
        orElse fallback: (@Sendable () -> Void)? = nil,
        _ body: @escaping @Sendable (any PeerSessionDelegate) -> Void
    ) {
        deliver {
            if let delegate = self.delegate { body(delegate) } else { fallback?() }
        }
    }

    /// A task completed: metrics, then completion, to the delegate; then invalidation if it was
    /// the last task of an invalidating session.
    func taskCompleted(_ task: PeerSessionTask, error: (any Error)?, metrics: PeerTaskMetrics) {
        deliverToDelegate(orElse: { task.completionDelivered(heard: false) }) { delegate in
            guard let taskDelegate = delegate as? PeerSessionTaskDelegate else {
                // A delegate that does not take task events: the app chose not to hear them.
                return task.completionDelivered(heard: true)
            }
            taskDelegate.peerSession(self, task: task, didFinishCollecting: metrics)
            taskDelegate.peerSession(self, task: task, didCompleteWithError: error)
            task.completionDelivered(heard: true)
        }
        let (last, awaited) = lock.withLock { () -> (Bool, Bool) in
            tasks.removeValue(forKey: task.taskIdentifier)
            let awaited = eventsAwaited?.remove(task.taskIdentifier) != nil
            return (invalidating && tasks.isEmpty, awaited)
        }
        if awaited { finishEventsIfAllDelivered() }
        if last { becomeInvalid() }
    }

    /// Once no task carried on at the relaunch is left running: did-finish-events, after the
    /// completions already handed to the delegate queue (it delivers in order).
    private func finishEventsIfAllDelivered() {
        let done = lock.withLock { () -> Bool in
            guard eventsAwaited?.isEmpty == true else { return false }
            eventsAwaited = nil
            return true
        }
        guard done else { return }
        deliverToDelegate { delegate in
            (delegate as? PeerSessionUploadDelegate)?.peerSessionDidFinishEvents(forBackgroundSession: self)
        }
    }
}
