import Foundation

/// A value behind a lock, for state shared between Avahi's queue and callers' threads.
final class Locked<Value>: @unchecked Sendable {
    // @unchecked: `stored` is only touched while `lock` is held; callers put only values in it
    // that are safe to hand between threads under that lock.
    private let lock = NSLock()
    private var stored: Value

    init(_ value: Value) { stored = value }

    var value: Value {
        lock.lock(); defer { lock.unlock() }
        return stored
    }

    /// Stores `value` and returns what was there before.
    @discardableResult
    func exchange(_ value: Value) -> Value {
        lock.lock(); defer { lock.unlock() }
        let old = stored
        stored = value
        return old
    }

    /// Runs `body` with the value locked, returning its result.
    func withLock<T>(_ body: (inout Value) throws -> T) rethrows -> T {
        lock.lock(); defer { lock.unlock() }
        return try body(&stored)
    }
}
