import Foundation
import SalutStreams

/// A file being received: its sender's part file `NAME.<24 hex of its key>.peerxfer-part` in
/// its folder, linked under its final name when verified; or, when another sender's part file
/// holds that name (two keys that begin alike), a file without a name (`O_TMPFILE`) in the same
/// folder, linked the same way (and never resumable).
///
/// While it is written it holds two descriptors, its own (a named one with an exclusive
/// `flock`: one writer per part file) and its folder's; once written
/// (``finishWriting(mode:modified:)``) only its own, still locked until it is named: the
/// folder is opened again, from the inbox's root as every path is, to name it.
final class PartFile {
    let path: RelativePath
    private let inbox: Inbox
    private var directory: Int32
    private var fd: Int32

    /// The part file's name in its folder (`NAME.<24 hex of the sender's key>.peerxfer-part`); nil for a file
    /// without a name (another sender's part file holds that name): nothing is ever removed
    /// under a part name for it.
    let partName: String?
    /// The key of the sender whose file this is.
    let sender: String
    /// Set when ``publish(cache:)`` took this file's name from an untrusted sender's file: the
    /// name, and the one that file has now (both in this file's folder).
    private(set) var movedAside: (name: String, to: String)?

    init(inbox: Inbox, directory: Int32, fd: Int32, path: RelativePath, partName: String?, sender: String) {
        self.inbox = inbox
        self.sender = sender
        self.directory = directory
        self.fd = fd
        self.path = path
        self.partName = partName
    }

    deinit { closeFiles() }

    /// Closes whatever descriptor is still open.
    func closeFiles() {
        if fd >= 0 { close(fd); fd = -1 }
        if directory >= 0 { close(directory); directory = -1 }
    }

    /// The file's folder: the one still open, or opened again from the inbox's root.
    private func withFolder<T>(cache: FolderCache? = nil, _ body: (Int32) throws -> T) throws -> T {
        if directory >= 0 { return try body(directory) }
        guard let folder = try inbox.openDirectory(path.parent, create: false, cache: cache) else {
            throw PeerTransferError.runtime(
                "the folder of \(Terminal.escape(path.description)) went away before it got its name")
        }
        defer { close(folder) }
        return try body(folder)
    }

    /// Cuts the file to `offset` bytes and feeds those bytes to `hasher`.
    /// - Throws: ``PeerTransferError/fileFailed(_:)`` when the file is shorter than `offset`
    ///   (that file alone fails); ``PeerTransferError/runtime(_:)`` when it cannot be read.
    func keepPrefix(_ offset: UInt64, feeding hasher: SHA256Hasher) throws {
        var info = stat()
        guard fstat(fd, &info) == 0 else { throw ioError("fstat") }
        // Cutting a shorter file "back" would lengthen it with zeros, which would then be
        // taken for the sender's bytes.
        guard UInt64(info.st_size) >= offset else {
            throw PeerTransferError.fileFailed(
                "the part file of \(Terminal.escape(path.description)) holds \(info.st_size) bytes, fewer than the \(offset) to resume after (it changed since the answer); send it again"
            )
        }
        if UInt64(info.st_size) > offset {
            guard ftruncate(fd, off_t(offset)) == 0 else { throw ioError("ftruncate") }
        }
        try FileHashing.feed(fd, length: offset, to: hasher)
    }

    /// Whether the file's writes go straight to the disk (see ``writeDirectly()``).
    private(set) var writesDirectly = false

    /// Sends this file's writes straight to the disk, past the page cache (see
    /// ``DirectWrites``), for as long as they are aligned; the first that is not, and all after
    /// it, go through the page cache. Nothing changes on a file system direct writes are not
    /// used on, or that refuses them. Call it after any reads through this file
    /// (``keepPrefix(_:feeding:)``): while it holds, reads need aligned memory too.
    /// - Returns: whether writes now go directly.
    @discardableResult
    func writeDirectly() -> Bool {
        writesDirectly || (fd >= 0 && DirectWrites.isSuitable(fd) && startWritingDirectly())
    }

