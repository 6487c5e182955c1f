import Foundation
import SalutStreams

/// A unit of work in a ``PeerSession``, like `URLSessionTask`: created suspended, started by
/// ``resume()``, paused by ``suspend()`` (counted: each suspend needs a resume), stopped by
/// ``cancel()``. Its delegate hears `didFinishCollecting metrics` and then, last,
/// `didCompleteWithError`.
///
/// Calls that make no sense in the current state (resuming a completed task, cancelling twice)
/// do nothing, as Apple documents for its tasks.
open class PeerSessionTask: NSObject, @unchecked Sendable, ProgressReporting {
    // @unchecked: mutable state is guarded by `lock` (a `StateLock`); delegate calls go through
    // the session's serial delivery.

    /// Where a task is in its life.
    public enum State: Int, Sendable, CustomStringConvertible {
        case running = 0, suspended = 1, canceling = 2, completed = 3
        public var description: String { ["running", "suspended", "canceling", "completed"][rawValue] }
    }

    /// The priority tasks start with (0 … 1; higher waits less for a connection slot).
    public static let defaultPriority: Float = 0.5
    /// A priority below the default.
    public static let lowPriority: Float = 0.25
    /// A priority above the default.
    public static let highPriority: Float = 0.75

    /// Unique within its session.
    public let taskIdentifier: Int
    /// The session that made the task.
    public let session: PeerSession
    /// Bytes done over bytes expected (sent plus received); indeterminate until both
    /// expectations are set.
    public let progress: Progress

    let lock = StateLock()
    private var _state: State = .suspended
    private var suspendCount = 1
    private var started = false
    private var _error: (any Error)?
    private var _description: String?
    private var _priority: Float = PeerSessionTask.defaultPriority
    private var sent: Int64 = 0
    private var received: Int64 = 0
    private var expectedToSend: Int64 = -1
    private var expectedToReceive: Int64 = -1
    private var runningWaiters: [CheckedContinuation<Void, Never>] = []
    let metrics = MetricsRecorder()

    init(session: PeerSession, identifier: Int) {
        self.session = session
        self.taskIdentifier = identifier
        progress = Progress(totalUnitCount: -1)
        super.init()
    }

    // MARK: Properties

    /// The current state.
    public var state: State { lock.withLock { _state } }
    /// Why the task failed; nil while it runs and after success.
    public var error: (any Error)? { lock.withLock { _error } }
    /// Free text for the app's own use.
    public var taskDescription: String? {
        get { lock.withLock { _description } }
        set { lock.withLock { _description = newValue } }
    }
    /// The description, for subclasses that already hold `lock`.
    var taskDescriptionUnlocked: String? { _description }
    /// 0 (lowest) … 1 (highest); values outside are clamped.
    public var priority: Float {
        get { lock.withLock { _priority } }
        set { lock.withLock { _priority = min(1, max(0, newValue)) } }
    }
    /// Application bytes written so far. For a background upload task: how far into the body
    /// its protocol has reported sending, across attempts and relaunches (bytes the peer held
    /// already, when the protocol reports from where it resumed, count too; an attempt that
    /// starts lower does not count the same bytes twice): at most the body's size.
    public var countOfBytesSent: Int64 { lock.withLock { sent } }
    /// Application bytes read so far.
    public var countOfBytesReceived: Int64 { lock.withLock { received } }
    /// How many bytes the app expects to send (-1: unknown); sets the progress total.
    public var countOfBytesExpectedToSend: Int64 {
        get { lock.withLock { expectedToSend } }
        set {
            lock.withLock { expectedToSend = newValue }
            updateProgress()
        }
    }
    /// How many bytes the app expects to receive (-1: unknown); sets the progress total.
    public var countOfBytesExpectedToReceive: Int64 {
        get { lock.withLock { expectedToReceive } }
        set {
            lock.withLock { expectedToReceive = newValue }
            updateProgress()
        }
    }

    // MARK: Life cycle

