import Foundation

/// The fixed-capacity ring buffer that joins a bound stream pair, with everything both ends
/// need to wait and to be told: a condition for blocking reads and writes, continuations for
/// async ones, and a callback to each end when its state may have changed.
///
/// One reader and one writer may use it from different threads at once.
final class BoundBuffer: @unchecked Sendable {
    // @unchecked: every mutable property is guarded by `condition` (an NSCondition, which is
    // also the lock); callbacks are invoked with the lock released.

    let capacity: Int
    private let condition = NSCondition()
    private var storage: UnsafeMutableRawBufferPointer
    private var head = 0          // index of the first unread byte
    private var count = 0         // unread bytes
    private(set) var writerClosed = false
    private(set) var readerClosed = false
    private var readWaiters: [CheckedContinuation<Void, Never>] = []
    private var writeWaiters: [CheckedContinuation<Void, Never>] = []

    /// Called (lock released) after anything that may make reading possible or end the data.
    var readerChanged: (@Sendable () -> Void)?
    /// Called (lock released) after anything that may make writing possible or fail it.
    var writerChanged: (@Sendable () -> Void)?

    init(capacity: Int) {
        precondition(capacity > 0)
        self.capacity = capacity
        storage = .allocate(byteCount: capacity, alignment: 16)
    }

    deinit { storage.deallocate() }

    struct Snapshot {
        var available: Int
        var space: Int
        var writerClosed: Bool
        var readerClosed: Bool
    }

    var snapshot: Snapshot {
        condition.lock(); defer { condition.unlock() }
        return Snapshot(available: count, space: capacity - count, writerClosed: writerClosed, readerClosed: readerClosed)
    }

    // MARK: Reading

    /// Copies up to `maxLength` bytes out. With `blocking`, waits until there is something to
    /// read or the writer has closed. Returns 0 at the end of the data, nil when it would block.
    func read(into buffer: UnsafeMutablePointer<UInt8>, maxLength: Int, blocking: Bool) -> Int? {
        condition.lock()
        while count == 0 && !writerClosed && !readerClosed {
            guard blocking else { condition.unlock(); return nil }
            condition.wait()
        }
        let n = min(count, maxLength)
        var copied = 0
        while copied < n {
            let run = min(n - copied, capacity - head)
            UnsafeMutableRawPointer(buffer + copied).copyMemory(from: storage.baseAddress! + head, byteCount: run)
            head = (head + run) % capacity
            copied += run
        }
        count -= n
        if count == 0 { head = 0 }
        let waiters = n > 0 ? takeWriteWaiters() : []
        if n > 0 { condition.broadcast() }
        condition.unlock()
        if n > 0 {
            waiters.forEach { $0.resume() }
            writerChanged?()
        }
        return n
    }

    /// Suspends until a read would not block.
    func readable() async {
        await withCheckedContinuation { continuation in
            condition.lock()
            if count > 0 || writerClosed || readerClosed {
                condition.unlock()
                continuation.resume()
            } else {
                readWaiters.append(continuation)
                condition.unlock()
            }
        }
    }

    // MARK: Writing

    enum WriteResult { case wrote(Int), wouldBlock, readerGone }

    /// Copies up to `length` bytes in (as many as fit). With `blocking`, waits until there is
    /// room or the reader has closed.
    func write(from buffer: UnsafePointer<UInt8>, length: Int, blocking: Bool) -> WriteResult {
        condition.lock()
        while count == capacity && !readerClosed && !writerClosed {
            guard blocking else { condition.unlock(); return .wouldBlock }
            condition.wait()
        }
        guard !readerClosed, !writerClosed else { condition.unlock(); return .readerGone }
        let n = min(capacity - count, length)
        var copied = 0
        var tail = (head + count) % capacity
        while copied < n {
            let run = min(n - copied, capacity - tail)
            (storage.baseAddress! + tail).copyMemory(from: UnsafeRawPointer(buffer + copied), byteCount: run)
            tail = (tail + run) % capacity
            copied += run
        }
        count += n
        let waiters = n > 0 ? takeReadWaiters() : []
        if n > 0 { condition.broadcast() }
        condition.unlock()
        if n > 0 {
            waiters.forEach { $0.resume() }
            readerChanged?()
        }
        return .wrote(n)
    }

    /// Suspends until a write would not block.
    func writable() async {
        await withCheckedContinuation { continuation in
            condition.lock()
            if count < capacity || readerClosed || writerClosed {
                condition.unlock()
                continuation.resume()
            } else {
                writeWaiters.append(continuation)
                condition.unlock()
            }
        }
    }

    // MARK: Closing

    func closeWriter() { close { $0.writerClosed = true } }
    func closeReader() { close { $0.readerClosed = true } }

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
        defer { readWaiters = [] }
        return readWaiters
    }

    private func takeWriteWaiters() -> [CheckedContinuation<Void, Never>] {
        defer { writeWaiters = [] }
        return writeWaiters
    }
}
