import Foundation
import SalutStreams

/// Runs asynchronous operations one after another, in the order they were enqueued.
///
/// The hand-over is a queue under a `StateLock` (a pthread mutex) rather than an `AsyncStream`:
/// an operation's captures (a task made on another thread a moment ago) are then published to
/// the lane's consumer by a lock ThreadSanitizer understands. One rehearsal's ThreadSanitizer
/// run reported a task's initialisation against its first operation when the hand-over was an
/// `AsyncStream`.
final class OperationLane: Sendable {
    /// The queue the consumer drains; the lane finishes it when it goes away.
    private let queue = Queue()

    init() {
        let queue = self.queue
        Task.detached {
            while let operation = await queue.next() { await operation() }
        }
    }

    func enqueue(_ operation: @escaping @Sendable () async -> Void) {
        queue.append(operation)
    }

    deinit { queue.finish() }

    /// Operations waiting to run, and the consumer when it waits for one.
    private final class Queue: @unchecked Sendable {
        // @unchecked: `pending`, `consumer` and `finished` are guarded by `lock` (a `StateLock`).
        typealias Operation = @Sendable () async -> Void
        private let lock = StateLock()
        /// Operations from `first` on are waiting; the slots before it are emptied as they are
        /// taken (an operation holds its data and its task) and dropped once they are half.
        private var pending: [Operation?] = []
        private var first = 0
        private var consumer: CheckedContinuation<Void, Never>?
        private var finished = false

        func append(_ operation: @escaping Operation) {
            let waiting = lock.withLock { () -> CheckedContinuation<Void, Never>? in
                guard !finished else { return nil }
                pending.append(operation)
                defer { consumer = nil }
                return consumer
            }
            waiting?.resume()
        }

        /// The next operation; nil once the lane is gone and nothing is left. It is always
        /// taken under the lock (a wake-up only says to look again).
        func next() async -> Operation? {
            while true {
                let taken = lock.withLock { () -> Operation?? in
                    if first < pending.count, let operation = pending[first] {
                        pending[first] = nil
                        first += 1
                        if first == pending.count {
                            pending.removeAll(keepingCapacity: true)
                            first = 0
                        } else if first >= 64, first * 2 >= pending.count {
                            pending.removeFirst(first)
                            first = 0
                        }
                        return .some(operation)
                    }
                    return finished ? .some(nil) : nil
                }
                if let taken { return taken }
                await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                    let parked = lock.withLock { () -> Bool in
                        guard first == pending.count, !finished else { return false }
                        consumer = continuation
                        return true
                    }
                    if !parked { continuation.resume() }
                }
            }
        }

        func finish() {
            let waiting = lock.withLock { () -> CheckedContinuation<Void, Never>? in
                finished = true
                defer { consumer = nil }
                return consumer
            }
            waiting?.resume()
        }
    }
}

/// A value that is set once and awaited by any number of tasks.
final class Latch<Value: Sendable>: @unchecked Sendable {
    // @unchecked: `value`, `waiters` and `cancellable` are guarded by `lock` (a `StateLock`).
    private let lock = StateLock()
    private var value: Value?
    private var waiters: [UInt64: CheckedContinuation<Value, Never>] = [:]
    private var nextWaiter: UInt64 = 0

    /// Sets the value (the first call wins) and wakes every waiter.
    func open(_ newValue: Value) {
        typealias Woken = (
            waiters: [CheckedContinuation<Value, Never>], cancellable: [CheckedContinuation<Value?, Never>]
        )
        let woken = lock.withLock { () -> Woken? in
            guard value == nil else { return nil }
            value = newValue
            let resumed = Array(waiters.values)
            let resumedOptional = Array(cancellable.values)
            waiters = [:]
            cancellable = [:]
            return (resumed, resumedOptional)
        }
        guard let woken else { return }
        for waiter in woken.waiters { waiter.resume(returning: newValue) }
        for waiter in woken.cancellable { waiter.resume(returning: newValue) }
    }

    var current: Value? { lock.withLock { value } }

    func wait() async -> Value {
        let id = lock.withLock { () -> UInt64 in
            nextWaiter += 1; return nextWaiter
        }
        return await withCheckedContinuation { continuation in
            let ready = lock.withLock { () -> Value? in
                if let value { return value }
                waiters[id] = continuation
                return nil
            }
            if let ready { continuation.resume(returning: ready) }
        }
    }

    /// Waits for the value, or throws `CancellationError` as soon as the calling task is
    /// cancelled (the value, when it comes, is still there for others).
    func waitUnlessCancelled() async throws -> Value {
        let id = lock.withLock { () -> UInt64 in
            nextWaiter += 1; return nextWaiter
        }
        let value: Value? = await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Value?, Never>) in
                park(continuation, id: id)
            }
        } onCancel: {
            unpark(id)?.resume(returning: nil)
        }
        guard let value else { throw CancellationError() }
        return value
    }

    /// Keeps the continuation until the value comes, unless it is there already or the task
    /// is already cancelled (then it is resumed at once).
    private func park(_ continuation: CheckedContinuation<Value?, Never>, id: UInt64) {
        // What to resume the continuation with at once (nil: it was kept for later).
        let now = lock.withLock { () -> Value?? in
            if let value { return .some(value) }
            if Task.isCancelled { return .some(nil) }
            cancellable[id] = continuation
            return nil
        }
        if let now { continuation.resume(returning: now) }
    }

    private func unpark(_ id: UInt64) -> CheckedContinuation<Value?, Never>? {
        lock.withLock { cancellable.removeValue(forKey: id) }
    }
    private var cancellable: [UInt64: CheckedContinuation<Value?, Never>] = [:]
}
