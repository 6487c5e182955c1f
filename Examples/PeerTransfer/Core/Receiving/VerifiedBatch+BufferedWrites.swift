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
    /// files written already). The buffered files are taken in the batch's order, a group at a
    /// time (see ``write(_:into:in:for:cache:pages:batch:)``), by up to ``writers`` threads (this
    /// one among them), each with a folder cache of its own; once one stops, no file after those
    /// already taken is started.
    ///
    /// Files are named as writing them one after another would name them, or more: when one
    /// stopped (a full disk), the files after the first that stopped are let go, and from that
    /// first one on they are written again one at a time (no groups: a group's later files would
    /// take space before the first one's pages), until one stops. (More: a later file
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
        // As many writers as there are groups to take, at most ``writers``.
        let pages = positions.reduce(0) { $0 + wholePages(at: $1) }
        let groups = max(
            (positions.count + DirectWriteBatch.capacity - 1) / DirectWriteBatch.capacity,
            (pages + Self.groupPages - 1) / Self.groupPages)
        let helpers = min(Self.writers, groups) - 1
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
        write(positions.filter { $0 >= first }, into: again, in: inbox, for: sender, grouped: false)
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

    /// Writes the buffered files at `positions` that `writes` hands this thread, a group at a
    /// time (or one at a time, unless `grouped`) and in order, until none is left or one stopped.
    private func write(
        _ positions: [Int], into writes: WritersProgress, in inbox: Inbox, for sender: String, grouped: Bool = true
    ) {
        let cache = FolderCache()
        let pages = PageAlignedBytes()
        let batch = DirectWriteBatch()
        let most = batch == nil || !grouped ? 1 : DirectWriteBatch.capacity
        while let group = writes.next(of: positions, upTo: most, pages: Self.groupPages, counting: wholePages) {
            write(group, into: writes, in: inbox, for: sender, cache: cache, pages: pages, batch: batch)
        }
    }

    /// The most bytes of whole pages a group's files are taken up to (a file with more is a
    /// group of its own): the memory each writer holds them in.
    static let groupPages = 256 << 10

    /// The bytes of the whole pages of the buffered file at `position` (0 for a written one).
    private func wholePages(at position: Int) -> Int {
        guard case .buffered(let buffered, _, _) = files[position].file else { return 0 }
        return DirectWrites.wholePages(of: buffered.data.count)
    }

    /// Writes the buffered files at `group`, in order: each is opened and written but for its
    /// whole pages, which are copied side by side into `pages` and handed to the disk together
    /// in `batch` (one at a time without it); then each is completed. A write that fails stops
    /// the files after it in the group (they are left untried) and, through `writes`, the other
    /// writers; the files before it are still completed.
    private func write(
        _ group: [Int], into writes: WritersProgress, in inbox: Inbox, for sender: String, cache: FolderCache,
        pages: PageAlignedBytes, batch: DirectWriteBatch?
    ) {
        let memory = pages.reserve(group.reduce(0) { $0 + wholePages(at: $1) })
        var used = 0
        var queued: [(position: Int, file: PartFile, request: Int?)] = []
        for position in group {
            guard case .buffered(let buffered, _, _) = files[position].file else { continue }
            do {
                let file: PartFile
                switch try Self.open(buffered, in: inbox, for: sender, cache: cache) {
                case .failure(let failure):
                    writes.record(.done(.failure(failure)), at: position)
                    continue
                case .success(let opened): file = opened
                }
                file.closeFolder()  // a group holds one descriptor a file
                do {
                    let request = try buffered.data.withUnsafeBytes {
                        try file.writeWhole($0, pagesIn: memory.map { $0 + used }, to: batch)
                    }
                    used += wholePages(at: position)
                    queued.append((position, file, request))
                } catch {
                    file.discard()
                    file.closeFiles()
                    throw error
                }
            } catch {
                writes.record(.stopped(Self.writeFailure(error, buffered)), at: position)
                break
            }
        }
        let outcomes = batch?.run() ?? []
        var stopped = false
        for (position, file, request) in queued {
            guard case .buffered(let buffered, let mode, let modified) = files[position].file else { continue }
            if stopped {
                file.discard()
                file.closeFiles()
                continue
            }
            do {
                if let request {
                    try buffered.data.withUnsafeBytes { try file.finishPages($0, outcome: outcomes[request]) }
                }
            } catch {
                file.discard()
                file.closeFiles()
                writes.record(.stopped(Self.writeFailure(error, buffered)), at: position)
                stopped = true
                continue
            }
            do {
                try file.finishWriting(mode: mode, modified: modified)
                writes.record(.done(.success(file)), at: position)
            } catch {
                // Its mode or time could not be set: this file alone fails.
                file.closeFiles()
                writes.record(.done(.failure(Self.writeFailure(error, buffered))), at: position)
            }
        }
    }

    /// A failure to write `buffered`, as the receiver reports it.
    private static func writeFailure(_ error: any Error, _ buffered: BufferedFile) -> PeerTransferError {
        error as? PeerTransferError ?? .runtime("writing \(Terminal.escape(buffered.path.description)): \(error)")
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

        /// The next positions to write, in order: at most `most`, whose `counting` adds up to at
        /// most `pages` (or one alone that is more); nil when all are taken or one stopped.
        func next(of positions: [Int], upTo most: Int, pages: Int, counting: (Int) -> Int) -> [Int]? {
            lock.withLock {
                guard !stopped, taken < positions.count else { return nil }
                var group = [positions[taken]]
                var total = counting(positions[taken])
                taken += 1
                while group.count < most, taken < positions.count {
                    let more = counting(positions[taken])
                    guard total + more <= pages else { break }
                    group.append(positions[taken])
                    total += more
                    taken += 1
                }
                return group
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

    /// Opens the file `buffered` is written to: one without a name in its folder, or, when it
    /// replaces the sender's part file (or the file system has no `O_TMPFILE`), that part file,
    /// emptied. A part file whose write later fails is removed (its bytes are of no use: a
    /// buffered file is sent again whole), giving back the space it took.
    /// - Returns: the file, or why this file alone cannot be received (an unsafe path, a folder
    ///   that cannot be made, another transfer's part file).
    /// - Throws: any other failure to open it or to empty the part file (an I/O error, a full
    ///   disk), which ends the transfer as a write's would.
    private static func open(
        _ buffered: BufferedFile, in inbox: Inbox, for sender: String, cache: FolderCache
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
        } catch {
            file.discard()
            file.closeFiles()
            throw error
        }
        return .success(file)
    }
}
