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
    // @unchecked: `value`, `waiters` and `cancellable` are guarded by `lock`.
    private let lock = NSLock()
    private var value: Value?
    private var waiters: [UInt64: CheckedContinuation<Value, Never>] = [:]
    private var nextWaiter: UInt64 = 0

    /// Sets the value (the first call wins) and wakes every waiter.
    func open(_ newValue: Value) {
        lock.lock()
        guard value == nil else { lock.unlock(); return }
        value = newValue
        let resumed = waiters.values
        let resumedOptional = cancellable.values
        waiters = [:]
        cancellable = [:]
        lock.unlock()
        for waiter in resumed { waiter.resume(returning: newValue) }
        for waiter in resumedOptional { waiter.resume(returning: newValue) }
    }

    var current: Value? { lock.lock(); defer { lock.unlock() }; return value }

    func wait() async -> Value {
        let id = lock.withLock { () -> UInt64 in
            nextWaiter += 1; return nextWaiter
        }
        return await withCheckedContinuation { continuation in
            lock.lock()
            if let value {
                lock.unlock()
                continuation.resume(returning: value)
            } else {
                waiters[id] = continuation
                lock.unlock()
            }
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
        lock.lock()
        if let value {
            lock.unlock()
            continuation.resume(returning: value)
        } else if Task.isCancelled {
            lock.unlock()
            continuation.resume(returning: nil)
        } else {
            cancellable[id] = continuation
            lock.unlock()
        }
    }

    private func unpark(_ id: UInt64) -> CheckedContinuation<Value?, Never>? {
        lock.withLock { cancellable.removeValue(forKey: id) }
    }
    private var cancellable: [UInt64: CheckedContinuation<Value?, Never>] = [:]
}
