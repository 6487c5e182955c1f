import Foundation

/// Verified files waiting for their names: made durable together by one syncfs(2), then
/// named, then their folders synced. The receiver publishes a batch on a thread of its own
/// while its task goes on receiving the next files, so the disk's flush does not stall the
/// connection.
///
/// `@unchecked Sendable`: the receiving task hands a batch over whole and touches none of its
/// files afterwards; the publishing thread owns them (and closes them) until it returns.
struct VerifiedBatch: @unchecked Sendable {
    /// Verified files named together: at most this many (each holds its locked descriptor
    /// while it waits)… A transfer holds two batches (one being named, one filling), and up to
    /// ``TransferLimits/maximumConcurrentTransfers`` transfers run at once: together they may
    /// take at most half of the process's descriptors, and never more than 256 a batch.
    static let maximumFiles: Int = {
        var limit = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 else { return 32 }
        let share = Int(min(limit.rlim_cur, 1 << 20)) / 2 / (2 * TransferLimits.maximumConcurrentTransfers)
        return max(16, min(256, share))
    }()
    /// …or this many bytes.
    static let maximumBytes: UInt64 = 256 << 20

    /// The files, each with its manifest index, in the order they were verified.
    private(set) var files: [(index: Int, file: PartFile)] = []
    /// Their bytes together.
    private(set) var bytes: UInt64 = 0

    /// An empty batch.
    init() {}

    /// True when no file waits.
    var isEmpty: Bool { files.isEmpty }

    /// True once the batch should be published before more files join it.
    var isFull: Bool { files.count >= Self.maximumFiles || bytes >= Self.maximumBytes }

    /// Adds the verified (and written) `file`, entry `index` of `size` bytes.
    mutating func append(_ index: Int, _ file: PartFile, size: UInt64) {
        files.append((index, file))
        bytes += size
    }

    /// Makes the batch's data durable (one syncfs), names each file, then syncs the folders
    /// that got names; closes every file. Blocking.
    /// - Parameter named: told of each file's result as it is named (or fails to be).
    /// - Returns: each file's result, in the batch's order.
    /// - Throws: ``PeerTransferError/runtime(_:)`` when the data or a folder cannot be synced
    ///   (the transfer ends on it); a file that cannot be named fails alone, in its result.
    func publish(in inbox: Inbox, named: (FileResult, PartFile) -> Void) throws -> [FileResult] {
        defer { for (_, file) in files { file.closeFiles() } }
        try inbox.syncData()
        let cache = FolderCache()
        var results: [FileResult] = []
        // The folders that got names, each held open from when its first file was named, to be
        // synced then (told apart by their bytes, as the file system does: two spellings of "é"
        // are two folders). A folder moved or removed meanwhile is not looked for again: its
        // names are its mover's now, and no other transfer's results depend on them.
        var folders: [[UInt8]: Int32] = [:]
        defer { for fd in folders.values { close(fd) } }
        for (index, file) in files {
            var result = FileResult(index: index, verified: false, storedAs: nil, error: nil)
            do {
                result.storedAs = try file.publish(cache: cache)
                result.verified = true
                let key = FolderCache.key(file.path.parent)
                if folders[key] == nil, let folder = try? inbox.openDirectory(file.path.parent, create: false, cache: cache) {
                    folders[key] = folder
                }
            } catch let error as PeerTransferError {
                result.error = error.message
            }
            named(result, file)
            results.append(result)
        }
        for folder in folders.values {
            guard fsync(folder) == 0 else {
                throw PeerTransferError.runtime("fsync of a folder of the inbox: \(String(cString: strerror(errno)))")
            }
        }
        return results
    }
}
