
/// A value behind a lock, for state shared between a queue and callers' threads.
package final class Locked<Value>: @unchecked Sendable {
    // @unchecked: `stored` is only touched while `lock` is held; callers put only values in it
    // that are safe to hand between threads under that lock.
    private let lock = StateLock()
    private var stored: Value

    package init(_ value: Value) { stored = value }

    package var value: Value {
        lock.withLock { stored }
    }

    /// Stores `value` and returns what was there before.
    @discardableResult
    package func exchange(_ value: Value) -> Value {
        lock.withLock {
            let old = stored
            stored = value
            return old
        }
    }

    /// Runs `body` with the value locked, returning its result.
    package func withLock<T>(_ body: (inout Value) throws -> T) rethrows -> T {
        try lock.withLock { try body(&stored) }
    }
}
