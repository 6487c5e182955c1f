import Foundation
import SalutStreams

/// Writing a batch's buffered files: several at a time, since each waits on the disk for its
/// direct writes (see ``DirectWrites``) and, one after another, those waits added up to most of
/// a batch's publishing.
extension VerifiedBatch {
    /// How many buffered files are written at once.
    static let writers = 4

    /// What writing one buffered file came to.
    enum Writing {
        /// True for a failure that stopped the writing.
        var stopped: Bool {
            if case .stopped = self { return true } else { return false }
        }

        /// Written (a part file waiting for its name), or why this file alone cannot be.
        case done(Result<PartFile, PeerTransferError>)
        /// A failure to write (a full disk, an I/O error) that stops the writing of the files
        /// after it, as it would have ended the transfer when their bytes arrived.
        case stopped(PeerTransferError)
        /// Not tried: a file after one whose writing stopped.
        case notTried
    }

    /// Each waiting file's writing, by its position in the batch (``Writing/notTried`` for the
    /// files written already). The buffered files are taken in the batch's order by up to
    /// ``writers`` threads (this one among them), each with a folder cache of its own; once one
    /// stops, no file after those already taken is started.
    ///
    /// Files are named as writing them one after another would name them, or more: when one
    /// stopped (a full disk), the files after the first that stopped are let go, and from that
    /// first one on they are written again one at a time, until one stops. (More: a later file
    /// written over a part file an earlier try left may have emptied it already, which only
    /// frees space for the files before it.) A file let go gives back its space:
    /// one without a name goes with its descriptor, and a part file it was written over is
    /// removed (a buffered file is sent again whole; its part file's bytes are of no use), as is
    /// a part file whose write failed. So files written after an earlier one in the batch never
    /// take the space it needed. Blocking.
    ///
    /// The helper threads hold the batch only through a ``WritingJob`` that is emptied once they
    /// finish, so the files' memory and claims go when `publish` lets go of them, not when the
    /// threads end.
    func writeBuffered(in inbox: Inbox, for sender: String) -> [Writing] {
        let positions = files.indices.filter {
            if case .buffered = files[$0].file { return true } else { return false }
        }
        let writes = WritersProgress(count: files.count)
        let helpers = min(Self.writers, positions.count) - 1
        let job = WritingJob(self)
        let finished = DispatchGroup()
        for _ in 0..<max(0, helpers) {
            finished.enter()
            Thread.detachNewThread {
                job.batch?.write(positions, into: writes, in: inbox, for: sender)
                finished.leave()
            }
        }
        write(positions, into: writes, in: inbox, for: sender)
        finished.wait()
        job.batch = nil
        var outcomes = writes.outcomes
        guard let first = positions.first(where: { outcomes[$0].stopped }) else { return outcomes }
        for position in positions where position >= first {
            if case .done(.success(let file)) = outcomes[position] {
                file.discard()
                file.closeFiles()
            }
            outcomes[position] = .notTried
        }
        let again = WritersProgress(count: files.count)
        write(positions.filter { $0 >= first }, into: again, in: inbox, for: sender)
        let rewritten = again.outcomes
        for position in positions where position >= first { outcomes[position] = rewritten[position] }
        return outcomes
    }

    /// The batch, for the helper threads that write its files, until they have finished.
    ///
    /// `@unchecked Sendable`: `batch` is set when the job is made and read (never changed) by
    /// the helpers; `writeBuffered` clears it only after every helper has left its
    /// `DispatchGroup`, whose wait orders their reads before that write.
    private final class WritingJob: @unchecked Sendable {
        var batch: VerifiedBatch?
        init(_ batch: VerifiedBatch) { self.batch = batch }
    }

