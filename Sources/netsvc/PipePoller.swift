import Foundation
import SalutStreams
import Glibc

/// Waits for child pipes (and pidfds) to become ready, with `poll(2)` on one thread of its own
/// for all of them. netsvc does not use libdispatch's descriptor sources for these: on Linux a
/// source whose pipe hung up (the child died) while it was being cancelled crashed
/// libdispatch's event loop (`_dispatch_event_loop_drain`), found by the SIGKILLed-clients
/// hostile test. A poll set has no such state: a descriptor closed meanwhile reports `POLLNVAL`,
/// which wakes its waiter like any readiness (the caller then finds its end closed).
final class PipePoller: @unchecked Sendable {
    // @unchecked: `waiters` is guarded by `lock`; the wake-up pipe is written from any thread.

    static let shared = PipePoller()

    private struct Waiter {
        let events: Int16
        let wake: @Sendable (Bool) -> Void
    }

    private let lock = StateLock()
    private var waiters: [Int32: Waiter] = [:]
    private let wakeUp: (read: Int32, write: Int32)?

    private init() {
        var ends: [Int32] = [-1, -1]
        if pipe(&ends) == 0,
            ends.allSatisfy({ fcntl($0, F_SETFD, FD_CLOEXEC) == 0 && fcntl($0, F_SETFL, O_NONBLOCK) == 0 })
        {
            wakeUp = (ends[0], ends[1])
        } else {
            note(
                "cannot make the poller's wake-up pipe: \(String(cString: strerror(errno))); child pipes are polled every 50 ms"
            )
            wakeUp = nil
        }
        Thread.detachNewThread { self.run() }
    }

    /// Calls `wake(true)` once `fd` is ready (readable, or writable when `writing`), or hung up.
    /// One waiter per descriptor.
    func wait(for fd: Int32, writing: Bool, wake: @escaping @Sendable (Bool) -> Void) {
        lock.withLock { waiters[fd] = Waiter(events: Int16(writing ? POLLOUT : POLLIN), wake: wake) }
        poke()
    }

    /// Stops waiting for `fd` (before it is closed): its waiter, if any, gets `wake(false)`.
    func forget(_ fd: Int32) {
        let waiter = lock.withLock { waiters.removeValue(forKey: fd) }
        waiter?.wake(false)
        poke()
    }

    private func poke() {
        guard let wakeUp else { return }
        var byte: UInt8 = 1
        _ = write(wakeUp.write, &byte, 1)  // EAGAIN: a wake-up is pending already
    }

    private func run() {
        var drain = [UInt8](repeating: 0, count: 64)
        while true {
            let watched = lock.withLock { waiters.map { pollfd(fd: $0.key, events: $0.value.events, revents: 0) } }
            var set = watched
            if let wakeUp { set.append(pollfd(fd: wakeUp.read, events: Int16(POLLIN), revents: 0)) }
            let ready = poll(&set, nfds_t(set.count), wakeUp == nil ? 50 : -1)
            if ready < 0 && errno != EINTR {
                note("poll failed: \(String(cString: strerror(errno)))")
                usleep(50_000)
                continue
            }
            if let wakeUp, set.last?.revents ?? 0 != 0 {
                while read(wakeUp.read, &drain, drain.count) > 0 {}
            }
            for entry in set.prefix(watched.count) where entry.revents != 0 {
                let waiter = lock.withLock { waiters.removeValue(forKey: entry.fd) }
                waiter?.wake(true)
            }
        }
    }
}
