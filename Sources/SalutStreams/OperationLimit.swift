import Dispatch
import Foundation

/// The bound on one read or write operation: an optional deadline (one timer for the whole
/// operation, however many times it waits) and cancellation (by the task that started it, or by
/// whoever holds the limit: a session's async call whose caller was cancelled).
///
/// A buffer wait registers its wake-up here; the timer or `cancel()` calls it. After each wait
/// the operation asks ``state`` why it woke.
package final class OperationLimit: @unchecked Sendable {
    // @unchecked: `ended`, `wake` and `timer` are guarded by `lock`.

    /// Why an operation must stop, if it must.
    package enum Ending: Sendable, Equatable { case deadlinePassed, cancelled }

    private let lock = StateLock()
    private var ended: Ending?
    private var wake: (@Sendable () -> Void)?
    private var timer: DispatchSourceTimer?
    private var started = false

    /// A limit with a deadline (nil: none). A deadline already past ends the operation at once.
    package init(deadline: ContinuousClock.Instant? = nil) {
        arm(deadline: deadline)
    }

    /// Sets the deadline (for a limit made before its operation starts). One timer per limit:
    /// a second call does nothing.
    package func arm(deadline: ContinuousClock.Instant?) {
        guard let deadline else { return }
        let remaining = ContinuousClock.now.duration(to: deadline)
        guard remaining > .zero else {
            lock.withLock { if ended == nil { ended = .deadlinePassed } }
            return
        }
        // Made and resumed under the lock, only when none is armed and the operation goes on
        // (libdispatch aborts on releasing a source that was never resumed).
        lock.withLock {
            guard timer == nil, ended == nil else { return }
            let made = DispatchSource.makeTimerSource(queue: .global())
            made.schedule(deadline: .now() + Self.dispatchInterval(remaining))
            made.setEventHandler { [weak self] in self?.end(.deadlinePassed) }
            timer = made
            made.resume()
        }
    }

    /// `duration` for libdispatch, saturating instead of overflowing.
    package static func dispatchInterval(_ duration: Duration) -> DispatchTimeInterval {
        let (seconds, attoseconds) = duration.components
        let nanoseconds = seconds.multipliedReportingOverflow(by: 1_000_000_000)
        guard !nanoseconds.overflow else { return .never }
        let total = nanoseconds.partialValue.addingReportingOverflow(attoseconds / 1_000_000_000)
        return total.overflow ? .never : .nanoseconds(Int(clamping: total.partialValue))
    }

    /// A timeout in seconds made safe: NaN or not above 0 gives `fallback`; at most a billion
    /// seconds (about 31 years), so that infinity means "practically never".
    package static func clampedSeconds(_ seconds: TimeInterval, default fallback: TimeInterval) -> TimeInterval {
        guard !seconds.isNaN, seconds > 0 else { return fallback }
        return min(seconds, 1e9)
    }

    /// The deadline `seconds` from now (nil for 0 or less: no deadline; at most a billion
    /// seconds, so any finite or infinite value is safe).
    package static func deadline(after seconds: TimeInterval) -> ContinuousClock.Instant? {
        guard seconds > 0, !seconds.isNaN else { return nil }
        return ContinuousClock.now.advanced(by: .milliseconds(Int64(min(seconds, 1e9) * 1000)))
    }

    /// Marks the operation as started; false when it was cancelled while still queued (its
    /// caller has been told already, and it must not run).
    package func begin() -> Bool {
        lock.withLock {
            guard ended != .cancelled else { return false }
            started = true
            return true
        }
    }

    /// Cancels the operation; true when it had not started (the caller can answer at once).
    package func cancelBeforeStart() -> Bool {
        end(.cancelled)
    }

    deinit { timer?.cancel() }

    /// Why the operation must stop, or nil while it may go on. The calling task's own
    /// cancellation counts too.
    package var state: Ending? {
        if let ended = lock.withLock({ ended }) { return ended }
        return Task.isCancelled ? .cancelled : nil
    }

    /// Stops the operation: a wait in progress returns at once.
    package func cancel() { end(.cancelled) }

    /// Stops the timer once the operation is over.
    package func finish() {
        let timer = lock.withLock { () -> DispatchSourceTimer? in
            defer { self.timer = nil }
            return self.timer
        }
        timer?.cancel()
    }

    /// Ends the operation (the first reason stays), stops its timer and wakes its wait. True
    /// when it had neither started nor ended, decided under the same lock as the end, so that
    /// `begin()` cannot slip in between.
    @discardableResult
    private func end(_ reason: Ending) -> Bool {
        let (queued, wake, timer) = lock.withLock { () -> (Bool, (@Sendable () -> Void)?, DispatchSourceTimer?) in
            let queued = !started && ended == nil
            if ended == nil { ended = reason }
            defer { self.wake = nil; self.timer = nil }
            return (queued, self.wake, self.timer)
        }
        timer?.cancel()
        wake?()
        return queued
    }

    /// Registers the wake-up of the wait in progress; false (nothing registered) when the
    /// operation has already ended.
    func register(_ wakeUp: @escaping @Sendable () -> Void) -> Bool {
        lock.withLock {
            guard ended == nil else { return false }
            wake = wakeUp
            return true
        }
    }

    /// The wait is over: forget its wake-up.
    func unregister() {
        lock.withLock { wake = nil }
    }
}
