import Dispatch
import Foundation

/// Holds a socket stream pair in `opening` until its connection is made (or fails), and starts
/// connecting when the first of the two streams is opened.
final class ConnectionGate: @unchecked Sendable {
    // @unchecked: every mutable property is guarded by `lock`.

    enum State { case idle, connecting, connected, failed(any Error) }

    private let lock = StateLock()
    private var state: State = .idle
    private var starter: (@Sendable () -> Void)?
    private var waiters: [UInt64: CheckedContinuation<Void, Never>] = [:]
    private var nextWaiter: UInt64 = 0
    /// Threads blocked in ``waitUntilSettled()``: a semaphore each, made only when a thread
    /// must wait (most connections never have one).
    private var blockedThreads: [DispatchSemaphore] = []

    init(starter: @escaping @Sendable () -> Void) {
        self.starter = starter
    }

    /// Called by a stream's `open()`: starts connecting the first time.
    func requestOpen() {
        let start = lock.withLock {
            let start = starter
            starter = nil
            if start != nil { state = .connecting }
            return start
        }
        start?()
    }

    var current: State {
        lock.withLock { state }
    }

    /// Settles the gate; a failure is final (a late success never undoes it).
    func settle(_ outcome: State) {
        let (resumed, blocked) = lock.withLock { () -> ([CheckedContinuation<Void, Never>], [DispatchSemaphore]) in
            if case .failed = state { return ([], []) }
            state = outcome
            defer { waiters = [:]; blockedThreads = [] }
            return (Array(waiters.values), blockedThreads)
        }
        for waiter in resumed { waiter.resume() }
        for thread in blocked { thread.signal() }
    }

    /// Suspends until connected or failed (returns at once when not connecting), or until the
    /// calling task is cancelled (check `current` afterwards).
    func settled() async {
        let id = newWaiterID()
        await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                let waits = lock.withLock {
                    guard case .connecting = state, !Task.isCancelled else { return false }
                    waiters[id] = continuation
                    return true
                }
                if !waits { continuation.resume() }
            }
        } onCancel: {
            let waiter = lock.withLock { waiters.removeValue(forKey: id) }
            waiter?.resume()
        }
    }

    private func newWaiterID() -> UInt64 {
        lock.withLock {
            nextWaiter += 1
            return nextWaiter
        }
    }

    /// Blocks until connected or failed (for unscheduled streams read or written while opening).
    func waitUntilSettled() {
        let semaphore = lock.withLock { () -> DispatchSemaphore? in
            guard case .connecting = state else { return nil }
            let semaphore = DispatchSemaphore(value: 0)
            blockedThreads.append(semaphore)
            return semaphore
        }
        semaphore?.wait()
    }
}
