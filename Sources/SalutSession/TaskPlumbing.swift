import Foundation
import SalutStreams

/// Runs asynchronous operations one after another, in the order they were enqueued.
final class OperationLane: Sendable {
    private let continuation: AsyncStream<@Sendable () async -> Void>.Continuation

    init() {
        let (stream, continuation) = AsyncStream.makeStream(of: (@Sendable () async -> Void).self)
        self.continuation = continuation
        Task.detached {
            for await operation in stream { await operation() }
        }
    }

    func enqueue(_ operation: @escaping @Sendable () async -> Void) {
        continuation.yield(operation)
    }

    deinit { continuation.finish() }
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