    /// ``writeDirectly()`` on a file system already known to take direct writes.
    private func startWritingDirectly() -> Bool {
        if !writesDirectly && fd >= 0 && DirectWrites.set(true, on: fd) { writesDirectly = true }
        return writesDirectly
    }

    /// Closes the folder's descriptor while the file is written: what needs the folder later
    /// (``publish(cache:)``, ``discard()``) opens it again from the inbox's root. A writer holding
    /// a group of files open so holds one descriptor for each, not two.
    func closeFolder() {
        if directory >= 0 { close(directory); directory = -1 }
    }

    /// Writes go through the page cache from now on.
    /// - Throws: ``PeerTransferError/runtime(_:)`` when `O_DIRECT` cannot be cleared.
    private func stopWritingDirectly() throws {
        guard writesDirectly else { return }
        guard DirectWrites.set(false, on: fd) else { throw ioError("fcntl") }
        writesDirectly = false
    }

    /// Writes all of `data` at `offset` (straight to the disk while ``writesDirectly`` and
    /// aligned), and starts writing back to disk what has piled up in the page cache (see
    /// ``startWriteBack()``).
    /// - Throws: ``PeerTransferError/noSpace(_:)`` when the disk is full, otherwise
    ///   ``PeerTransferError/runtime(_:)``.
    func write(_ data: Data, at offset: UInt64) throws {
        try data.withUnsafeBytes { try write($0, at: offset) }
    }

    /// Writes all of `raw` at `offset`, as ``write(_:at:)-(Data,_)`` does.
    /// - Throws: ``PeerTransferError/noSpace(_:)`` when the disk is full, otherwise
    ///   ``PeerTransferError/runtime(_:)``.
    func write(_ raw: UnsafeRawBufferPointer, at offset: UInt64) throws {
        var done = 0
        while done < raw.count {
            let start = raw.baseAddress! + done, at = off_t(offset) + off_t(done)
            var count = raw.count - done
            if writesDirectly {
                let direct = DirectWrites.directPart(of: count, at: start, offset: at)
                if direct > 0 { count = direct } else { try stopWritingDirectly() }
            }
            let n = pwrite(fd, start, count, at)
            if n < 0 {
                if errno == EINTR { continue }
                // A direct write the file system will not take: through the page cache.
                if errno == EINVAL && writesDirectly { try stopWritingDirectly(); continue }
                throw writeError("pwrite")
            }
            done += n
        }
        written = max(written, offset + UInt64(raw.count))
        if writesDirectly {
            writeBackStart = written  // nothing of it waits in the page cache
        } else if written - writeBackStart >= Self.writeBackStep {
            startWriteBack()
        }
    }

    /// Writes a whole small file's bytes, `raw`, from offset 0, leaving its whole pages to
    /// `batch` when there is one and direct writes are used: the file is given its full size
    /// and its last partial page is written now, through the page cache, so that the pages'
    /// write does not make the file longer and is queued rather than waited for (see
    /// ``DirectWriteBatch``); the pages are copied to `memory` (page-aligned, with room for
    /// them) and added to `batch`. Call ``finishPages(_:outcome:)`` with that write's outcome.
    /// - Returns: the pages' position in `batch`, or nil when every byte is written already (no
    ///   whole page, no batch, or direct writes not used on this file).
    /// - Throws: as ``write(_:at:)-(Data,_)`` does.
    func writeWhole(
        _ raw: UnsafeRawBufferPointer, pagesIn memory: UnsafeMutableRawPointer?, to batch: DirectWriteBatch?
    ) throws -> Int? {
        let whole = DirectWrites.wholePages(of: raw.count)
        guard whole > 0, DirectWrites.isSuitable(fd) else {
            try write(raw, at: 0)
            return nil
        }
        precondition(memory != nil, "no page-aligned memory for a file's whole pages")
        let queued = batch?.hasRoom == true
        // Its size first: ext4 waits for a direct write that reaches past the size on disk,
        // which a write through the page cache moves only once that write reaches the disk.
        if queued {
            guard ftruncate(fd, off_t(raw.count)) == 0 else { throw writeError("ftruncate") }
        }
        if whole < raw.count {
            try write(UnsafeRawBufferPointer(rebasing: raw[whole...]), at: UInt64(whole))
        }
        let pages = UnsafeRawBufferPointer(rebasing: raw[..<whole])
        guard let memory, startWritingDirectly() else {
            try write(pages, at: 0)
            return nil
        }
        memory.copyMemory(from: pages.baseAddress!, byteCount: whole)
        guard queued, let batch else {
            try write(UnsafeRawBufferPointer(start: memory, count: whole), at: 0)
            return nil
        }
        written = max(written, UInt64(raw.count))
        writeBackStart = written  // what waits in the page cache, its last partial page, goes with the batch's syncfs
        return batch.add(fd, from: memory, count: whole, at: 0)
    }

