import Dispatch
import Foundation
import CLinux
import Glibc

/// Which kinds of readiness a ``ReadinessWatch`` waits for.
package struct Readiness: OptionSet, Sendable, Hashable {
    package let rawValue: UInt8
    package init(rawValue: UInt8) { self.rawValue = rawValue }
    /// Data (or end of file, or an error) waits to be read.
    package static let readable = Readiness(rawValue: 1)
    /// There is room to write (or an error to find by writing).
    package static let writable = Readiness(rawValue: 2)
}

/// Socket readiness for the whole process: one epoll instance and one thread that waits on it,
/// handing each event to the queue of the ``ReadinessWatch`` it belongs to.
///
/// Salut used libdispatch read and write sources for this. On Linux their epoll bookkeeping
/// (one "muxnote" per descriptor, shared by its sources) can be corrupted when sources are set
/// up and torn down quickly on many threads: the process dies in libdispatch ("source finalized
/// twice", or a use after free), a crash this project hit under load and that is open upstream
/// (swift-corelibs-libdispatch #949). This loop keeps its own books, which are simple enough to
/// check: each watch has a number that is never reused, the thread finds watches by number under
/// a lock, and a cancelled watch is out of both epoll and that table before `cancel` returns.
///
/// Every registration is `EPOLLONESHOT` and level-triggered: an event disarms the descriptor,
/// and the watch arms it again, for what its owner wants then, after the owner has handled the
/// event (a ``ReadinessWatch/want(_:)`` meanwhile only records the wish). So the loop never
/// reports a descriptor whose last event is still waiting on its queue, and a descriptor nobody
/// wants to hear from (a hung-up socket whose reader is paused, say: epoll always reports errors
/// and hang-ups) reports at most once instead of spinning.
final class ReadinessLoop: Sendable {
    /// The process's loop, started on first use; its thread and descriptor last as long as the
    /// process, like libdispatch's own manager thread.
    static let shared = ReadinessLoop()

    private let epoll: Int32
    private let watches = Locked<[UInt64: ReadinessWatch]>([:])
    private let numbers = Locked<UInt64>(0)

    private init() {
        epoll = epoll_create1(Int32(EPOLL_CLOEXEC))
        precondition(epoll >= 0, "epoll_create1 failed: \(String(cString: strerror(errno)))")
        let thread = Thread { [self] in run() }
        thread.name = "salut.readiness"
        thread.start()
    }

    /// Adds `watch` to the loop, disarmed.
    /// - Throws: ``SocketStreamError/system(call:errno:message:)`` when epoll refuses the
    ///   descriptor (too many watched, or not a kind epoll can watch).
    fileprivate func register(_ watch: ReadinessWatch) throws(SocketStreamError) -> UInt64 {
        let number = numbers.withLock { value -> UInt64 in
            value += 1
            return value
        }
        watches.withLock { $0[number] = watch }
        if let failure = control(EPOLL_CTL_ADD, watch.fd, number: number, interest: []) {
            watches.withLock { _ = $0.removeValue(forKey: number) }
            throw failure
        }
        return number
    }

    /// Arms (or, with an empty `interest`, disarms) a registered descriptor; the error when
    /// epoll refuses.
    fileprivate func arm(_ fd: Int32, number: UInt64, interest: Readiness) -> SocketStreamError? {
        control(EPOLL_CTL_MOD, fd, number: number, interest: interest)
    }

    /// Takes a descriptor out of epoll and the watch out of the table: from the return, no event
    /// of it is handed to its queue any more (one already handed over finds it cancelled).
    fileprivate func remove(_ fd: Int32, number: UInt64) {
        var unused = epoll_event()
        if epoll_ctl(epoll, EPOLL_CTL_DEL, fd, &unused) != 0 {
            // ENOENT/EBADF only if the owner broke its promise to cancel before closing.
            SalutLogging.logger.error("epoll_ctl(DEL) of descriptor \(fd) failed: \(String(cString: strerror(errno)))")
        }
        watches.withLock { _ = $0.removeValue(forKey: number) }
    }

    /// `epoll_ctl` with a one-shot event for `interest`; the error when it fails.
    private func control(_ operation: Int32, _ fd: Int32, number: UInt64, interest: Readiness) -> SocketStreamError? {
        var event = epoll_event()
        var flags = EPOLLONESHOT.rawValue
        if interest.contains(.readable) { flags |= EPOLLIN.rawValue | EPOLLRDHUP.rawValue }
        if interest.contains(.writable) { flags |= EPOLLOUT.rawValue }
        event.events = flags
        event.data.u64 = number
        guard epoll_ctl(epoll, operation, fd, &event) == 0 else {
            let code = errno
            return .system(
                call: operation == EPOLL_CTL_ADD ? "epoll_ctl(ADD)" : "epoll_ctl(MOD)",
                errno: code, message: String(cString: strerror(code)))
        }
        return nil
    }