    /// Writes the buffered files at `positions` that `writes` hands this thread, in order, until
    /// none is left or one stopped.
    private func write(_ positions: [Int], into writes: WritersProgress, in inbox: Inbox, for sender: String) {
        let cache = FolderCache()
        let pages = PageAlignedBytes()
        while let position = writes.next(of: positions) {
            guard case .buffered(let buffered, let mode, let modified) = files[position].file else { continue }
            do {
                let outcome = try Self.write(
                    buffered, mode: mode, modified: modified, in: inbox, for: sender, cache: cache, pages: pages)
                writes.record(.done(outcome), at: position)
            } catch {
                let failure =
                    error as? PeerTransferError
                    ?? .runtime("writing \(Terminal.escape(buffered.path.description)): \(error)")
                writes.record(.stopped(failure), at: position)
            }
        }
    }

    /// The writers' shared progress: which buffered file is next, whether one stopped, and
    /// each file's outcome.
    ///
    /// `@unchecked Sendable`: every field is touched only under `lock`; a part file in an
    /// outcome is made and left alone by the one writer that recorded it, and used by the
    /// publishing thread only after every writer has finished (``outcomes`` is read after
    /// `writeBuffered`'s wait).
    private final class WritersProgress: @unchecked Sendable {
        private let lock = NSLock()
        private var taken = 0
        private var stopped = false
        private var results: [Writing]

        init(count: Int) { results = Array(repeating: .notTried, count: count) }

        /// The next position to write, or nil when all are taken or one stopped.
        func next(of positions: [Int]) -> Int? {
            lock.withLock {
                guard !stopped, taken < positions.count else { return nil }
                defer { taken += 1 }
                return positions[taken]
            }
        }

        /// Records `writing` for the file at `position`.
        func record(_ writing: Writing, at position: Int) {
            lock.withLock {
                if writing.stopped { stopped = true }
                results[position] = writing
            }
        }

        var outcomes: [Writing] { lock.withLock { results } }
    }

    /// Writes `buffered` to a file without a name in its folder, or, when it replaces the
    /// sender's part file (or the file system has no `O_TMPFILE`), to that part file emptied
    /// first; gives it `mode` and `modified`. Its whole pages are copied to `pages` on their
    /// way to the disk. A part file whose write fails is removed (its bytes are of no use: a
    /// buffered file is sent again whole), giving back the space it took.
    /// - Returns: the written file, or why this file alone cannot be received.
    /// - Throws: a failure to write (a full disk, an I/O error), which ends the transfer as it
    ///   would have when the bytes arrived.
    private static func write(
        _ buffered: BufferedFile, mode: UInt32, modified: Double, in inbox: Inbox,
        for sender: String, cache: FolderCache, pages: PageAlignedBytes
    ) throws -> Result<PartFile, PeerTransferError> {
        let file: PartFile
        do {
            file =
                buffered.replacesPart
                ? try inbox.openPart(buffered.path, for: sender, cache: cache)
                : try inbox.openUnnamedFile(buffered.path, for: sender, cache: cache)
        } catch let error as PeerTransferError where error.failsOneFileOnly {
            return .failure(error)
        }
        do {
            // A part file may hold an earlier try's bytes, longer than these.
            if file.partName != nil { try file.keepPrefix(0, feeding: SHA256Hasher()) }
            // Its whole pages go straight to the disk (from page-aligned memory), its last
            // partial one through the page cache: the batch's syncfs makes both durable, and the
            // receiver never reads them back (see ``DirectWrites``). A file smaller than a page
            // has none.
            let whole = buffered.data.count - buffered.data.count % DirectWrites.alignment
            try buffered.data.withUnsafeBytes { bytes in
                if whole > 0 && file.writeDirectly() {
                    try pages.withCopy(of: bytes, count: whole) { try file.write($0, at: 0) }
                    try file.write(UnsafeRawBufferPointer(rebasing: bytes[whole...]), at: UInt64(whole))
                } else {
                    try file.write(bytes, at: 0)
                }
            }
        } catch {
            file.discard()
            file.closeFiles()
            throw error
        }
        do {
            try file.finishWriting(mode: mode, modified: modified)
        } catch let error as PeerTransferError {
            file.closeFiles()
            return .failure(error)
        }
        return .success(file)
    }
}