    /// Completes the write of a small file's whole pages that ``writeWhole(_:pagesIn:to:)``
    /// left to a batch, given its outcome there (the bytes written, or an error number negated):
    /// what it did not write is written again from `raw` through the page cache, which reports a
    /// full disk or an I/O error as ``write(_:at:)-(Data,_)`` does.
    /// - Throws: ``PeerTransferError/noSpace(_:)`` when the disk is full, otherwise
    ///   ``PeerTransferError/runtime(_:)``.
    func finishPages(_ raw: UnsafeRawBufferPointer, outcome: Int) throws {
        let whole = DirectWrites.wholePages(of: raw.count)
        let done = min(max(outcome, 0), whole)
        guard done < whole else { return }
        try stopWritingDirectly()
        try write(UnsafeRawBufferPointer(rebasing: raw[done..<whole]), at: UInt64(done))
    }

    /// Makes the bytes written so far durable (fdatasync(2)). A large file calls it while it is
    /// still being received, from a queue of its own beside the writes (see ``FileSink``): the
    /// disk then works all along, and the batch's syncfs(2) before naming finds little left
    /// (docs/benchmarks.md has the figures). With direct writes (see ``writeDirectly()``) it is
    /// what asks the disk to make them durable as they go.
    /// - Throws: ``PeerTransferError/noSpace(_:)`` when the disk is full, otherwise
    ///   ``PeerTransferError/runtime(_:)`` (an I/O error).
    func flushData() throws {
        while fdatasync(fd) != 0 {
            if errno == EINTR { continue }
            throw writeError("fdatasync")
        }
    }

    /// The error for a failed write or flush: a full disk, or the call's own error.
    private func writeError(_ call: String) -> PeerTransferError {
        if errno == ENOSPC || errno == EDQUOT {
            return PeerTransferError.noSpace("the inbox's disk is full (writing \(Terminal.escape(path.description)))")
        }
        return ioError(call)
    }

    /// Bytes written since the last write-back was started, at most, before the next is.
    static let writeBackStep: UInt64 = 8 << 20
    private var written: UInt64 = 0
    private var writeBackStart: UInt64 = 0

    /// Asks the kernel to start writing the file's new bytes to disk now, without waiting
    /// (sync_file_range(2) with SYNC_FILE_RANGE_WRITE): the disk works while the network does,
    /// and the batch's syncfs(2) before naming has little left to wait for. Advisory: where
    /// the call is missing or fails, that syncfs still makes the data durable.
    func startWriteBack() {
        guard written > writeBackStart, let syncFileRange = Self.syncFileRange else { return }
        _ = syncFileRange(fd, off_t(writeBackStart), off_t(written - writeBackStart), 2 /* SYNC_FILE_RANGE_WRITE */)
        writeBackStart = written
    }

    /// glibc's sync_file_range(2), looked up at run time like syncfs(2).
    private static let syncFileRange: (@convention(c) (Int32, off_t, off_t, UInt32) -> Int32)? = {
        guard let symbol = dlsym(nil, "sync_file_range") else { return nil }
        return unsafeBitCast(symbol, to: (@convention(c) (Int32, off_t, off_t, UInt32) -> Int32).self)
    }()

