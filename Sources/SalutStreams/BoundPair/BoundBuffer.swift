import Foundation
import Glibc
import Synchronization

/// The fixed-capacity ring buffer that joins a bound stream pair, with everything both ends
/// need to wait and to be told: a semaphore for a blocked reader or writer, continuations for
/// async ones, and a callback to each end when its state may have changed.
///
/// One reader and one writer may use it from different threads at once (not two readers or two
/// writers: each side copies its bytes outside the lock, relying on being the only one).
final class BoundBuffer: @unchecked Sendable {
    // @unchecked: every mutable property is guarded by `lock`; callbacks are invoked, and
    // blocked threads sleep, with the lock released.

    let capacity: Int
    private let lock = StateLock()
    /// Where a blocked reader (writer) sleeps: made the first time one must (most buffers of a
    /// socket connection never block a thread), then kept. A thread that wakes looks at the
    /// buffer again, so a signal left over from an earlier wake-up costs one more look.
    private var readerWake: DispatchSemaphore?
    private var writerWake: DispatchSemaphore?
    /// With `allocatesLazily`, allocated by the writer on its first byte (under the lock): a
    /// connection whose bytes all go straight to the socket, or that stays idle, never pays
    /// for it.
    private var storage: UnsafeMutableRawBufferPointer?
    private var head = 0  // index of the first unread byte
    private var count = 0 { didSet { published.store(count, ordering: .releasing) } }  // unread bytes
    /// `count`, readable without the lock: a blocked side spins on it briefly before sleeping,
    /// which spares a context switch when the other side is running on another core.
    private let published = Atomic<Int>(0)
    /// Whether a byte was ever written (stays true once it is).
    private var wasWrittenTo = false
    private var isWriterClosed = false { didSet { closedFlag.store(true, ordering: .relaxed) } }
    private var isReaderClosed = false { didSet { closedFlag.store(true, ordering: .relaxed) } }
    private let closedFlag = Atomic<Bool>(false)
    private var blockedReaders = 0  // threads waiting in `read(blocking: true)`
    private var blockedWriters = 0  // threads waiting in `write(blocking: true)`
    /// Async readers, each woken once at least its `minimum` bytes are buffered (or at an end).
    private var readWaiters: [UInt64: (continuation: CheckedContinuation<Void, Never>, minimum: Int)] = [:]
    /// Async writers, each woken once at least its `minimum` bytes are free (or at an end).
    private var writeWaiters: [UInt64: (continuation: CheckedContinuation<Void, Never>, minimum: Int)] = [:]
    private var nextWaiter: UInt64 = 0

    /// Called (lock released) after anything that may make reading possible or end the data.
    var readerChanged: (@Sendable () -> Void)?
    /// Called (lock released) after anything that may make writing possible or fail it.
    var writerChanged: (@Sendable () -> Void)?

    /// Room after the end of the storage where ``drain(atMost:_:)`` copies the first bytes of
    /// a run that wraps around, so that a run this long is always handed over in one piece.
    private let contiguousRun: Int

    /// - Parameters:
    ///   - allocatesLazily: leave the storage unallocated until the first byte is written (a
    ///     socket connection's buffers: most of its bytes go straight to the socket). A bound
    ///     pair allocates at once, on the thread that makes it.
    ///   - contiguousRun: ``drain(atMost:_:)`` hands over at least this many unread bytes
    ///     (or all there are, when fewer) in one piece, even where they wrap around the end of
    ///     the storage (at most `capacity`).
    init(capacity: Int, allocatesLazily: Bool = false, contiguousRun: Int = 0) {
        precondition(capacity > 0)
        self.capacity = capacity
        self.contiguousRun = min(max(0, contiguousRun), capacity)
        if !allocatesLazily { storage = makeStorage() }
    }

    /// Whether the storage is allocated yet (see `allocatesLazily`).
    var hasStorage: Bool { lock.withLock { storage != nil } }

    /// The storage, with room for the copies ``drain(atMost:_:)`` makes past its end.
    private func makeStorage() -> UnsafeMutableRawBufferPointer {
        .allocate(byteCount: capacity + contiguousRun, alignment: 16)
    }

    deinit { storage?.deallocate() }

    struct Snapshot {
        var available: Int
        var space: Int
        var writerClosed: Bool
        var readerClosed: Bool
    }

    /// Whether the writer has closed (read under the lock).
    var writerClosed: Bool {
        lock.withLock { isWriterClosed }
    }

    /// Whether the reader has closed (read under the lock).
    var readerClosed: Bool {
        lock.withLock { isReaderClosed }
    }

    /// Whether the writer ever wrote a byte, read or not (read under the lock).
    var hasBeenWrittenTo: Bool {
        lock.withLock { wasWrittenTo }
    }

