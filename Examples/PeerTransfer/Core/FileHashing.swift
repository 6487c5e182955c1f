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

    /// SHA-256 of the file at `path`.
    static func digest(ofFile path: String) throws -> SHA256Digest {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw PeerTransferError.runtime("cannot open \(path): \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0 else { throw PeerTransferError.runtime("cannot stat \(path): \(String(cString: strerror(errno)))") }
        return try digest(of: fd, length: UInt64(info.st_size))
    }
}

/// SHA-256 fed on its own queue, so that a receiver hashes a chunk while it writes the next:
/// the two run on both cores instead of one after the other. At most `limit` bytes wait to
/// be hashed; past that, ``update(_:)`` waits for the hasher to catch up.
///
/// `@unchecked Sendable`: the wrapped `SHA256Hasher` is touched only on `queue` (a serial
/// queue), and the count of waiting bytes only under its mutex.
final class BackgroundHasher: @unchecked Sendable {
    private let hasher: SHA256Hasher
    private let queue = DispatchQueue(label: "peerxfer.hash")
    private let waiting = Mutex(0)
    private let limit: Int

    /// Continues `hasher` (which may already hold a prefix) on a queue of its own.
    init(continuing hasher: SHA256Hasher, limit: Int = 16 << 20) {
        self.hasher = hasher
        self.limit = limit
    }

    /// Queues `data` to be hashed after everything queued before it.
    func update(_ data: Data) async {
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

    /// The digest of everything queued.
    func finish() async -> SHA256Digest {
        await withCheckedContinuation { done in
            queue.async { [self] in done.resume(returning: hasher.finish()) }
        }
    }
}