    /// The loop's thread: waits, and hands each event to its watch.
    private func run() {
        let capacity = 64
        let events = UnsafeMutablePointer<epoll_event>.allocate(capacity: capacity)
        events.initialize(repeating: epoll_event(), count: capacity)
        while true {
            let count = epoll_wait(epoll, events, Int32(capacity), -1)
            if count < 0 {
                if errno == EINTR { continue }
                fatalError("epoll_wait failed: \(String(cString: strerror(errno)))")
            }
            for index in 0..<Int(count) {
                let event = events[index]
                let number = event.data.u64
                guard let watch = watches.withLock({ $0[number] }) else { continue }
                watch.fired(event.events)
            }
        }
    }
}

/// One descriptor watched by the ``ReadinessLoop``: its owner says what it wants to hear of
/// (``want(_:)``), and `handler` is called on `queue` with what became ready, or with the error
/// that stopped the watch (epoll refused to arm it again: the owner must give the socket up).
///
/// Call ``cancel()`` before closing the descriptor; from its return the loop is done with it and
/// no new call of `handler` starts. A call already running on `queue` may still be using the
/// descriptor: so cancel on `queue` and close at once (as the pump does), or close on `queue`
/// after cancelling (as the listener does). A watch never cancelled stays in the loop.
///
/// `package`: SalutDiscovery's Avahi poll adapter watches the daemon's D-Bus socket with it.
package final class ReadinessWatch: @unchecked Sendable {
    // @unchecked: `wanted`, `armed`, `delivering`, `number`, `handler` and `cancelled` are
    // touched only while `lock` is held; `fd` and `queue` never change.
    /// The descriptor watched.
    package let fd: Int32
    /// Where `handler` runs.
    package let queue: DispatchQueue
    private let lock = StateLock()
    private var handler: ((Result<Readiness, SocketStreamError>) -> Void)?
    private var number: UInt64 = 0
    /// What the owner wants to hear of.
    private var wanted: Readiness = []
    /// What epoll will report (empty: disarmed, after an event or by request).
    private var armed: Readiness = []
    /// An event is on its way to `queue`: the descriptor is disarmed, and `deliver` arms it.
    private var delivering = false
    private var cancelled = false

    /// Starts watching `fd` for nothing yet: ``want(_:)`` says what.
    /// - Throws: ``SocketStreamError/system(call:errno:message:)`` when epoll refuses it.
    package init(
        fd: Int32, queue: DispatchQueue, handler: @escaping (Result<Readiness, SocketStreamError>) -> Void
    ) throws(SocketStreamError) {
        self.fd = fd
        self.queue = queue
        self.handler = handler
        let number = try ReadinessLoop.shared.register(self)
        lock.withLock { self.number = number }
    }

    /// Says what to hear of from now on (an empty set pauses the watch).
    /// - Throws: ``SocketStreamError/system(call:errno:message:)`` when epoll refuses the change.
    package func want(_ interest: Readiness) throws(SocketStreamError) {
        let failure = lock.withLock { () -> SocketStreamError? in
            guard !cancelled else { return nil }
            wanted = interest
            return armForWanted()
        }
        if let failure { throw failure }
    }

    /// Under `lock`: has epoll report what is wanted, unless it already does, the watch is
    /// cancelled, or an event is on its way to `queue` (whose delivery arms afterwards). The
    /// error when epoll refuses.
    private func armForWanted() -> SocketStreamError? {
        guard !cancelled, !delivering, armed != wanted else { return nil }
        if let failure = ReadinessLoop.shared.arm(fd, number: number, interest: wanted) { return failure }
        armed = wanted
        return nil
    }

    /// Stops the watch for good; the descriptor may be closed once this returns.
    package func cancel() {
        let number = lock.withLock { () -> UInt64? in
            guard !cancelled else { return nil }
            cancelled = true
            handler = nil
            return self.number
        }
        if let number { ReadinessLoop.shared.remove(fd, number: number) }
    }

    /// On the loop's thread: epoll reported `events` and disarmed the descriptor.
    fileprivate func fired(_ events: UInt32) {
        lock.withLock { delivering = true }
        queue.async { self.deliver(events) }
    }

    /// On `queue`: tells the owner what it wanted and got, then arms again for what it wants
    /// after that.
    private func deliver(_ events: UInt32) {
        let (handler, ready) = lock.withLock { () -> (((Result<Readiness, SocketStreamError>) -> Void)?, Readiness) in
            guard !cancelled else { return (nil, []) }
            delivering = false
            armed = []
            var ready: Readiness = []
            let broken = events & (EPOLLERR.rawValue | EPOLLHUP.rawValue) != 0
            if wanted.contains(.readable), broken || events & (EPOLLIN.rawValue | EPOLLRDHUP.rawValue) != 0 {
                ready.insert(.readable)
            }
            if wanted.contains(.writable), broken || events & EPOLLOUT.rawValue != 0 {
                ready.insert(.writable)
            }
            return (self.handler, ready)
        }
        guard let handler else { return }
        if !ready.isEmpty { handler(.success(ready)) }
        if let failure = lock.withLock({ armForWanted() }) {
            // Kernel memory, or an owner that closed the descriptor before cancelling; unarmed,
            // the socket would never be heard of again, so the owner must give it up.
            handler(.failure(failure))
        }
    }
}