    var snapshot: Snapshot {
        lock.withLock {
            Snapshot(
                available: count, space: capacity - count, writerClosed: isWriterClosed, readerClosed: isReaderClosed)
        }
    }

    /// What a reader or writer does next, decided under the lock.
    private enum Step {
        /// Copy this many bytes at this index of the storage.
        case copy(count: Int, at: Int, storage: UnsafeMutableRawBufferPointer?)
        /// Nothing can move now and the caller does not block.
        case wouldBlock
        /// The other end has closed (writers only).
        case closed
        /// Sleep on this semaphore, then look again.
        case sleep(DispatchSemaphore)
    }

    // MARK: Reading

    /// Copies up to `maxLength` bytes out. With `blocking`, waits until there is something to
    /// read or the writer has closed. Returns 0 at the end of the data, nil when it would block.
    func read(into buffer: UnsafeMutablePointer<UInt8>, maxLength: Int, blocking: Bool) -> Int? {
        if blocking { spin { $0 > 0 } }
        var step: Step
        while true {
            step = lock.withLock { () -> Step in
                if count > 0 || isWriterClosed || isReaderClosed {
                    // not nil once there is a byte
                    return .copy(count: min(count, maxLength), at: head, storage: self.storage)
                }
                guard blocking else { return .wouldBlock }
                blockedReaders += 1
                if readerWake == nil { readerWake = DispatchSemaphore(value: 0) }
                return .sleep(readerWake!)
            }
            guard case .sleep(let wake) = step else { break }
            wake.wait()
            lock.withLock { blockedReaders -= 1 }
        }
        guard case .copy(let n, let start, let storage) = step else { return nil }
        // One reader and one writer: the bytes [head, head + count) belong to the reader until
        // it gives them back below, so they are copied without holding the lock.
        var copied = 0
        while copied < n {
            let from = (start + copied) % capacity
            let run = min(n - copied, capacity - from)
            UnsafeMutableRawPointer(buffer + copied).copyMemory(from: storage!.baseAddress! + from, byteCount: run)
            copied += run
        }
        guard n > 0 else { return 0 }
        publishRead(n)
        return n
    }

    /// Lets the reader use the unread bytes in place: `body` gets those that lie contiguous
    /// from the first (at most `maxLength`) and returns how many it took, which are then given
    /// back as free space. Saves the copy into a scratch buffer for a reader that only hands
    /// the bytes on (the socket pump encrypting and sending them). The run handed over ends at
    /// the end of the storage, except that up to `contiguousRun` bytes past it are copied
    /// there from the start: a run is never shorter than that (or than all the unread bytes),
    /// and while nothing is taken, it never gets shorter from one call to the next (which a
    /// TLS write that must be retried with at least the bytes of its pending record needs).
    /// Never blocks: with nothing unread, `body` is not called.
    /// - Returns: the bytes taken (0 when there were none, or `body` took none).
    func drain(atMost maxLength: Int, _ body: (UnsafeRawBufferPointer) -> Int) -> Int {
        let taken = lock.withLock { () -> (storage: UnsafeMutableRawBufferPointer, start: Int, length: Int)? in
            guard count > 0, let storage else { return nil }
            return (storage, head, min(count, maxLength, capacity - head + contiguousRun))
        }
        guard let (storage, start, length) = taken else { return 0 }
        // As in `read`: the unread bytes belong to the only reader until it gives them back,
        // and the room past the end is the reader's alone.
        let wrapped = start + length - capacity
        if wrapped > 0 {
            (storage.baseAddress! + capacity).copyMemory(from: storage.baseAddress!, byteCount: wrapped)
        }
        let region = UnsafeRawBufferPointer(rebasing: storage[start..<start + length])
        let n = min(body(region), region.count)
        guard n > 0 else { return 0 }
        publishRead(n)
        return n
    }

    /// Gives the first `n` unread bytes back as free space, and wakes whoever waits for room.
    private func publishRead(_ n: Int) {
        let (waiters, writer) = lock.withLock { () -> ([CheckedContinuation<Void, Never>], DispatchSemaphore?) in
            head = (head + n) % capacity
            count -= n
            return (takeWriteWaiters(satisfiedBy: capacity - count), blockedWriters > 0 ? writerWake : nil)
        }
        writer?.signal()
        waiters.forEach { $0.resume() }
        writerChanged?()
    }

    /// Suspends until a read would not block, or the calling task is cancelled (check
    /// `Task.isCancelled` afterwards: nothing has been read either way). With `minimum` above
    /// 1, waits for that many bytes (at most the capacity) unless the data ends or fails first:
    /// a bulk reader is then woken once per `minimum` bytes instead of once per write.
    func readable(atLeast minimum: Int = 1, within limit: OperationLimit? = nil) async {
        await wait(reading: true, minimum: min(max(1, minimum), capacity), limit: limit)
    }

