/// A value behind a lock, for state shared between a queue and callers' threads. Sendable only
/// where the value is (as swift-nio's `NIOLockedValueBox`): a lock keeps the box's own state
/// consistent, but cannot make a value that is not Sendable safe to hand out to other threads.
public final class Locked<Value> {
    private let lock = StateLock()
    private var stored: Value

    /// A box holding `value`.
    public init(_ value: Value) { stored = value }

    /// The value now (a copy, read under the lock).
    public var value: Value {
        lock.withLock { stored }
    }

    /// Stores `value` and returns what was there before.
    @discardableResult
    public func exchange(_ value: Value) -> Value {
        lock.withLock {
            let old = stored
            stored = value
            return old
        }
    }

    /// Runs `body` with the value locked, returning its result.
    public func withLock<T>(_ body: (inout Value) throws -> T) rethrows -> T {
        try lock.withLock { try body(&stored) }
    }
}

// @unchecked: `stored` is only touched while `lock` is held, and the value itself is Sendable.
extension Locked: @unchecked Sendable where Value: Sendable {}