    /// Applies `mode` and `modified` and closes the data descriptor: the file is complete and
    /// verified, and waits for ``publish()`` (after its data is on disk, see ``Inbox/syncData()``).
    func finishWriting(mode: UInt32, modified: Double) throws {
        // The tail of a large file goes to disk now; small files wait for the batch's syncfs,
        // which writes them together (one request each would cost more than it overlaps).
        if written >= Self.writeBackStep { startWriteBack() }
        // The sender's permission bits, but never writable by others than the owner (as a
        // umask of 022 would make them): a file from the network is not for everyone to change.
        // Always readable by its owner (this user): the inbox must be able to read what it
        // holds, to offer it as `existing` or to judge whose it is.
        guard fchmod(fd, mode_t(mode & 0o755) | 0o400) == 0 else { throw ioError("fchmod") }
        // A time from the network: applied only when it is one a file system can hold (a
        // bogus one, NaN or 1e300, is left out rather than trapping in the conversion).
        if modified.isFinite, abs(modified) < 1e11 {
            let seconds = modified.rounded(.down)
            var times = [
                timespec(tv_sec: time(nil), tv_nsec: 0),
                timespec(tv_sec: Int(seconds), tv_nsec: Int((modified - seconds) * 1e9)),
            ]
            guard futimens(fd, &times) == 0 else { throw ioError("futimens") }
        }
        // The folder's descriptor goes; the file's own stays open, holding the lock that keeps
        // other transfers from reopening (and truncating) the verified bytes before they are named.
        if directory >= 0 { close(directory); directory = -1 }
    }

    /// Numbered names tried before random ones (`name (3f09a1c2).ext`): a peer that took
    /// every numbered name must not keep a file from arriving.
    static let numberedNames = 1_000

    /// Gives the verified file its final name: the offered one, or `name (1).ext`,
    /// `name (2).ext`… when that is taken, up to ``numberedNames``, then a name with a random
    /// number (never replacing a file). For a trusted sender, a name held by a file that an
    /// untrusted sender delivered (or a folder holding only such files) is taken back: it moves to
    /// `name (from <8 hex of its sender's key>).ext` (see ``takeName(_:in:)``), so no one can
    /// push a trusted sender's file to another name by sending one of that name first. Call
    /// once its data is on disk; the caller syncs the folder (see ``VerifiedBatch``).
    /// - Returns: the path it was stored under.
    func publish(cache: FolderCache? = nil) throws -> String {
        var own = stat()
        guard fd >= 0, fstat(fd, &own) == 0 else { throw ioError("fstat") }
        // Asked only when a name is taken, at most once a file: the answer is a read of the
        // trust file, and most files find their name free.
        lazy var takesNamesBack = inbox.trusts(sender)
        return try withFolder(cache: cache) { folder in
            /// The file has its name: the part name goes, if it is still this file's.
            func named(_ candidate: String) throws -> String {
                if let partName, ownsName(partName, in: folder, own) {
                    guard unlinkat(folder, partName, 0) == 0 else { throw ioError("unlinkat") }
                }
                inbox.forgetPart(of: sender, path)
                return (path.parent + [candidate]).joined(separator: "/")
            }
            for attempt in 0..<(Self.numberedNames + 64) {
                let candidate = Self.candidateName(path.name, attempt: attempt)
                // link(2) refuses to replace an existing name: no file is ever overwritten. The
                // name is linked to the open, verified file itself (through /proc), not to
                // whatever the part file's name points at by now: a file renamed over it
                // after verification is never published in its place.
                // A file that got a name of its own in a try to take a name back (see
                // `takeName`) moves from it instead.
                let linked =
                    swapName.map { Self.renameat2?(folder, $0, folder, candidate, Self.renameNoReplace) == 0 }
                    ?? (linkat(AT_FDCWD, "/proc/self/fd/\(fd)", folder, candidate, AT_SYMLINK_FOLLOW) == 0)
                if linked {
                    swapName = nil
                    return try named(candidate)
                }
                if errno == ENOENT {
                    // The verified file has no name left: someone replaced or removed its part
                    // file. Linux links no file without a name; nothing is published for it.
                    throw PeerTransferError.unsafePath(
                        "the part file of \(Terminal.escape(path.description)) was replaced or removed after it was verified; nothing is published in its place"
                    )
                }
                guard errno == EEXIST else { throw ioError("linkat of the verified file") }
                // A name an untrusted sender's file took first is not lost to a trusted
                // sender's: that file moves aside and this one gets the name.
                if takesNamesBack, takeName(candidate, in: folder) { return try named(candidate) }
            }
            if let swapName { _ = unlinkat(folder, swapName, 0) }  // no name for it anywhere: no hidden one either
            throw PeerTransferError.runtime(
                "no free name for \(Terminal.escape(path.description)) after \(Self.numberedNames) numbered and 64 random tries"
            )
        }
    }

