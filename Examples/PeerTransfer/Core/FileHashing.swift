import Foundation
import SalutStreams
import Synchronization

/// SHA-256 over open files, read in large blocks with pread(2).
enum FileHashing {
    static let blockSize = 1 << 20

    /// Feeds the first `length` bytes of `fd` to `hasher`.
    /// - Throws: ``PeerTransferError/runtime(_:)`` when the file is shorter or a read fails.
    static func feed(_ fd: Int32, length: UInt64, from start: UInt64 = 0, to hasher: SHA256Hasher) throws {
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: blockSize, alignment: 16)
        defer { buffer.deallocate() }
        var offset = start
        let end = start + length
        while offset < end {
            let want = Int(min(UInt64(blockSize), end - offset))
            let n = pread(fd, buffer.baseAddress!, want, off_t(offset))
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else {
                throw PeerTransferError.runtime(n == 0 ? "the file is shorter than expected" : "read failed: \(String(cString: strerror(errno)))")
            }
            hasher.update(UnsafeRawBufferPointer(rebasing: buffer[0..<n]))
            offset += UInt64(n)
        }
    }

    /// SHA-256 of the first `length` bytes of `fd`.
    static func digest(of fd: Int32, length: UInt64) throws -> SHA256Digest {
        let hasher = SHA256Hasher()
        try feed(fd, length: length, to: hasher)
        return hasher.finish()
    }

    /// SHA-256 of each whole `chunkSize` chunk of the first `length` bytes of `fd`.
    static func chunkDigests(of fd: Int32, length: UInt64, chunkSize: Int) throws -> [SHA256Digest] {
        var digests: [SHA256Digest] = []
        var offset: UInt64 = 0
        while offset + UInt64(chunkSize) <= length {
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
        guard fd >= 0 else { throw PeerTransferError.runtime("cannot open \(path): \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        do {
            return try digest(of: fd, length: length)
        } catch let error as PeerTransferError {
            throw PeerTransferError.runtime("\(path): \(error.message)")
        }
    }
}

/// SHA-256 fed on its own queue, so that a receiver hashes a chunk while it writes the next:
/// the two run on both cores instead of one after the other. At most `limit` bytes wait to
/// be hashed; past that, ``update(_:)`` waits for the hasher to catch up. A small file is
/// hashed inline instead: for it, two hops between threads cost more than they save.
///
/// `@unchecked Sendable`: the wrapped `SHA256Hasher` is touched only on `queue` (a serial
/// queue), or, inline, only by the one task that owns this hasher; the count of waiting
/// bytes only under its mutex.
final class BackgroundHasher: @unchecked Sendable {
    /// Files up to this size are hashed inline.
    static let inlineLimit: UInt64 = 4 << 20

    private let hasher: SHA256Hasher
    private let queue: DispatchQueue?
    private let waiting = Mutex(0)
    private let limit: Int

    /// Continues `hasher` (which may already hold a prefix) for a file of `size` bytes: on a
    /// queue of its own when the file is large, inline otherwise.
    init(continuing hasher: SHA256Hasher, size: UInt64, limit: Int = 16 << 20) {
        self.hasher = hasher
        self.queue = size > Self.inlineLimit ? DispatchQueue(label: "peerxfer.hash") : nil
        self.limit = limit
    }

    /// Hashes `data` after everything before it (queued, or at once inline).
    func update(_ data: Data) async {
        guard let queue else { return hasher.update(data) }
        let count = data.count
        let behind = waiting.withLock { waiting -> Bool in
            waiting += count
            return waiting > limit
        }
        queue.async { [self] in
            hasher.update(data)
            waiting.withLock { $0 -= count }
        }
        if behind {
            await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in queue.async { done.resume() } }
        }
    }

    /// The digest of everything given.
    func finish() async -> SHA256Digest {
        guard let queue else { return hasher.finish() }
        return await withCheckedContinuation { done in
            queue.async { [self] in done.resume(returning: hasher.finish()) }
        }
    }
}
