import Foundation
import SalutStreams

/// Where a receiver's chunks for one file go: written to the part file on one queue and
/// hashed on another, so that reading the connection, writing and hashing run on all cores
/// at once instead of one after the other in the receiving task. At most `limit` bytes wait
/// on each queue; past that, ``append(_:at:)`` waits until half as many wait, while the
/// queues go on working (so neither runs dry while the task reads the next chunks). Every
/// ``flushStep`` bytes written, a third queue makes them durable (``PartFile/flushData()``)
/// without holding up the writes, so that the disk works while the data comes and not only in
/// the sync before the file is named. A large file's writes bypass the page cache while they
/// are aligned (``PartFile/writeDirectly()``). A small file is written and hashed inline: for
/// it, hops between threads cost more than they save.
///
/// `@unchecked Sendable`: the part file is written only on `writeQueue` and the hasher fed
/// only on `hashQueue` until ``drain()`` returns (inline, only by the task that owns the sink);
/// after it, only that task touches them. `flushQueue` uses the part file at the same time as
/// `writeQueue`, but only its descriptor and path, which do not change until the owner closes
/// the file after ``drain()`` (positioned writes and `fdatasync` on one descriptor may run at
/// once). The waiting counts, the flush's progress and the first failure live behind the mutex.
final class FileSink: @unchecked Sendable {
    /// Files up to this size are written and hashed inline.
    static let inlineLimit: UInt64 = 4 << 20

    /// Bytes written, at least, between the start of one flush and the next (unless a sink is
    /// made with another step).
    static let flushStep = 32 << 20

    private struct State {
        var waiting = 0
        var failure: PeerTransferError?
        /// The task waiting for the queues to catch up, resumed once `waiting` is at most the
        /// limit again (they keep working meanwhile: no bubble in the pipeline, as a full drain
        /// made).
        var catchingUp: CheckedContinuation<Void, Never>?
        /// Bytes written since the last flush started, and whether one is running.
        var unflushed = 0
        var flushing = false
        var flushesDone = 0

        /// Counts `count` bytes done on one queue; returns the task to resume, if any.
        mutating func done(_ count: Int, limit: Int) -> CheckedContinuation<Void, Never>? {
            waiting -= count
            guard waiting <= limit, let waiter = catchingUp else { return nil }
            catchingUp = nil
            return waiter
        }

        /// Counts `count` bytes written; true when a flush should start now (one is due, none
        /// is running, and nothing failed).
        mutating func wrote(_ count: Int, step: Int) -> Bool {
            unflushed += count
            guard failure == nil, unflushed >= step, !flushing else { return false }
            unflushed = 0
            flushing = true
            return true
        }
    }

    let file: PartFile
    private let hasher: SHA256Hasher
    private let writeQueue: DispatchQueue?
    private let hashQueue: DispatchQueue?
    private let flushQueue: DispatchQueue?
    private let state = Locked(State())
    private let limit: Int
    private let flushStep: Int

    /// A sink for `file`, whose first bytes `hasher` already holds, of `size` bytes in all;
    /// at most `limit` bytes wait on each queue, and a flush starts every `flushStep` bytes.
    init(
        file: PartFile, continuing hasher: SHA256Hasher, size: UInt64, limit: Int = 16 << 20,
        flushStep: Int = FileSink.flushStep
    ) {
        self.file = file
        self.hasher = hasher
        let queued = size > Self.inlineLimit
        writeQueue = queued ? DispatchQueue(label: "peerxfer.write") : nil
        hashQueue = queued ? DispatchQueue(label: "peerxfer.hash") : nil
        flushQueue = queued ? DispatchQueue(label: "peerxfer.flush") : nil
        self.limit = limit
        self.flushStep = flushStep
        // A large file's chunks come in page-aligned memory (``ChunkMemory``) at aligned
        // offsets: they go straight to the disk (see ``DirectWrites``).
        if queued { file.writeDirectly() }
    }

    /// How many flushes ran to their end, for tests.
    var flushesDone: Int { state.withLock { $0.flushesDone } }

    /// Writes `data` at `offset` and hashes it after everything before it.
    /// - Throws: the first write or flush failure so far (``PeerTransferError/noSpace(_:)`` for a
    ///   full disk); a failure on a queue shows at the next call or at ``finish()``.
    func append(_ data: Data, at offset: UInt64) async throws {
        guard let writeQueue, let hashQueue, let flushQueue else {
            try file.write(data, at: offset)
            hasher.update(data)
            return
        }
        let count = data.count
        let behind = try state.withLock { state -> Bool in
            if let failure = state.failure { throw failure }
            state.waiting += 2 * count
            return state.waiting > 2 * limit
        }
        writeQueue.async { [self] in
            var failure: PeerTransferError?
            do {
                try file.write(data, at: offset)
            } catch {
                failure = error as? PeerTransferError ?? .runtime("writing \(file.path): \(error)")
            }
            let (waiter, flushNow) = state.withLock {
                if $0.failure == nil { $0.failure = failure }
                return ($0.done(count, limit: limit), $0.wrote(count, step: flushStep))
            }
            waiter?.resume()
            if flushNow { flushQueue.async { [self] in flush() } }
        }
        hashQueue.async { [self] in
            hasher.update(data)
            state.withLock { $0.done(count, limit: limit) }?.resume()
        }
        if behind { await catchUp() }
    }

    /// Makes what was written so far durable; runs on `flushQueue`.
    private func flush() {
        var failure: PeerTransferError?
        do {
            try file.flushData()
        } catch {
            failure = error as? PeerTransferError ?? .runtime("flushing \(file.path): \(error)")
        }
        state.withLock {
            if $0.failure == nil { $0.failure = failure }
            $0.flushing = false
            $0.flushesDone += 1
        }
    }

    /// Returns once at most `limit` bytes wait on the two queues together.
    private func catchUp() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let now = state.withLock { state -> Bool in
                guard state.waiting > limit else { return true }
                state.catchingUp = continuation
                return false
            }
            if now { continuation.resume() }
        }
    }

    /// Returns once everything given so far is written and hashed, and any flush those writes
    /// started has ended. (That flush may take a while on a slow disk: callers waiting on it
    /// allow for the disk, not only for the peer.)
    func drain() async {
        guard let writeQueue, let hashQueue, let flushQueue else { return }
        // Behind every write queued so far, then behind any flush those writes started, then
        // behind every hash queued before that.
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            writeQueue.async { flushQueue.async { hashQueue.async { done.resume() } } }
        }
    }

    /// The SHA-256 of the whole file, once everything is written (see ``drain()``).
    /// - Throws: the first write or flush failure.
    func finish() async throws -> SHA256Digest {
        await drain()
        if let failure = state.withLock({ $0.failure }) { throw failure }
        return hasher.finish()
    }
}
