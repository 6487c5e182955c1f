import Foundation
import SalutStreams

/// Verified files waiting for their names: small ones still in memory are written, then
/// all are made durable together by one syncfs(2), then named, then their folders synced. The
/// receiver publishes a batch on a thread of its own while its task goes on receiving the next
/// files, so neither the disk's flush nor the small files' system calls stall the connection.
///
/// `@unchecked Sendable`: the receiving task hands a batch over whole and touches none of its
/// files afterwards; the publishing thread owns them (and closes them) until it returns. While
/// the buffered files are written, up to three helper threads it starts write some of them,
/// each file by one thread only, and hand each result back under a lock (see
/// ``writeBuffered(in:for:)``).
struct VerifiedBatch: @unchecked Sendable {
    /// Verified files named together: at most this many (each written one holds its locked
    /// descriptor while it waits, and each buffered one a descriptor while it is published)…
    /// A transfer holds two batches (one being named, one filling), and up to
    /// ``TransferLimits/maximumConcurrentTransfers`` transfers run at once: together they may
    /// take at most half of the process's descriptors, and never more than 256 a batch.
    static let maximumFiles: Int = {
        var limit = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 else { return 32 }
        let share = Int(min(limit.rlim_cur, 1 << 20)) / 2 / (2 * TransferLimits.maximumConcurrentTransfers)
        return max(16, min(256, share))
    }()
    /// …or this many bytes…
    static let maximumBytes: UInt64 = 256 << 20
    /// …or this many bytes in memory (see ``BufferedFile``): a transfer keeps at most twice this
    /// much in its batches (one filling, one being published; see ``hasRoom(forBuffered:)``),
    /// plus the file arriving, whatever the size of its files.
    static let maximumBufferedBytes: UInt64 = 8 << 20

    /// A verified file: written to its part file already, or in memory until the batch is
    /// published.
    enum Waiting {
        /// Written to its part file, which is open and locked.
        case written(PartFile)
        /// In memory, to be written with the sender's mode and modification time.
        case buffered(BufferedFile, mode: UInt32, modified: Double)

        /// Where the file goes, below the inbox.
        var path: RelativePath {
            switch self {
            case .written(let file): file.path
            case .buffered(let buffered, _, _): buffered.path
            }
        }
    }

    /// The files, each with its manifest index, in the order they were verified.
    private(set) var files: [(index: Int, file: Waiting)] = []
    /// Their bytes together.
    private(set) var bytes: UInt64 = 0
    /// The bytes of the buffered files among them, which are in memory.
    private(set) var bufferedBytes: UInt64 = 0

    /// An empty batch.
    init() {}

    /// True when no file waits.
    var isEmpty: Bool { files.isEmpty }

    /// How many files wait.
    var count: Int { files.count }

    /// True once the batch should be published before more files join it.
    var isFull: Bool {
        files.count >= Self.maximumFiles || bytes >= Self.maximumBytes || bufferedBytes >= Self.maximumBufferedBytes
    }

    /// True when a buffered file of `size` bytes may join without the batch holding more than
    /// ``maximumBufferedBytes`` in memory (an empty batch takes any).
    func hasRoom(forBuffered size: UInt64) -> Bool {
        files.isEmpty || bufferedBytes + size <= Self.maximumBufferedBytes
    }

    /// Adds the verified (and written) `file`, entry `index` of `size` bytes.
    mutating func append(_ index: Int, _ file: PartFile, size: UInt64) {
        files.append((index, .written(file)))
        bytes += size
    }

    /// Adds the verified file `buffered`, entry `index`, to be written with `mode` and
    /// `modified` when the batch is published.
    mutating func append(_ index: Int, buffered: BufferedFile, mode: UInt32, modified: Double) {
        files.append((index, .buffered(buffered, mode: mode, modified: modified)))
        bytes += buffered.size
        bufferedBytes += buffered.size
    }

