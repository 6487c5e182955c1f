import Foundation

/// Holds a socket stream pair in `opening` until its connection is made (or fails), and starts
/// connecting when the first of the two streams is opened.
final class ConnectionGate: @unchecked Sendable {
    // @unchecked: `state` and `starter` are guarded by `condition`.

    enum State { case idle, connecting, connected, failed(any Error) }

    private let condition = NSCondition()
    private var state: State = .idle
    private var starter: (@Sendable () -> Void)?
    private var waiters: [UInt64: CheckedContinuation<Void, Never>] = [:]
    private var nextWaiter: UInt64 = 0

    init(starter: @escaping @Sendable () -> Void) {
        self.starter = starter
    }

    /// Called by a stream's `open()`: starts connecting the first time.
    func requestOpen() {
        condition.lock()
        let start = starter
        starter = nil
        if start != nil { state = .connecting }
        condition.unlock()
        start?()
    }

    var current: State {
        condition.lock(); defer { condition.unlock() }
        return state
    }

    /// Settles the gate; a failure is final (a late success never undoes it).
    func settle(_ outcome: State) {
        condition.lock()
        if case .failed = state {
            condition.unlock()
            return
        }
        state = outcome
        condition.broadcast()
        let resumed = waiters.values
        waiters = [:]
        condition.unlock()
        for waiter in resumed { waiter.resume() }
    }

    /// Suspends until connected or failed (returns at once when not connecting), or until the
    /// calling task is cancelled (check `current` afterwards).
    func settled() async {
        let id = newWaiterID()
        await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                condition.lock()
                if case .connecting = state, !Task.isCancelled {
                    waiters[id] = continuation
                    condition.unlock()
                } else {
                    condition.unlock()
                    continuation.resume()
                }
            }
        } onCancel: {
            condition.lock()
            let waiter = waiters.removeValue(forKey: id)
            condition.unlock()
            waiter?.resume()
        }
    }

    private func newWaiterID() -> UInt64 {
        condition.lock(); defer { condition.unlock() }
        nextWaiter += 1
        return nextWaiter
    }

    /// Blocks until connected or failed (for unscheduled streams read or written while opening).
    func waitUntilSettled() {
        condition.lock()
        while case .connecting = state { condition.wait() }
        condition.unlock()
    }
}