    /// The hidden name (`.<random>.peerxfer-swap`) this file got in a try to take a name back
    /// that did not succeed: kept, for a file without a name (`O_TMPFILE`) cannot be linked again
    /// once its first name is gone, and the next names are tried by renaming from it.
    private var swapName: String?

    /// Gives this (verified) file the name `name` in `folder`, which a file an untrusted
    /// sender delivered holds now, and moves that file aside to
    /// `NAME (from <8 hex>).EXT`: first an atomic exchange of names (renameat2's
    /// `RENAME_EXCHANGE`, so the name never points at nothing), then a rename that replaces
    /// nothing. Nothing is ever removed. False, with the names as they were, when the name holds
    /// anything else (a trusted sender's file, one of no recorded sender such as the person's
    /// own, a symlink), when the stranger's file cannot be moved aside, or when the file
    /// system cannot exchange names; the caller then tries the next name (this file may have
    /// kept a hidden name by then: see `swapName`).
    private func takeName(_ name: String, in folder: Int32) -> Bool {
        guard let renameat2 = Self.renameat2 else { return false }
        // O_PATH: a file whose sender left it unreadable (mode 0) is judged all the same.
        let held = openat(folder, name, Self.pathOnly | O_NOFOLLOW | O_CLOEXEC)
        guard held >= 0 else { return false }
        defer { close(held) }
        var heldInfo = stat()
        guard fstat(held, &heldInfo) == 0,
            let deliverer = Self.deliverer(ofPath: "/proc/self/fd/\(held)"), isStranger(deliverer)
        else { return false }
        switch heldInfo.st_mode & S_IFMT {
        case S_IFREG:
            break
        case S_IFDIR:
            // A stranger's folder moves only when everything in it is strangers' too: trusted
            // senders' files (or part files being written) may be in it by now, and must not move.
            guard strangersOnly(in: folder, name, heldInfo) else { return false }
        default:
            return false
        }
        // This file under a name of its own, to exchange with the held one; kept should the
        // name not be taken (see `swapName`).
        if swapName == nil {
            let swap = ".\(String(UInt64.random(in: 0...UInt64.max), radix: 16)).peerxfer-swap"
            guard linkat(AT_FDCWD, "/proc/self/fd/\(fd)", folder, swap, AT_SYMLINK_FOLLOW) == 0 else { return false }
            swapName = swap
        }
        guard let swap = swapName, renameat2(folder, swap, folder, name, Self.renameExchange) == 0 else { return false }
        /// Puts the names back as they were: the held one under `name`, this file under `swap`.
        func undo() -> Bool {
            if renameat2(folder, swap, folder, name, Self.renameExchange) != 0 {
                // Cannot happen short of the folder going away; should it, this file keeps the
                // name and the held one stays under the hidden name, said in the log.
                movedAside = (name, swap)
                swapName = nil
                return true
            }
            return false
        }
        // `swap` names what `name` held at the moment of the exchange: the one judged above,
        // unless another was put there meanwhile (then the exchange is undone).
        var swapped = stat()
        guard fstatat(folder, swap, &swapped, AT_SYMLINK_NOFOLLOW) == 0,
            swapped.st_dev == heldInfo.st_dev, swapped.st_ino == heldInfo.st_ino
        else { return undo() }
        // A folder judged before the exchange may have got a trusted file since: judged again,
        // now that no new path leads into it under its old name.
        if (heldInfo.st_mode & S_IFMT) == S_IFDIR, !strangersOnly(in: folder, swap, heldInfo) { return undo() }
        for attempt in 0..<(Self.numberedNames + 64) {
            let aside = Self.candidateName(name, marked: Self.asideMark(of: deliverer), attempt: attempt)
            if renameat2(folder, swap, folder, aside, Self.renameNoReplace) == 0 {
                movedAside = (name, aside)
                swapName = nil
                return true
            }
            guard errno == EEXIST else { break }
        }
        // Nowhere to move it: everything goes back as it was.
        return undo()
    }

