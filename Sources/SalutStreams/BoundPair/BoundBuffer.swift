import Foundation
import Glibc
import Synchronization

/// The fixed-capacity ring buffer that joins a bound stream pair, with everything both ends
/// need to wait and to be told: a condition for blocking reads and writes, continuations for
/// async ones, and a callback to each end when its state may have changed.
///
/// One reader and one writer may use it from different threads at once (not two readers or two
/// writers: each side copies its bytes outside the lock, relying on being the only one).
final class BoundBuffer: @unchecked Sendable {
    // @unchecked: every mutable property is guarded by `condition` (an NSCondition, which is
    // also the lock); callbacks are invoked with the lock released.

    let capacity: Int
    private let condition = NSCondition()
    /// With `allocatesLazily`, allocated by the writer on its first byte (under the lock): a
    /// connection whose bytes all go straight to the socket, or that stays idle, never pays
    /// for it.
    private var storage: UnsafeMutableRawBufferPointer?
    private var head = 0          // index of the first unread byte
    private var count = 0 { didSet { published.store(count, ordering: .releasing) } }   // unread bytes
    /// `count`, readable without the lock: a blocked side spins on it briefly before sleeping,
    /// which spares a context switch when the other side is running on another core.
    private let published = Atomic<Int>(0)
    private var isWriterClosed = false { didSet { closedFlag.store(true, ordering: .relaxed) } }
    private var isReaderClosed = false { didSet { closedFlag.store(true, ordering: .relaxed) } }
    private let closedFlag = Atomic<Bool>(false)
    private var blockedReaders = 0   // threads waiting in `read(blocking: true)`
    private var blockedWriters = 0   // threads waiting in `write(blocking: true)`
    private var readWaiters: [UInt64: CheckedContinuation<Void, Never>] = [:]
    private var writeWaiters: [UInt64: CheckedContinuation<Void, Never>] = [:]
    private var nextWaiter: UInt64 = 0

    /// Called (lock released) after anything that may make reading possible or end the data.
    var readerChanged: (@Sendable () -> Void)?
    /// Called (lock released) after anything that may make writing possible or fail it.
    var writerChanged: (@Sendable () -> Void)?

    /// - Parameter allocatesLazily: leave the storage unallocated until the first byte is
    ///   written (a socket connection's buffers: most of its bytes go straight to the socket).
    ///   A bound pair allocates at once, on the thread that makes it.
    init(capacity: Int, allocatesLazily: Bool = false) {
        precondition(capacity > 0)
        self.capacity = capacity
        if !allocatesLazily { storage = .allocate(byteCount: capacity, alignment: 16) }
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
        condition.lock(); defer { condition.unlock() }
        return isWriterClosed
    }

    /// Whether the reader has closed (read under the lock).
    var readerClosed: Bool {
        condition.lock(); defer { condition.unlock() }
        return isReaderClosed
    }

    var snapshot: Snapshot {
        condition.lock(); defer { condition.unlock() }
        return Snapshot(available: count, space: capacity - count, writerClosed: isWriterClosed, readerClosed: isReaderClosed)
    }

    // MARK: Reading

    /// Copies up to `maxLength` bytes out. With `blocking`, waits until there is something to
    /// read or the writer has closed. Returns 0 at the end of the data, nil when it would block.
    func read(into buffer: UnsafeMutablePointer<UInt8>, maxLength: Int, blocking: Bool) -> Int? {
        if blocking { spin { $0 > 0 } }
        condition.lock()
        while count == 0 && !isWriterClosed && !isReaderClosed {
            guard blocking else { condition.unlock(); return nil }
            blockedReaders += 1
            condition.wait()
            blockedReaders -= 1
        }
        let n = min(count, maxLength)
        let start = head
        let storage = self.storage   // not nil once there is a byte to read
        condition.unlock()
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
        condition.lock()
        head = (start + n) % capacity
        count -= n
        let waiters = takeWriteWaiters()
        if blockedWriters > 0 { condition.broadcast() }
        condition.unlock()
        waiters.forEach { $0.resume() }
        writerChanged?()
        return n
    }

