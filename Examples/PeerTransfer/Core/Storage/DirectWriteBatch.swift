import CFileSystems
import Foundation
import SalutStreams

/// Direct writes of several files handed to the disk in one call and waited for together
/// (Linux's own asynchronous I/O: io_submit(2), io_getevents(2)).
///
/// Why: a small file's direct write (see ``DirectWrites``) made alone is one request to the
/// disk, and its thread sleeps until the disk is done; on the virtual machine peerxfer is
/// measured on, each request's doorbell is also a trip to the host. Submitted together, a
/// group's requests are queued at once and the thread waits once. A direct write that makes its
/// file longer is made synchronously even here (the kernel waits for it before the call
/// returns), so each file is given its full size before its pages are added (see
/// ``PartFile/writeWhole(_:pagesIn:to:)``).
///
/// Not thread-safe: each writer keeps its own. The memory of every added write, and its file's
/// descriptor, must stay valid until ``run()`` returns.
final class DirectWriteBatch {
    /// The most writes a batch holds.
    static let capacity = 32
    private var context: aio_context_t = 0
    private var requests: [iocb] = []

    /// Contexts of batches that ended, kept for the next batches: taking one down
    /// (io_destroy(2)) waits for the kernel's RCU grace period, 30–40 ms here, and every batch of
    /// received files would have waited for its writers' contexts. At most ``keptContexts``,
    /// each a few KiB of kernel memory with nothing in flight.
    private static let idle = Locked<[aio_context_t]>([])
    /// The most contexts kept: one for each writer (four) of as many transfers as a receiver
    /// runs at once (eight).
    static let keptContexts = 32
    /// How many contexts are kept now.
    static var keptCount: Int { idle.withLock { $0.count } }

    /// An empty batch, or nil where the kernel offers no asynchronous I/O (built without it, or
    /// the system's limit on it, `fs.aio-max-nr`, is reached): files are then written one at a
    /// time.
    init?() {
        if let kept = Self.idle.withLock({ $0.popLast() }) {
            context = kept
        } else {
            guard peerxfer_io_setup(UInt32(Self.capacity), &context) == 0 else { return nil }
        }
        requests.reserveCapacity(Self.capacity)
    }

    deinit {
        guard context != 0 else { return }
        // Nothing is in flight once `run` has returned: the context is kept for another batch,
        // or taken down when enough are kept.
        let context = self.context
        let kept = Self.idle.withLock { idle in
            guard idle.count < Self.keptContexts else { return false }
            idle.append(context)
            return true
        }
        if !kept { _ = peerxfer_io_destroy(context) }
    }

    /// Whether another write can be added before ``run()``: false when the batch is full, or
    /// can make no more writes (see ``run()``).
    var hasRoom: Bool { context != 0 && requests.count < Self.capacity }

    /// Adds a write of `count` bytes from `bytes` to `fd` at `offset`; returns its position in
    /// ``run()``'s outcomes. Traps when the batch has no room (see ``hasRoom``).
    func add(_ fd: Int32, from bytes: UnsafeRawPointer, count: Int, at offset: UInt64) -> Int {
        precondition(hasRoom, "a direct write batch holds at most \(Self.capacity) writes")
        var request = iocb()
        peerxfer_io_prepare_write(&request, fd, bytes, count, Int64(offset), UInt64(requests.count))
        requests.append(request)
        return requests.count - 1
    }

    /// Hands every added write to the disk and waits until each is done; returns, in the order
    /// they were added, the bytes each wrote or, for one that failed, its error number negated.
    /// The batch is empty afterwards. A write the kernel would not take fails alone; should
    /// waiting fail (it cannot, short of a bug), every write still in flight is waited for as the
    /// context is taken down, reported as failed (-EIO), and the batch makes none after.
    func run() -> [Int] {
        defer { requests.removeAll(keepingCapacity: true) }
        var outcomes = [Int](repeating: -Int(EIO), count: requests.count)
        guard context != 0, !requests.isEmpty else { return outcomes }
        var inFlight = 0
        requests.withUnsafeMutableBufferPointer { requests in
            var pointers: [UnsafeMutablePointer<iocb>?] = (0..<requests.count).map { requests.baseAddress! + $0 }
            var next = 0
            while next < pointers.count {
                let submitted = pointers.withUnsafeMutableBufferPointer {
                    peerxfer_io_submit(context, $0.count - next, $0.baseAddress! + next)
                }
                if submitted > 0 {
                    next += submitted
                    inFlight += submitted
                } else {
                    // The write at `next` was refused as it was handed over: it fails alone.
                    outcomes[next] = submitted < 0 ? -Int(errno) : -Int(EIO)
                    next += 1
                }
            }
        }
        var events = [io_event](repeating: io_event(), count: max(1, inFlight))
        while inFlight > 0 {
            let got = events.withUnsafeMutableBufferPointer {
                peerxfer_io_getevents(context, 1, inFlight, $0.baseAddress)
            }
            guard got > 0 else {
                if got < 0 && errno == EINTR { continue }
                _ = peerxfer_io_destroy(context)  // returns once every write in flight is done
                context = 0
                break
            }
            for event in events[..<got] where Int(event.data) < outcomes.count {
                outcomes[Int(event.data)] = Int(event.res)
            }
            inFlight -= got
        }
        return outcomes
    }
}
