import Foundation
import Salut

extension Sender {
    /// What the sender sends of one accepted file.
    ///
    /// `@unchecked Sendable`: an `Outgoing` is handed from the thread that made it to the
    /// sending task once; from then on its hasher is fed only through that task's
    /// ``HashPipeline`` (one queue) and finished by the task after the pipeline settled.
    struct Outgoing: @unchecked Sendable {
        var index: Int
        /// Where sending starts (after what the receiver already has).
        var offset: UInt64
        /// The SHA-256 so far: the first `offset` bytes are in it.
        var hasher: SHA256Hasher
        /// Set when the receiver already holds this very file: only its end is sent.
        var unchanged: String?
        /// Set when the file can no longer be read as listed: it is withdrawn.
        var withdrawn = false
    }

    /// For each accepted file of `answer`, in index order: where to resume, that the receiver
    /// already has it, or that it must be withdrawn (it shrank or cannot be read any more).
    /// Blocking: it hashes files.
    static func outgoing(_ plan: TransferPlan, answer: Answer) -> [Outgoing] {
        let entries = plan.manifest.entries
        var taken = Set<Int>()
        var outgoing: [Outgoing] = []
        for accepted in answer.accepted.sorted(by: { $0.index < $1.index })
        where entries.indices.contains(accepted.index) {
            // An index given twice is taken once.
            guard taken.insert(accepted.index).inserted, entries[accepted.index].kind == .file else { continue }
            let entry = entries[accepted.index], source = plan.sources[accepted.index]!
            do {
                if let existing = accepted.existing,
                    try FileHashing.digest(ofFile: source, length: entry.size).hex == existing
                {
                    outgoing.append(
                        Outgoing(index: accepted.index, offset: entry.size, hasher: SHA256Hasher(), unchanged: existing)
                    )
                    continue
                }
                let (offset, hasher) = try resumePoint(
                    source: source, have: accepted.have,
                    chunkSize: plan.manifest.chunkSize, size: entry.size)
                outgoing.append(Outgoing(index: accepted.index, offset: offset, hasher: hasher))
            } catch {
                outgoing.append(Outgoing(index: accepted.index, offset: 0, hasher: SHA256Hasher(), withdrawn: true))
            }
        }
        return outgoing
    }

    /// Where to resume: after the longest run of the receiver's chunk digests that match ours,
    /// but before the file's last chunk, which is always sent (a file ends with a chunk, then
    /// its `fileEnd`); and a hasher holding the bytes before it.
    static func resumePoint(
        source: String, have: [String], chunkSize: Int, size: UInt64
    ) throws -> (UInt64, SHA256Hasher) {
        let whole = SHA256Hasher()
        guard !have.isEmpty else { return (0, whole) }
        let fd = open(source, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else {
            throw PeerTransferError.runtime("cannot open \(source): \(String(cString: strerror(errno)))")
        }
        defer { close(fd) }
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: chunkSize, alignment: 16)
        defer { buffer.deallocate() }
        var offset: UInt64 = 0
        for digest in have {
            guard offset + UInt64(chunkSize) < size else { break }
            try readFully(fd, into: buffer, count: chunkSize, at: offset, path: source)
            guard SHA256Hasher.hash(UnsafeRawBufferPointer(buffer)).hex == digest else { break }
            whole.update(UnsafeRawBufferPointer(buffer))
            offset += UInt64(chunkSize)
        }
        return (offset, whole)
    }

    /// What says a file changed: its size and its modification and change times (exactly),
    /// and the modification time as the manifest has it.
    struct Identity: Equatable {
        var size: UInt64
        var modified: Double
        var times: [Int]

        static func == (a: Identity, b: Identity) -> Bool { a.size == b.size && a.times == b.times }
    }

    /// What says the file open at `fd` changed, or nil when it cannot be read.
    static func identity(of fd: Int32) -> Identity? {
        var info = stat()
        guard fstat(fd, &info) == 0 else { return nil }
        return Identity(
            size: UInt64(info.st_size), modified: TransferPlan.modificationTime(info),
            times: [info.st_mtim.tv_sec, info.st_mtim.tv_nsec, info.st_ctim.tv_sec, info.st_ctim.tv_nsec])
    }

    /// The file ended before the bytes the plan listed.
    struct FileShrank: Error {}

    /// Reads `count` bytes of `path`, open at `fd`, from `offset` into `buffer`.
    /// - Throws: ``FileShrank`` when the file ends before; ``PeerTransferError/runtime(_:)``
    ///   when it cannot be read.
    static func readFully(
        _ fd: Int32, into buffer: UnsafeMutableRawBufferPointer, count: Int, at offset: UInt64,
        path: String
    ) throws {
        var done = 0
        while done < count {
            let n = pread(fd, buffer.baseAddress! + done, count - done, off_t(offset) + off_t(done))
            if n < 0 && errno == EINTR { continue }
            if n == 0 { throw FileShrank() }
            guard n > 0 else {
                throw PeerTransferError.runtime("cannot read \(path): \(String(cString: strerror(errno)))")
            }
            done += n
        }
    }
}
