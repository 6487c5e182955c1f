import Glibc

/// A lock for state kept beside it, in the stored properties of the object that holds it.
///
/// A pthread mutex in one allocation of its own, where an `NSLock` costs an object and a
/// separately allocated mutex (and an `NSCondition` a condition as well): a socket connection
/// holds several (its state, each stream's status and delegate calls), so making one used to
/// cost a dozen allocations for locks alone. Not `Synchronization.Mutex`: its futex lock lives
/// in the runtime, out of ThreadSanitizer's sight, which then reports every access it guards as a
/// race; ThreadSanitizer knows pthread mutexes.
package struct StateLock: ~Copyable, @unchecked Sendable {
    // @unchecked: the mutex is only used through pthread calls, which may come from any thread.
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>

    package init() {
        mutex = .allocate(capacity: 1)
        mutex.initialize(to: pthread_mutex_t())
        let result = pthread_mutex_init(mutex, nil)
        precondition(result == 0, "pthread_mutex_init failed (\(result))")
    }

    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deallocate()
    }

    /// Runs `body` with the lock held, returning its result.
    package borrowing func withLock<T>(_ body: () throws -> T) rethrows -> T {
        let locked = pthread_mutex_lock(mutex)
        precondition(locked == 0, "pthread_mutex_lock failed (\(locked))")
        defer {
            let unlocked = pthread_mutex_unlock(mutex)
            precondition(unlocked == 0, "pthread_mutex_unlock failed (\(unlocked))")
        }
        return try body()
    }
}
