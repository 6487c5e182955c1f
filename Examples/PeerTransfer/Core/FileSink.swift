import Foundation
import SalutStreams
import Synchronization

/// Where a receiver's chunks for one file go: written to the part file on one queue and
/// hashed on another, so that reading the connection, writing and hashing run on all cores
/// at once instead of one after the other in the receiving task. At most `limit` bytes wait
/// on each queue; past that, ``append(_:at:)`` waits until half as many wait, while the
/// queues go on working (so neither runs dry while the task reads the next chunks). A small file is
/// written and hashed inline: for it, hops between threads cost more than they save.
///
/// `@unchecked Sendable`: the part file is written only on `writeQueue` and the hasher fed
/// only on `hashQueue` until ``drain()`` returns (inline, only by the task that owns the
/// sink); after it, only that task touches them. The waiting counts and the first write
/// failure live behind the mutex.
final class FileSink: @unchecked Sendable {
    /// Files up to this size are written and hashed inline.
    static let inlineLimit: UInt64 = 4 << 20

    private struct State {
        var waiting = 0
        var failure: PeerTransferError?
        /// The task waiting for the queues to catch up, resumed once `waiting` is at most the
        /// limit again (they keep working meanwhile: no bubble in the pipeline, as a full drain
        /// made).
        var catchingUp: CheckedContinuation<Void, Never>?

        /// Counts `count` bytes done on one queue; returns the task to resume, if any.
        mutating func done(_ count: Int, limit: Int) -> CheckedContinuation<Void, Never>? {
            waiting -= count
            guard waiting <= limit, let waiter = catchingUp else { return nil }
            catchingUp = nil
            return waiter
        }
    }

    let file: PartFile
    private let hasher: SHA256Hasher
    private let writeQueue: DispatchQueue?
    private let hashQueue: DispatchQueue?
    private let state = Mutex(State())
    private let limit: Int

    /// A sink for `file`, whose first bytes `hasher` already holds, of `size` bytes in all.
    init(file: PartFile, continuing hasher: SHA256Hasher, size: UInt64, limit: Int = 16 << 20) {
        self.file = file
        self.hasher = hasher
        let queued = size > Self.inlineLimit
        writeQueue = queued ? DispatchQueue(label: "peerxfer.write") : nil
        hashQueue = queued ? DispatchQueue(label: "peerxfer.hash") : nil
        self.limit = limit
    }

    /// Writes `data` at `offset` and hashes it after everything before it.
    /// - Throws: the first write failure so far (``PeerTransferError/noSpace(_:)`` for a full
    ///   disk); a failure on the queue shows at the next call or at ``finish()``.
    func append(_ data: Data, at offset: UInt64) async throws {
        guard let writeQueue, let hashQueue else {
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
            state.withLock {
                if $0.failure == nil { $0.failure = failure }
                return $0.done(count, limit: limit)
            }?.resume()
        }
        hashQueue.async { [self] in
            hasher.update(data)
            state.withLock { $0.done(count, limit: limit) }?.resume()
        }
        if behind { await catchUp() }
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

    /// Returns once everything given so far is written and hashed.
    func drain() async {
        guard let writeQueue, let hashQueue else { return }
        // Behind every write queued so far, then behind every hash queued before that.
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            writeQueue.async { hashQueue.async { done.resume() } }
        }
    }

    /// The SHA-256 of the whole file, once everything is written.
    /// - Throws: the first write failure.
    func finish() async throws -> SHA256Digest {
        await drain()
        if let failure = state.withLock({ $0.failure }) { throw failure }
        return hasher.finish()
    }
}