    /// Suspends until a read would not block, or the calling task is cancelled (check
    /// `Task.isCancelled` afterwards: nothing has been read either way).
    func readable(within limit: OperationLimit? = nil) async {
        await wait(reading: true, limit: limit)
    }

    /// Suspends the caller until a read (or write) would not block; a cancelled task, or an
    /// operation whose limit ends (deadline or cancel), is resumed at once. Nothing polls: the
    /// limit's one timer or the other side's progress wakes the waiter.
    private func wait(reading: Bool, limit: OperationLimit?) async {
        let id = newWaiterID()
        await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                guard park(continuation, id: id, reading: reading) else { return continuation.resume() }
                let wake: @Sendable () -> Void = { [weak self] in self?.unpark(id: id, reading: reading)?.resume() }
                if let limit, !limit.register(wake) { wake() }
            }
        } onCancel: {
            unpark(id: id, reading: reading)?.resume()
        }
        limit?.unregister()
    }

    private func newWaiterID() -> UInt64 {
        condition.lock(); defer { condition.unlock() }
        nextWaiter += 1
        return nextWaiter
    }

    /// Parks the continuation unless the wait is already over (ready, or cancelled).
    private func park(_ continuation: CheckedContinuation<Void, Never>, id: UInt64, reading: Bool) -> Bool {
        condition.lock(); defer { condition.unlock() }
        let ready = reading ? (count > 0 || isWriterClosed || isReaderClosed) : (count < capacity || isReaderClosed || isWriterClosed)
        guard !ready, !Task.isCancelled else { return false }
        if reading { readWaiters[id] = continuation } else { writeWaiters[id] = continuation }
        return true
    }

    private func unpark(id: UInt64, reading: Bool) -> CheckedContinuation<Void, Never>? {
        condition.lock(); defer { condition.unlock() }
        return reading ? readWaiters.removeValue(forKey: id) : writeWaiters.removeValue(forKey: id)
    }

    // MARK: Writing

    enum WriteResult { case wrote(Int), wouldBlock, readerGone }

    /// Copies up to `length` bytes in (as many as fit). With `blocking`, waits until there is
    /// room or the reader has closed.
    func write(from buffer: UnsafePointer<UInt8>, length: Int, blocking: Bool) -> WriteResult {
        if blocking { spin { $0 < self.capacity } }
        condition.lock()
        while count == capacity && !isReaderClosed && !isWriterClosed {
            guard blocking else { condition.unlock(); return .wouldBlock }
            blockedWriters += 1
            condition.wait()
            blockedWriters -= 1
        }
        guard !isReaderClosed, !isWriterClosed else { condition.unlock(); return .readerGone }
        let n = min(capacity - count, length)
        let tail = (head + count) % capacity
        if n > 0, self.storage == nil { self.storage = .allocate(byteCount: capacity, alignment: 16) }
        let storage = self.storage
        condition.unlock()
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
        condition.lock()
        count += n
        let waiters = takeReadWaiters()
        if blockedReaders > 0 { condition.broadcast() }
        condition.unlock()
        waiters.forEach { $0.resume() }
        readerChanged?()
        return .wrote(n)
    }

    /// Suspends until a write would not block, or the calling task is cancelled.
    func writable(within limit: OperationLimit? = nil) async {
        await wait(reading: false, limit: limit)
    }

    /// Waits briefly, without sleeping on the condition, until `ready(count)` holds (or gives
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
        condition.lock()
        mark(self)
        let waiters = takeReadWaiters() + takeWriteWaiters()
        condition.broadcast()
        condition.unlock()
        waiters.forEach { $0.resume() }
        readerChanged?()
        writerChanged?()
    }

    private func takeReadWaiters() -> [CheckedContinuation<Void, Never>] {
        defer { readWaiters = [:] }
        return Array(readWaiters.values)
    }

    private func takeWriteWaiters() -> [CheckedContinuation<Void, Never>] {
        defer { writeWaiters = [:] }
        return Array(writeWaiters.values)
    }
}