    /// Starts the task, or resumes it after ``suspend()``. Each `suspend()` needs one `resume()`;
    /// extra calls do nothing.
    public func resume() {
        typealias Resumed = (waiters: [CheckedContinuation<Void, Never>], first: Bool)
        let resumed = lock.withLock { () -> Resumed? in
            guard _state == .suspended || _state == .running else { return nil }
            if suspendCount > 0 { suspendCount -= 1 }
            guard suspendCount == 0, _state == .suspended else { return nil }
            _state = .running
            let first = !started
            started = true
            let waiters = runningWaiters
            runningWaiters = []
            return (waiters, first)
        }
        guard let resumed else { return }
        resumed.waiters.forEach { $0.resume() }
        if resumed.first {
            metrics.taskStarted()
            startWork()
        }
    }

    /// Pauses the task: queued operations wait (one in progress finishes), and the idle
    /// timeout does not count. Counted: it runs again after as many `resume()` calls.
    public func suspend() {
        lock.withLock {
            guard _state == .suspended || _state == .running else { return }
            suspendCount += 1
            _state = .suspended
        }
    }

    /// Cancels the task: it completes with ``PeerSessionError/cancelled``; operations waiting
    /// or queued fail the same way. A stream task's connection is cut with a reset (its peer's
    /// read fails; it never sees a clean end), unless its streams were captured. Nothing
    /// happens once it has completed.
    public func cancel() {
        let cancelled = lock.withLock { () -> [CheckedContinuation<Void, Never>]? in
            guard _state == .suspended || _state == .running else { return nil }
            _state = .canceling
            let waiters = runningWaiters
            runningWaiters = []
            return waiters
        }
        guard let waiters = cancelled else { return }
        waiters.forEach { $0.resume() }
        cancelWork()
    }

    /// Suspends the caller while the task is suspended.
    func waitUntilRunning() async {
        await withCheckedContinuation { continuation in
            let parked = lock.withLock { () -> Bool in
                guard _state == .suspended else { return false }
                runningWaiters.append(continuation)
                return true
            }
            if !parked { continuation.resume() }
        }
    }

    /// How many queued operations wait for the task to run again (it is suspended).
    var operationsWaitingToRun: Int { lock.withLock { runningWaiters.count } }

    var isFinished: Bool { let current = state; return current == .completed || current == .canceling }

    // MARK: For subclasses

    /// Called once, by the first `resume()`.
    func startWork() {}

    /// Called by `cancel()`; the default completes at once.
    func cancelWork() {
        complete(with: PeerSessionError.cancelled)
    }

    /// Called once when the task completes, before the delegate hears of it (release
    /// resources here).
    func finishWork() {}

    /// Completes the task (the first call wins): metrics, then `didCompleteWithError`.
    func complete(with error: (any Error)?) {
        typealias Completed = (waiters: [CheckedContinuation<Void, Never>], sent: Int64, received: Int64)
        let completed = lock.withLock { () -> Completed? in
            guard _state != .completed else { return nil }
            _state = .completed
            _error = error
            let waiters = runningWaiters
            runningWaiters = []
            return (waiters, sent, received)
        }
        guard let completed else { return }
        completed.waiters.forEach { $0.resume() }
        finishWork()
        session.taskCompleted(
            self, error: error,
            metrics: completedMetrics(metrics.finish(sent: completed.sent, received: completed.received)))
    }

    /// The completion was delivered, on the delegate queue, before anything queued after it:
    /// `heard` when a delegate was there (a task delegate heard it, or the app's delegate
    /// takes no task events). Subclasses act on it (a background task forgets
    /// its record).
    func completionDelivered(heard: Bool) {}

    /// The metrics the delegate hears at completion; subclasses add what they know.
    func completedMetrics(_ metrics: PeerTaskMetrics) -> PeerTaskMetrics { metrics }

    func add(sent moreSent: Int, received moreReceived: Int) {
        lock.withLock {
            sent += Int64(moreSent)
            received += Int64(moreReceived)
        }
        updateProgress()
    }

    private func updateProgress() {
        let (done, total) = lock.withLock { () -> (Int64, Int64) in
            let done = sent + received
            let total = expectedToSend >= 0 && expectedToReceive >= 0 ? expectedToSend + expectedToReceive : -1
            return (done, total)
        }
        progress.totalUnitCount = total
        progress.completedUnitCount = done
    }
}