    /// True for a key recorded on a file that is a sender's, not this file's sender and not
    /// trusted here (see ``Inbox/isStranger(_:to:)``).
    private func isStranger(_ key: String) -> Bool { inbox.isStranger(key, to: sender) }

    /// The name tried at `attempt` for `name`: the name itself, then `name (1).ext`… up to
    /// ``numberedNames``, then a random number; with `mark` (a file moved aside),
    /// `name (mark).ext`, `name (mark, 1).ext`… the same way.
    static func candidateName(_ name: String, marked mark: String? = nil, attempt: Int) -> String {
        let number =
            attempt < numberedNames ? String(attempt) : String(UInt32.random(in: 0x1000_0000...UInt32.max), radix: 16)
        switch (mark, attempt) {
        case (nil, 0): return name
        case (nil, _): return labelled(name, number)
        case (let mark?, 0): return labelled(name, mark)
        case (let mark?, _): return labelled(name, "\(mark), \(number)")
        }
    }

    /// What a file moved aside for a trusted sender's is marked with: `from <8 hex of its
    /// sender's key>`.
    static func asideMark(of deliverer: String) -> String { "from " + String(deliverer.prefix(8)) }

    /// How many entries of a stranger's folder are looked at, at most, before it is left where
    /// it is (the trusted file is then numbered beside it).
    static let folderEntriesLookedAt = 1_000

