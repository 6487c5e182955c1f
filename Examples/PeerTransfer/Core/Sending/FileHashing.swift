import Foundation
import SalutStreams
import Synchronization

/// SHA-256 over open files, read in large blocks with pread(2).
enum FileHashing {
    static let blockSize = 1 << 20

    /// Feeds `length` bytes of `fd` from `start` on to `hasher`. Past a few blocks, this
    /// thread reads while a second one hashes: copying out of the page cache and hashing
    /// overlap (about a third less time for a large file on two cores).
    /// - Throws: ``PeerTransferError/runtime(_:)`` when the file is shorter or a read fails.
    static func feed(_ fd: Int32, length: UInt64, from start: UInt64 = 0, to hasher: SHA256Hasher) throws {
        guard length > 4 * UInt64(blockSize) else {
            let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: blockSize, alignment: 16)
            defer { buffer.deallocate() }
            var offset = start
            while offset < start + length {
                let n = try readBlock(fd, into: buffer, at: offset, upTo: start + length)
                hasher.update(UnsafeRawBufferPointer(rebasing: buffer[0..<n]))
                offset += UInt64(n)
            }
            return
        }
        let slots = 3
        let buffers = (0..<slots).map { _ in UnsafeMutableRawBufferPointer.allocate(byteCount: blockSize, alignment: 16)
        }
        let free = DispatchSemaphore(value: slots)
        let hashing = DispatchQueue(label: "peerxfer.hash-file")
        let queued = DispatchGroup()
        defer {
            // No buffer goes back while the hashing thread may still read it.
            queued.wait()
            for buffer in buffers { buffer.deallocate() }
        }
        var offset = start, block = 0
        while offset < start + length {
            free.wait()
            let buffer = buffers[block % slots]
            let n: Int
            do {
                n = try readBlock(fd, into: buffer, at: offset, upTo: start + length)
            } catch {
                free.signal()
                throw error
            }
            let job = HashJob(hasher: hasher, bytes: UnsafeRawBufferPointer(rebasing: buffer[0..<n]))
            hashing.async(group: queued) {
                job.run()
                free.signal()
            }
            offset += UInt64(n)
            block += 1
        }
    }

    /// One block for the hashing thread.
    ///
    /// `@unchecked Sendable`: `feed` (and ``HashPipeline``) hand the hasher to the hashing
    /// thread until they have waited for every job, and reuse a block's buffer only after that
    /// block's job is done.
    struct HashJob: @unchecked Sendable {
        let hasher: SHA256Hasher
        let bytes: UnsafeRawBufferPointer
        func run() { hasher.update(bytes) }
    }

    /// Reads the next block at `offset` (up to `end`).
    private static func readBlock(
        _ fd: Int32, into buffer: UnsafeMutableRawBufferPointer, at offset: UInt64,
        upTo end: UInt64
    ) throws -> Int {
        let want = Int(min(UInt64(buffer.count), end - offset))
        while true {
            let n = pread(fd, buffer.baseAddress!, want, off_t(offset))
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else {
                throw PeerTransferError.runtime(
                    n == 0 ? "the file is shorter than expected" : "read failed: \(String(cString: strerror(errno)))")
            }
            return n
        }
    }

    /// SHA-256 of the first `length` bytes of `fd`.
    static func digest(of fd: Int32, length: UInt64) throws -> SHA256Digest {
        let hasher = SHA256Hasher()
        try feed(fd, length: length, to: hasher)
        return hasher.finish()
    }

    /// SHA-256 of each whole `chunkSize` chunk of the first `length` bytes of `fd`.
    static func chunkDigests(
        of fd: Int32, length: UInt64, chunkSize: Int,
        stop: StopFlag? = nil
    ) throws -> [SHA256Digest] {
        var digests: [SHA256Digest] = []
        var offset: UInt64 = 0
        while offset + UInt64(chunkSize) <= length {
            if stop?.isSet == true { throw CancellationError() }
            let hasher = SHA256Hasher()
            try feed(fd, length: UInt64(chunkSize), from: offset, to: hasher)
            digests.append(hasher.finish())
            offset += UInt64(chunkSize)
        }
        return digests
    }

    /// SHA-256 of the first `length` bytes of the file at `path` (the size the manifest
    /// announces, which is what the sender will send).
    /// - Throws: ``PeerTransferError/runtime(_:)`` when it cannot be opened or read, or is
    ///   shorter than `length` now.
    static func digest(ofFile path: String, length: UInt64) throws -> SHA256Digest {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else {
            throw PeerTransferError.runtime("cannot open \(path): \(String(cString: strerror(errno)))")
        }
        defer { close(fd) }
        do {
            return try digest(of: fd, length: length)
        } catch let error as PeerTransferError {
            throw PeerTransferError.runtime("\(path): \(error.message)")
        }
    }
}

/// Hashes blocks on a queue of its own while the caller reads and sends the next ones: the
/// sender's SHA-256 of a file costs its sending path no time.
///
/// `@unchecked Sendable`: a hasher is fed only on `queue`, in the order of ``submit(_:to:)``;
/// the caller leaves each block's memory alone until ``settle(toAtMost:)`` says its job ran
/// (and waits for every job, with ``drain()``, before freeing that memory); the count of jobs
/// and the one waiting task live behind the mutex.
final class HashPipeline: @unchecked Sendable {
    private struct State {
        var inFlight = 0
        var waiting: (limit: Int, continuation: CheckedContinuation<Void, Never>)?
    }
    private let queue = DispatchQueue(label: "peerxfer.send-hash")
    private let state = Locked(State())

    /// Feeds `bytes` to `hasher` on the pipeline's queue, after everything submitted before.
    func submit(_ bytes: UnsafeRawBufferPointer, to hasher: SHA256Hasher) {
        state.withLock { $0.inFlight += 1 }
        let job = FileHashing.HashJob(hasher: hasher, bytes: bytes)
        queue.async { [self] in
            job.run()
            let waiter = state.withLock { state -> CheckedContinuation<Void, Never>? in
                state.inFlight -= 1
                guard let waiting = state.waiting, state.inFlight <= waiting.limit else { return nil }
                state.waiting = nil
                return waiting.continuation
            }
            waiter?.resume()
        }
    }

    /// Returns once at most `limit` submitted jobs have not run yet (one task waits at a time).
    func settle(toAtMost limit: Int) async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let now = state.withLock { state -> Bool in
                guard state.inFlight > limit else { return true }
                precondition(state.waiting == nil, "one task waits on a HashPipeline at a time")
                state.waiting = (limit, continuation)
                return false
            }
            if now { continuation.resume() }
        }
    }

    /// Blocks until every submitted job has run (for a clean-up that cannot suspend).
    func drain() {
        queue.sync {}
    }
}

/// A flag one task sets to stop work another thread does in a loop (hashing a part file for
/// an offer whose sender left): checked between steps.
final class StopFlag: Sendable {
    private let flag = Atomic<Bool>(false)
    /// Asks the work to stop.
    func set() { flag.store(true, ordering: .releasing) }
    /// True once ``set()`` was called.
    var isSet: Bool { flag.load(ordering: .acquiring) }
}