    /// Writes the buffered files (each recording `sender` as its deliverer), makes the batch's
    /// data durable (one syncfs), names each file, then syncs the folders that got names;
    /// closes every file. Blocking.
    ///
    /// Should writing a buffered file fail for want of space or an I/O error, the buffered files
    /// after it are not written (they fail with that error), but everything written before it
    /// is still synced and named, and only then is the error thrown.
    /// - Parameters:
    ///   - named: told of each file's result, with its path, as it is named (or fails).
    ///   - movedAside: told of each file of an untrusted sender that moved aside to give its
    ///     name to one of this (trusted) sender's files: the name and the file's new name,
    ///     both in the folder `parent`.
    /// - Returns: each file's result, in the batch's order.
    /// - Throws: ``PeerTransferError/noSpace(_:)`` when a buffered file does not fit on the disk;
    ///   ``PeerTransferError/runtime(_:)`` when one cannot be written, or the data or a folder
    ///   cannot be synced (the transfer ends on it). A file that cannot be made where it goes
    ///   (something planted there, another transfer writing it) or named fails alone, in its
    ///   result.
    func publish(
        in inbox: Inbox, for sender: String, named: (FileResult, RelativePath) -> Void,
        movedAside: (_ parent: [String], _ name: String, _ to: String) -> Void = { _, _, _ in }
    ) throws -> [FileResult] {
        let cache = FolderCache()
        // Each file's part file, or why it has none (it fails alone).
        var parts: [Result<PartFile, PeerTransferError>] = []
        parts.reserveCapacity(files.count)
        defer {
            for case .success(let file) in parts { file.closeFiles() }
            for case (_, .written(let file)) in files { file.closeFiles() }
        }
        // The buffered files are written several at a time (see `writeBuffered`); then, in the
        // batch's order, the failure that stopped their writing (thrown once the rest is named)
        // and the file it happened on.
        let writes = writeBuffered(in: inbox, for: sender)
        var stopped: (error: PeerTransferError, path: RelativePath)?
        for (position, (_, waiting)) in files.enumerated() {
            switch waiting {
            case .written(let file):
                parts.append(.success(file))
            case .buffered(let buffered, _, _):
                if let stopped {
                    // Written meanwhile by another writer, or not: not named either way (a
                    // file without a name goes with its descriptor).
                    if case .done(.success(let file)) = writes[position] { file.closeFiles() }
                    // Its own words: this file was not written (the error names the other file).
                    parts.append(.failure(Self.notWritten(after: stopped.error, on: stopped.path)))
                    continue
                }
                switch writes[position] {
                case .done(let outcome):
                    parts.append(outcome)
                case .stopped(let failure):
                    stopped = (failure, buffered.path)
                    parts.append(.failure(failure))
                case .notTried:
                    // Only files after a stopping failure are left untried: never reached.
                    assertionFailure("a buffered file before any stop was not written")
                    parts.append(.failure(.runtime("\(Terminal.escape(buffered.path.description)) was not written")))
                }
            }
        }
        try inbox.syncData()
        var results: [FileResult] = []
        // The folders that got names, each held open from when its first file was named, to be
        // synced then (told apart by their bytes, as the file system does: two spellings of "é"
        // are two folders). A folder moved or removed meanwhile is not looked for again: its
        // names are its mover's now, and no other transfer's results depend on them.
        var folders: [[UInt8]: Int32] = [:]
        defer { for fd in folders.values { close(fd) } }
        for ((index, waiting), part) in zip(files, parts) {
            var result = FileResult(index: index, verified: false, storedAs: nil, error: nil)
            let path = waiting.path
            do {
                let file = try part.get()
                result.storedAs = try file.publish(cache: cache)
                if let moved = file.movedAside { movedAside(path.parent, moved.name, moved.to) }
                result.verified = true
                let key = FolderCache.key(path.parent)
                if folders[key] == nil, let folder = try? inbox.openDirectory(path.parent, create: false, cache: cache)
                {
                    folders[key] = folder
                }
            } catch let error as PeerTransferError {
                result.error = error.message
            }
            named(result, path)
            results.append(result)
        }
        for folder in folders.values {
            guard fsync(folder) == 0 else {
                throw PeerTransferError.runtime("fsync of a folder of the inbox: \(String(cString: strerror(errno)))")
            }
        }
        if let stopped { throw stopped.error }
        return results
    }

    /// Why a buffered file after `failure` (on the file at `path`) was not written: the same kind
    /// of failure (no space stays no space), in words about this file.
    static func notWritten(after failure: PeerTransferError, on path: RelativePath) -> PeerTransferError {
        let earlier = Terminal.escape(path.description)
        if failure.wireCode == PeerTransferError.noSpace("").wireCode {
            return .noSpace("not written: the inbox's disk filled up with \(earlier), received before it")
        }
        return .runtime("not written: writing \(earlier), received before it, failed (\(failure.message))")
    }
}