    /// True when the folder `name` in `folder` is still the one `judged` describes and holds
    /// only strangers' files and folders (see `onlyStrangers`).
    private func strangersOnly(in folder: Int32, _ name: String, _ judged: stat) -> Bool {
        let folderFD = openat(folder, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        guard folderFD >= 0 else { return false }
        var info = stat()
        guard fstat(folderFD, &info) == 0, info.st_dev == judged.st_dev, info.st_ino == judged.st_ino else {
            close(folderFD)
            return false
        }
        var budget = Self.folderEntriesLookedAt
        return onlyStrangers(in: folderFD, budget: &budget)
    }

    /// True when every entry below the folder `fd` (which it closes) is a file or folder an
    /// untrusted sender made, within `budget` entries; false for anything else (a trusted
    /// sender's file, the person's own, a symlink, a device, too many entries).
    private func onlyStrangers(in fd: Int32, budget: inout Int) -> Bool {
        guard let listing = fdopendir(fd) else {
            close(fd)
            return false
        }
        defer { closedir(listing) }
        let descriptor = dirfd(listing)
        while let entry = readdir(listing) {
            // A name that is not UTF-8 could not be named again by its text: such a folder stays.
            let raw = withUnsafeBytes(of: entry.pointee.d_name) { Array($0.prefix { $0 != 0 }) }
            guard let name = String(validating: raw, as: UTF8.self) else { return false }
            if name == "." || name == ".." { continue }
            budget -= 1
            let named = openat(descriptor, name, Self.pathOnly | O_NOFOLLOW | O_CLOEXEC)
            guard budget >= 0, named >= 0 else {
                if named >= 0 { close(named) }
                return false
            }
            var info = stat()
            let judged =
                fstat(named, &info) == 0
                && Self.deliverer(ofPath: "/proc/self/fd/\(named)").map(isStranger) == true
            close(named)
            guard judged else { return false }
            switch info.st_mode & S_IFMT {
            case S_IFREG:
                continue
            case S_IFDIR:
                let child = openat(descriptor, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
                guard child >= 0, onlyStrangers(in: child, budget: &budget) else { return false }
            default:
                return false
            }
        }
        return true
    }

    /// glibc's renameat2(2), looked up at run time (Swift's Glibc module leaves out
    /// _GNU_SOURCE declarations); nil in a libc without it.
    static let renameat2:
        (@convention(c) (Int32, UnsafePointer<CChar>?, Int32, UnsafePointer<CChar>?, UInt32) -> Int32)? = {
            guard let symbol = dlsym(nil, "renameat2") else { return nil }
            return unsafeBitCast(
                symbol,
                to: (@convention(c) (Int32, UnsafePointer<CChar>?, Int32, UnsafePointer<CChar>?, UInt32) -> Int32).self)
        }()
    /// `O_PATH`, left out by Swift's Glibc module (the same bit on every architecture Swift
    /// runs on, as `O_TMPFILE`'s): a descriptor that names a file without opening it for I/O.
    static let pathOnly: Int32 = 0o10000000

    /// renameat2's `RENAME_NOREPLACE`: fail with EEXIST rather than replace the target.
    static let renameNoReplace: UInt32 = 1
    /// renameat2's `RENAME_EXCHANGE`: swap the two names atomically.
    private static let renameExchange: UInt32 = 2

    /// True unless the file system of `fd` refuses user extended attributes (ENOTSUP).
    static func keepsAttributes(_ fd: Int32) -> Bool {
        guard let getAttribute else { return false }
        var byte: UInt8 = 0
        return getAttribute(fd, delivererAttribute, &byte, 1) >= 0 || errno != ENOTSUP
    }

    /// The extended attribute that holds the key of the sender that delivered a file.
    static let delivererAttribute = "user.peerxfer.sender"

    /// The key of the sender that delivered the open file `fd`, if recorded.
    static func deliverer(of fd: Int32) -> String? {
        guard let getAttribute else { return nil }
        var bytes = [UInt8](repeating: 0, count: 128)
        let count = bytes.withUnsafeMutableBytes { getAttribute(fd, delivererAttribute, $0.baseAddress, $0.count) }
        guard count > 0 else { return nil }
        return String(decoding: bytes[0..<count], as: UTF8.self)
    }

    /// The key of the sender recorded on the file or folder at `path` (followed: a
    /// `/proc/self/fd/N` of an `O_PATH` descriptor reads its file's attribute), if any.
    static func deliverer(ofPath path: String) -> String? {
        guard let getPathAttribute else { return nil }
        var bytes = [UInt8](repeating: 0, count: 128)
        let count = bytes.withUnsafeMutableBytes {
            getPathAttribute(path, delivererAttribute, $0.baseAddress, $0.count)
        }
        guard count > 0 else { return nil }
        return String(decoding: bytes[0..<count], as: UTF8.self)
    }

    /// Records `sender` as the maker of the file or folder `fd` (best effort, as
    /// ``recordSender(_:new:)``).
    static func record(_ sender: String, on fd: Int32) {
        guard let setAttribute else { return }
        _ = sender.utf8CString.withUnsafeBufferPointer { key in
            setAttribute(fd, delivererAttribute, key.baseAddress, key.count - 1, 0)
        }
    }

    /// glibc's getxattr(2), looked up at run time (as the two below).
    private static let getPathAttribute:
        (@convention(c) (UnsafePointer<CChar>?, UnsafePointer<CChar>?, UnsafeMutableRawPointer?, Int) -> Int)? = {
            guard let symbol = dlsym(nil, "getxattr") else { return nil }
            return unsafeBitCast(
                symbol,
                to: (@convention(c) (UnsafePointer<CChar>?, UnsafePointer<CChar>?, UnsafeMutableRawPointer?, Int) -> Int)
                    .self)
        }()

    /// glibc's fsetxattr(2) and fgetxattr(2), looked up at run time (Swift's Glibc module
    /// leaves out sys/xattr.h).
    private static let setAttribute:
        (@convention(c) (Int32, UnsafePointer<CChar>?, UnsafeRawPointer?, Int, Int32) -> Int32)? = {
            guard let symbol = dlsym(nil, "fsetxattr") else { return nil }
            return unsafeBitCast(
                symbol, to: (@convention(c) (Int32, UnsafePointer<CChar>?, UnsafeRawPointer?, Int, Int32) -> Int32).self
            )
        }()
    private static let getAttribute:
        (@convention(c) (Int32, UnsafePointer<CChar>?, UnsafeMutableRawPointer?, Int) -> Int)? = {
            guard let symbol = dlsym(nil, "fgetxattr") else { return nil }
            return unsafeBitCast(
                symbol, to: (@convention(c) (Int32, UnsafePointer<CChar>?, UnsafeMutableRawPointer?, Int) -> Int).self)
        }()

    /// Removes the part file (after a failed verification or a withdrawal), if the part name is
    /// still this file's: never another sender's part file, nor whatever was renamed over it.
    func discard() {
        var own = stat()
        guard fd >= 0, fstat(fd, &own) == 0 else { return }
        // Best effort: a part file left behind is verified chunk by chunk on the next offer.
        guard let partName else { return }
        _ = try? withFolder { folder in
            if ownsName(partName, in: folder, own) { _ = unlinkat(folder, partName, 0) }
        }
        inbox.forgetPart(of: sender, path)
    }

    /// True when `name` in `folder` is this very file (`own` is its fstat): a named part file
    /// whose name was not replaced meanwhile.
    private func ownsName(_ name: String, in folder: Int32, _ own: stat) -> Bool {
        var current = stat()
        return fstatat(folder, name, &current, AT_SYMLINK_NOFOLLOW) == 0
            && current.st_dev == own.st_dev && current.st_ino == own.st_ino
    }

    /// Records `sender` as the file's writer (and, once it is named, its deliverer: see
    /// ``Inbox/digest(ofFile:size:deliveredBy:)``). Best effort: where the file system keeps no
    /// extended attributes, part files are not told apart by sender and delivered files are
    /// never offered as `existing`. A file made just now (`new`) is not asked first what it
    /// records.
    func recordSender(_ sender: String, new: Bool = false) {
        guard new || Self.deliverer(of: fd) != sender else { return }
        Self.record(sender, on: fd)
    }

    /// A part file left this long without a write is abandoned: any sender's transfer may take
    /// it over (its own sender, back after that long, starts over).
    static let abandonedAfter: TimeInterval = 7 * 24 * 3600

    /// True when the transfer from `sender` may resume (or take over) the part file `fd`
    /// (`info` is its fstat, when known): it is empty, or it records no writer (made before
    /// writers were recorded, or on a file system without extended attributes), or `sender`
    /// wrote it, or it was abandoned (no write for ``abandonedAfter``).
    static func mayResume(_ fd: Int32, sender: String, info: stat? = nil) -> Bool {
        if let info {
            if info.st_size == 0 { return true }
            if Double(time(nil) - info.st_mtim.tv_sec) > abandonedAfter { return true }
        }
        guard let writer = deliverer(of: fd) else { return true }
        return writer == sender
    }

    /// `O_TMPFILE` (which includes `O_DIRECTORY`), left out by Swift's Glibc module: its own
    /// bit is the same on every architecture Swift runs on (only Alpha, PA-RISC and SPARC differ).
    static let unnamedFileFlags: Int32 = 0o20000000 | O_DIRECTORY

    /// `report (2).pdf` for `report.pdf`; `archive (2).tar` keeps only the last extension. The
    /// result fits in a file name (255 bytes), cut at a character boundary; an extension too
    /// long to keep whole is cut like the rest of the name.
    static func numbered(_ name: String, _ number: Int) -> String {
        labelled(name, "\(number)")
    }

    /// `name (label).ext`, within the length limit (as ``numbered(_:_:)``).
    static func labelled(_ name: String, _ label: String) -> String {
        let suffix = " (\(label))"
        let limit = TransferLimits.maximumNameBytes
        if let dot = name.lastIndex(of: "."), dot != name.startIndex {
            let ext = String(name[dot...])
            let room = limit - suffix.utf8.count - ext.utf8.count
            if room >= 1 { return leading(String(name[..<dot]), bytes: room) + suffix + ext }
        }
        return leading(name, bytes: limit - suffix.utf8.count) + suffix
    }

    /// The longest start of `text` that fits in `bytes` bytes of UTF-8, whole characters only.
    private static func leading(_ text: String, bytes: Int) -> String {
        var kept = "", used = 0
        for character in text {
            let size = character.utf8.count
            guard used + size <= bytes else { break }
            kept.append(character)
            used += size
        }
        return kept
    }

    private func ioError(_ call: String) -> PeerTransferError {
        PeerTransferError.runtime(
            "\(call) on \(Terminal.escape(path.description)): \(String(cString: strerror(errno)))")
    }
}