    /// Suspends the caller until a read (or write) would not block; a cancelled task, or an
    /// operation whose limit ends (deadline or cancel), is resumed at once. Nothing polls: the
    /// limit's one timer or the other side's progress wakes the waiter.
    private func wait(reading: Bool, minimum: Int = 1, limit: OperationLimit?) async {
        let id = newWaiterID()
        await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                guard park(continuation, id: id, reading: reading, minimum: minimum) else {
                    return continuation.resume()
                }
                let wake: @Sendable () -> Void = { [weak self] in self?.unpark(id: id, reading: reading)?.resume() }
                if let limit, !limit.register(wake) { wake() }
            }
        } onCancel: {
            unpark(id: id, reading: reading)?.resume()
        }
        limit?.unregister()
    }

    private func newWaiterID() -> UInt64 {
        lock.withLock {
            nextWaiter += 1
            return nextWaiter
        }
    }

    /// Parks the continuation unless the wait is already over (ready, or cancelled).
    private func park(_ continuation: CheckedContinuation<Void, Never>, id: UInt64, reading: Bool, minimum: Int) -> Bool
    {
        lock.withLock {
            let ready =
                reading
                ? (count >= minimum || isWriterClosed || isReaderClosed)
                : (capacity - count >= minimum || isReaderClosed || isWriterClosed)
            guard !ready, !Task.isCancelled else { return false }
            if reading { readWaiters[id] = (continuation, minimum) } else { writeWaiters[id] = (continuation, minimum) }
            return true
        }
    }

    private func unpark(id: UInt64, reading: Bool) -> CheckedContinuation<Void, Never>? {
        lock.withLock {
            reading
                ? readWaiters.removeValue(forKey: id)?.continuation : writeWaiters.removeValue(forKey: id)?.continuation
        }
    }

    // MARK: Writing

    enum WriteResult { case wrote(Int), wouldBlock, readerGone }

    /// Copies up to `length` bytes in (as many as fit). With `blocking`, waits until there is
    /// room or the reader has closed.
    func write(from buffer: UnsafePointer<UInt8>, length: Int, blocking: Bool) -> WriteResult {
        if blocking { spin { $0 < self.capacity } }
        var step: Step
        while true {
            step = lock.withLock { () -> Step in
                if isReaderClosed || isWriterClosed { return .closed }
                if count < capacity {
                    let n = min(capacity - count, length)
                    if n > 0, self.storage == nil { self.storage = makeStorage() }
                    return .copy(count: n, at: (head + count) % capacity, storage: self.storage)
                }
                guard blocking else { return .wouldBlock }
                blockedWriters += 1
                if writerWake == nil { writerWake = DispatchSemaphore(value: 0) }
                return .sleep(writerWake!)
            }
            guard case .sleep(let wake) = step else { break }
            wake.wait()
            lock.withLock { blockedWriters -= 1 }
        }
        let n: Int, tail: Int, storage: UnsafeMutableRawBufferPointer?
        switch step {
        case .copy(let count, let at, let buffer): (n, tail, storage) = (count, at, buffer)
        case .closed: return .readerGone
        case .wouldBlock, .sleep: return .wouldBlock
        }
        // The free region after the unread bytes belongs to the writer until it publishes the
        // new count below, so it is filled without holding the lock.
        var copied = 0
        while copied < n {
            let to = (tail + copied) % capacity
            let run = min(n - copied, capacity - to)
            (storage!.baseAddress! + to).copyMemory(from: UnsafeRawPointer(buffer + copied), byteCount: run)
            copied += run
        }
        guard n > 0 else { return .wrote(0) }
        publishWritten(n)
        return .wrote(n)
    }

    /// Lets the writer fill the buffer in place: `body` gets the free region that follows the
    /// unread bytes (contiguous: up to the end of the storage, at most `maxLength` bytes) and
    /// returns how many bytes it put there, which are then published as written. Saves the
    /// copy through a scratch buffer for a writer that produces its bytes into memory (the
    /// socket pump decrypting a TLS record). Never blocks: with no room, or once either end
    /// has closed, `body` is not called.
    /// - Returns: what `write` would return for the bytes `body` produced.
    func fill(atMost maxLength: Int, _ body: (UnsafeMutableRawBufferPointer) -> Int) -> WriteResult {
        let region = lock.withLock { () -> UnsafeMutableRawBufferPointer? in
            guard !isReaderClosed, !isWriterClosed, count < capacity else { return nil }
            if storage == nil { storage = makeStorage() }
            let tail = (head + count) % capacity
            let n = min(capacity - count, capacity - tail, maxLength)
            return UnsafeMutableRawBufferPointer(rebasing: storage![tail..<tail + n])
        }
        guard let region else {
            let state = snapshot
            return state.readerClosed || state.writerClosed ? .readerGone : .wouldBlock
        }
        // As in `write`: the free region belongs to the only writer until the count is published.
        let n = min(body(region), region.count)
        guard n > 0 else { return .wrote(0) }
        publishWritten(n)
        return .wrote(n)
    }

    /// Makes `n` bytes the writer put after the unread ones readable, and wakes whoever waits
    /// for them.
    private func publishWritten(_ n: Int) {
        let (waiters, reader) = lock.withLock { () -> ([CheckedContinuation<Void, Never>], DispatchSemaphore?) in
            count += n
            wasWrittenTo = true
            return (takeReadWaiters(satisfiedBy: count), blockedReaders > 0 ? readerWake : nil)
        }
        reader?.signal()
        waiters.forEach { $0.resume() }
        readerChanged?()
    }

    /// Suspends until a writer with `left` bytes to write may go on, or the calling task is
    /// cancelled: until that many bytes are free or a quarter of the buffer is, whichever is
    /// less, unless the buffer ends first. A bulk writer is then woken once per quarter of the
    /// buffer the other end takes, not once per take (the socket pump takes a TLS record at a
    /// time: a thread switch per 16 KiB).
    func writable(toWrite left: Int = 1, within limit: OperationLimit? = nil) async {
        await wait(reading: false, minimum: max(1, min(left, capacity / 4)), limit: limit)
    }

    /// Waits briefly, without sleeping on a semaphore, until `ready(count)` holds (or gives
    /// up). Each round yields the processor: when the other side shares this core it runs at
    /// once (no futex wake-up needed), and when it runs on another core the yield returns at
    /// once and this side sees its progress within microseconds.
    private func spin(until ready: (Int) -> Bool) {
        for round in 0..<64 {
            if ready(published.load(ordering: .acquiring)) || closedFlag.load(ordering: .relaxed) { return }
            if round >= 8 { sched_yield() }
        }
    }

    // MARK: Closing

    func closeWriter() { close { $0.isWriterClosed = true } }
    func closeReader() { close { $0.isReaderClosed = true } }

    private func close(_ mark: (BoundBuffer) -> Void) {
        let (waiters, blocked) = lock.withLock { () -> ([CheckedContinuation<Void, Never>], [DispatchSemaphore]) in
            mark(self)
            // Every blocked thread wakes (one per side, unless the stream is misused by two
            // threads at once: they must not sleep for ever either).
            var blocked: [DispatchSemaphore] = []
            if let readerWake { blocked += Array(repeating: readerWake, count: blockedReaders) }
            if let writerWake { blocked += Array(repeating: writerWake, count: blockedWriters) }
            return (takeReadWaiters(satisfiedBy: .max) + takeWriteWaiters(satisfiedBy: .max), blocked)
        }
        blocked.forEach { $0.signal() }
        waiters.forEach { $0.resume() }
        readerChanged?()
        writerChanged?()
    }

    /// Async readers waiting now (for tests: a reader that has parked has seen too few bytes).
    var parkedReaders: Int { lock.withLock { readWaiters.count } }

    /// Async writers waiting now (for tests: a writer that has parked has seen too little room).
    var parkedWriters: Int { lock.withLock { writeWaiters.count } }

    /// Threads blocked now in an unscheduled read or write (for tests: a thread counted here
    /// has found no bytes, or no room, and waits for the other end).
    var blockedThreads: (readers: Int, writers: Int) { lock.withLock { (blockedReaders, blockedWriters) } }

    /// The async readers whose minimum `available` bytes meet, removed from the waiters.
    private func takeReadWaiters(satisfiedBy available: Int) -> [CheckedContinuation<Void, Never>] {
        guard !readWaiters.isEmpty else { return [] }
        let ready = readWaiters.compactMap { $0.value.minimum <= available ? $0.key : nil }
        return ready.compactMap { readWaiters.removeValue(forKey: $0)?.continuation }
    }

    /// The async writers whose minimum `space` free bytes meet, removed from the waiters.
    private func takeWriteWaiters(satisfiedBy space: Int) -> [CheckedContinuation<Void, Never>] {
        guard !writeWaiters.isEmpty else { return [] }
        let ready = writeWaiters.compactMap { $0.value.minimum <= space ? $0.key : nil }
        return ready.compactMap { writeWaiters.removeValue(forKey: $0)?.continuation }
    }
}
