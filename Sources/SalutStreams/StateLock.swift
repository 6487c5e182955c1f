import Synchronization

/// A lock for state kept beside it, in the stored properties of the object that holds it.
///
/// A `Synchronization.Mutex` with nothing inside: unlike `NSLock` (an object, plus a pthread
/// mutex allocated on its own), it lives inside its owner and costs no allocation. A socket
/// connection holds several (its state, each stream's status and delegate calls), so making
/// one used to cost a dozen allocations for locks alone.
package struct StateLock: ~Copyable, Sendable {
    private let mutex = Mutex<Void>(())

    package init() {}

    /// Runs `body` with the lock held, returning its result.
    package borrowing func withLock<T>(_ body: () throws -> T) rethrows -> T {
        try mutex.withLock { _ in try body() }
    }
}
