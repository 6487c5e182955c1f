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
    // @unchecked: `value` and `waiters` are guarded by `lock`.
    private let lock = NSLock()
    private var value: Value?
    private var waiters: [CheckedContinuation<Value, Never>] = []

    /// Sets the value (the first call wins) and wakes every waiter.
    func open(_ newValue: Value) {
        lock.lock()
        guard value == nil else { lock.unlock(); return }
        value = newValue
        let resumed = waiters
        waiters = []
        lock.unlock()
        for waiter in resumed { waiter.resume(returning: newValue) }
    }

    var current: Value? { lock.lock(); defer { lock.unlock() }; return value }

    func wait() async -> Value {
        await withCheckedContinuation { continuation in
            lock.lock()
            if let value {
                lock.unlock()
                continuation.resume(returning: value)
            } else {
                waiters.append(continuation)
                lock.unlock()
            }
        }
    }
}

/// Carries a delegate (or another reference used only on the delegate queue) into closures.
struct Unchecked<Value>: @unchecked Sendable {
    // @unchecked: the value is only used on the session's delegate queue, one call at a time.
    let value: Value
    init(_ value: Value) { self.value = value }
}
