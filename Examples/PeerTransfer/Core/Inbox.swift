import Foundation
import SalutStreams
import Synchronization

/// The folder received files land in. Every operation walks from the inbox's own descriptor
/// with `openat(…, O_NOFOLLOW)`, so no path, and no symlink planted inside the inbox, can lead
/// a write outside it.
final class Inbox: @unchecked Sendable {
    // @unchecked: `root` is set once and only read; the descriptor calls are thread-safe;
    // `promised` and `receiving` are Mutexes, `makesUnnamedFiles` an Atomic; `digests` is
    // Sendable (its own Mutex).
    let path: String
    private let root: Int32
    /// Bytes that accepted transfers still have to write: free space is promised to one
    /// transfer at a time, so that two offers that each fit do not together fill the disk.
    private let promised = Mutex<UInt64>(0)
    /// Digests of delivered files, for `existing` offers (see ``digest(ofFile:size:deliveredBy:)``).
    let digests = DigestCache()
    /// Chunk digests of part files, for `have` answers: an offer sent again and again (by a
    /// peer that then hangs up) costs one hashing of its part file, not one each.
    let partDigests = DigestCache(capacity: 1_024)
    /// The small files being received, each as its sender's key and its path (see
    /// ``claim(_:for:)``).
    private let receiving = Mutex<Set<[UInt8]>>([])
    /// False once the file system refused `O_TMPFILE`: small files go to part files from then on.
    private let makesUnnamedFiles = Atomic<Bool>(true)

    /// Opens the inbox folder, creating it (mode 0700) if it does not exist.
    /// - Throws: ``PeerTransferError/runtime(_:)`` when it cannot be created or opened.
    init(path: String) throws {
        self.path = path
        if mkdir(path, 0o700) != 0 && errno != EEXIST {
            throw PeerTransferError.runtime("cannot create the inbox \(path): \(String(cString: strerror(errno)))")
        }
        root = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard root >= 0 else {
            throw PeerTransferError.runtime("cannot open the inbox \(path): \(String(cString: strerror(errno)))")
        }
        // A daemon that cannot write where files land would publish itself and then fail
        // every transfer: refused at the start instead.
        guard faccessat(root, ".", W_OK | X_OK, AT_EACCESS) == 0 else {
            let reason = String(cString: strerror(errno))
            throw PeerTransferError.usage("cannot write to the inbox \(Terminal.escape(path)) (\(reason)); give --inbox a folder this user can write")
        }
    }

    deinit { close(root) }

    /// False when the inbox's file system keeps no user extended attributes: then part files
    /// are not told apart by sender (any sender may resume or discard another's) and no file is
    /// ever offered as `existing`.
    var recordsSenders: Bool { PartFile.keepsAttributes(root) }

    /// Writes everything written to the inbox's file system to disk (syncfs(2)): one call makes
    /// a whole batch of received files durable before they get their names.
    func syncData() throws {
        guard let syncfs = Self.syncfs else {
            sync()   // no syncfs in this libc: the whole system, which includes the inbox
            return
        }
        guard syncfs(root) == 0 else {
            throw PeerTransferError.runtime("syncfs on the inbox \(path): \(String(cString: strerror(errno)))")
        }
    }

    /// glibc's syncfs(2), looked up at run time (Swift's Glibc module leaves out _GNU_SOURCE
    /// declarations).
    private static let syncfs: (@convention(c) (Int32) -> Int32)? = {
        guard let symbol = dlsym(nil, "syncfs") else { return nil }
        return unsafeBitCast(symbol, to: (@convention(c) (Int32) -> Int32).self)
    }()

    /// Bytes free for an unprivileged writer on the inbox's file system.
    func freeBytes() throws -> UInt64 {
        var info = statvfs()
        guard fstatvfs(root, &info) == 0 else {
            throw PeerTransferError.runtime("cannot read the free space of \(path): \(String(cString: strerror(errno)))")
        }
        return UInt64(info.f_bavail) * UInt64(info.f_frsize)
    }

    /// Promises `bytes` of the free space to a transfer, if that much is free beyond what
    /// transfers under way were promised; give it back with ``keptPromise(_:)`` as the bytes
    /// are written and for what is left when the transfer ends.
    /// - Throws: ``PeerTransferError/noSpace(_:)`` when it does not fit, saying how much is
    ///   needed and available for it (not what other transfers were promised);
    ///   ``PeerTransferError/runtime(_:)`` when the free space cannot be read.
    func promise(_ bytes: UInt64) throws {
        try promised.withLock { promised in
            let free = try freeBytes()
            let available = free - min(free, promised)
            guard bytes <= available else {
                // What other transfers were promised is this receiver's business, not the peer's.
                throw PeerTransferError.noSpace("the receiver has \(available) bytes free for this transfer, which needs \(bytes)")
            }
            promised += bytes
        }
    }

    /// Takes back `bytes` of a promise: written (the free space now counts them) or no longer
    /// needed.
    func keptPromise(_ bytes: UInt64) {
        promised.withLock { $0 -= min($0, bytes) }
    }

    /// A descriptor for the folder `components` below the inbox (the caller closes it),
    /// created on the way when `create` is true; nil when it does not exist and `create` is false.
    /// With a `cache` (one per task), the folder it holds is reused when it is the one asked
    /// for and its path still leads to it from the root (see `leadsTo`), and the folder found
    /// is kept there for the next call.
    /// - Throws: ``PeerTransferError/unsafePath(_:)`` when a component is a symlink or not a
    ///   folder; ``PeerTransferError/fileFailed(_:)`` when one cannot be opened or made for lack
    ///   of permission (the files below it fail alone); ``PeerTransferError/noSpace(_:)``;
    ///   ``PeerTransferError/runtime(_:)`` for other failures.
    func openDirectory(_ components: [String], create: Bool, mode: mode_t = 0o755,
                       cache: FolderCache? = nil) throws -> Int32? {
        if let cache, !components.isEmpty {
            switch cache.lookUp(components, creating: create) {
            case .open(let fd, let device, let inode):
                // Still the folder the path leads to from the root (not removed, moved or
                // replaced since it was walked to): then it is used as it is.
                if leadsTo(components, device: device, inode: inode) { return fd }
                close(fd)
                cache.forget()
            case .missing:
                return nil
            case .unknown:
                break
            }
            let fd = try openDirectory(components, create: create, mode: mode)
            cache.remember(components, fd)
            return fd
        }
        var current = dup(root)
        guard current >= 0 else { throw PeerTransferError.runtime("dup: \(String(cString: strerror(errno)))") }
        for (depth, component) in components.enumerated() {
            var next = openat(current, component, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
            if next < 0 && errno == ENOENT && create {
                if mkdirat(current, component, mode) != 0 && errno != EEXIST {
                    let failure = errno
                    let reason = String(cString: strerror(failure))
                    close(current)
                    let shown = Self.shown(components.prefix(depth + 1))
                    switch failure {
                    case ENOSPC, EDQUOT: throw PeerTransferError.noSpace("no space for the folder \(shown)")
                    case ENOTDIR: throw PeerTransferError.unsafePath("something in the way of the folder \(shown) is not a folder")
                    case EACCES, EPERM: throw PeerTransferError.fileFailed("cannot create \(shown): \(reason)")
                    // The folder it goes in was removed or moved away meanwhile: this path alone.
                    case ENOENT: throw PeerTransferError.fileFailed("cannot create \(shown): a folder on its way went away meanwhile")
                    default: throw PeerTransferError.runtime("cannot create \(shown): \(reason)")
                    }
                }
                next = openat(current, component, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
            }
            let failure = errno
            close(current)
            guard next >= 0 else {
                let where_ = Self.shown(components.prefix(depth + 1))
                switch failure {
                case ENOENT where !create: return nil
                case ELOOP, ENOTDIR:
                    throw PeerTransferError.unsafePath("\(where_) in the inbox is a symlink or not a folder; nothing is written through it")
                case EACCES, EPERM:
                    // This folder alone: the files below it fail, the others go on.
                    throw PeerTransferError.fileFailed("cannot open \(where_): \(String(cString: strerror(failure)))")
                case ENOENT:
                    // Made just now and already removed or moved away: this path alone.
                    throw PeerTransferError.fileFailed("cannot open \(where_): it went away as it was made")
                default:
                    throw PeerTransferError.runtime("cannot open \(where_): \(String(cString: strerror(failure)))")
                }
            }
            current = next
        }
        return current
    }

    /// True when `components`, followed from the inbox's root, are each a folder (none a
    /// symlink) and lead to the folder with this device and inode. (Each step is looked at
    /// from the root with `AT_SYMLINK_NOFOLLOW`, so a symlink anywhere on the way is seen.)
    private func leadsTo(_ components: [String], device: UInt64, inode: UInt64) -> Bool {
        var info = stat()
        var prefix = ""
        for component in components {
            prefix = prefix.isEmpty ? component : prefix + "/" + component
            guard fstatat(root, prefix, &info, AT_SYMLINK_NOFOLLOW) == 0, (info.st_mode & S_IFMT) == S_IFDIR else { return false }
        }
        return UInt64(info.st_dev) == device && UInt64(info.st_ino) == inode
    }

    /// The SHA-256 of the regular file the inbox holds at `path`, when it is `size` bytes long
    /// (nil otherwise): maybe a file an earlier transfer already delivered.
    ///
    /// Only a file that the sender with key `sender` delivered counts (see
    /// ``PartFile/recordSender(_:new:)``): offering anyone the digest of any
    /// file would let a peer learn what others sent (a short file's digest gives its bytes away
    /// to a few guesses).
    func digest(ofFile path: RelativePath, size: UInt64, deliveredBy sender: String,
                cache: FolderCache? = nil) -> SHA256Digest? {
        guard let directory = try? openDirectory(path.parent, create: false, cache: cache) else { return nil }
        defer { close(directory) }
        // O_NONBLOCK: a FIFO planted under the name must not hang the daemon (regular files
        // ignore the flag).
        let fd = openat(directory, path.name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0, (info.st_mode & S_IFMT) == S_IFREG, UInt64(info.st_size) == size,
              PartFile.deliverer(of: fd) == sender, !sender.isEmpty else { return nil }
        let key = DigestCache.Key(info)
        return digests.digest(for: key) {
            guard let digest = try? FileHashing.digest(of: fd, length: size) else { return nil }
            // Remembered only for bytes that did not change while they were read.
            var after = stat()
            let unchanged = fstat(fd, &after) == 0 && DigestCache.Key(after) == key
            return (digest, unchanged && DigestCache.isSettled(info))
        }
    }

    /// SHA-256 of each whole chunk of `sender`'s part file for `path` (empty when there is none,
    /// or when another sender wrote it: its digests would tell this one about someone else's file).
    func partChunkDigests(_ path: RelativePath, chunkSize: Int, for sender: String,
                          cache: FolderCache? = nil) -> [SHA256Digest] {
        resumablePart(path, chunkSize: chunkSize, for: sender, cache: cache) ?? []
    }

    /// SHA-256 of each whole chunk of `sender`'s part file for `path`; nil when there is no
    /// part file that `sender` may resume (none, another sender's, one being written now).
    func resumablePart(_ path: RelativePath, chunkSize: Int, for sender: String,
                       cache: FolderCache? = nil, stop: StopFlag? = nil) -> [SHA256Digest]? {
        guard let directory = try? openDirectory(path.parent, create: false, cache: cache) else { return nil }
        defer { close(directory) }
        let fd = openat(directory, TransferLimits.partName(of: path.name, from: sender), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var info = stat()
        // Only a plain part file of our own counts: not a FIFO or device, not a hard link to a
        // file elsewhere, not one another transfer is writing now (it holds the lock).
        guard fstat(fd, &info) == 0, (info.st_mode & S_IFMT) == S_IFREG, info.st_nlink == 1,
              PartFile.mayResume(fd, sender: sender), flock(fd, LOCK_SH | LOCK_NB) == 0 else { return nil }
        // Only a probe: held while hashing (seconds for a large file), the lock would make a
        // transfer that opens this part file meanwhile fail. The digests are a hint; the whole
        // file is checked again before it gets its name.
        _ = flock(fd, LOCK_UN)   // closing the descriptor below releases it anyway
        // Remembered by the file's identity and times (as delivered files' digests are): the
        // same part file offered again is not hashed again. A hashing stopped because the
        // offer's sender left answers nothing and is not remembered.
        var key = DigestCache.Key(info)
        key.chunkSize = chunkSize
        if stop?.isSet == true { return nil }
        return partDigests.digests(for: key) {
            guard let digests = try? FileHashing.chunkDigests(of: fd, length: UInt64(info.st_size), chunkSize: chunkSize, stop: stop) else {
                return nil
            }
            var after = stat()
            guard fstat(fd, &after) == 0 else { return (digests, false) }
            var afterKey = DigestCache.Key(after)
            afterKey.chunkSize = chunkSize
            return (digests, afterKey == key && DigestCache.isSettled(info))
        } ?? (stop?.isSet == true ? nil : [])
    }

    /// Opens (creating) the part file for `path`, creating its folders, for the transfer from
    /// `sender` (whose key the file records).
    ///
    /// Each sender has a part file of its own for a path, `NAME.<24 hex of its key>.peerxfer-part`,
    /// so no peer can offer the same path and discard, resume or learn of someone else's
    /// progress. Should the name still hold another sender's part file (two keys that begin
    /// alike, which the recorded key tells apart), that file is left alone: this transfer's copy
    /// is written to a file without a name in the same folder (`O_TMPFILE`), named like any
    /// other once verified, and not resumable should this transfer be cut too.
    func openPart(_ path: RelativePath, for sender: String, cache: FolderCache? = nil) throws -> PartFile {
        guard let directory = try openDirectory(path.parent, create: true, cache: cache) else {
            throw PeerTransferError.runtime("cannot create the folder of \(path)")
        }
        let name = TransferLimits.partName(of: path.name, from: sender)
        let shown = Terminal.escape((path.parent + [name]).joined(separator: "/"))
        // O_NONBLOCK: opening a planted FIFO must not block (it is refused just below).
        let fd = openat(directory, name, O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0o600)
        guard fd >= 0 else {
            let failure = errno
            close(directory)
            switch failure {
            case ELOOP:
                throw PeerTransferError.unsafePath("\(shown) is a symlink; nothing is written through it")
            case EISDIR, ENOTDIR, ENXIO:   // a folder, or a socket (ENXIO), where the part file goes
                throw PeerTransferError.unsafePath("\(shown) is taken by something that is not a file")
            case EACCES, EPERM, ETXTBSY, ENAMETOOLONG:
                throw PeerTransferError.fileFailed("cannot open \(shown): \(String(cString: strerror(failure)))")
            default:
                break
            }
            throw PeerTransferError.runtime("cannot open \(shown): \(String(cString: strerror(failure)))")
        }
        var info = stat()
        let statted = fstat(fd, &info) == 0
        // A hard link would make the writes land in a file outside the inbox; anything but a
        // regular file (a FIFO, a device) is not a part file.
        guard statted, (info.st_mode & S_IFMT) == S_IFREG, info.st_nlink == 1 else {
            close(fd)
            close(directory)
            throw PeerTransferError.unsafePath("\(shown) is not a plain file of its own (a hard link, a FIFO or a device); nothing is written to it")
        }
        // Another sender's part file (waiting for it to resume, or being written by it) is left
        // alone, unlocked: this transfer's copy goes to a file without a name.
        guard PartFile.mayResume(fd, sender: sender, info: info) else {
            close(fd)
            return try openUnnamedPart(path, in: directory, for: sender, refused: Self.noSecondCopy(of: path))
        }
        // One writer per part file: a second transfer of the same path must not write into a
        // file this one will verify and name. The lock lasts until the file is named or given up.
        guard flock(fd, LOCK_EX | LOCK_NB) == 0 else {
            // Held by another transfer: this same sender racing itself fails this file; any
            // other (the part file recorded no writer yet) gets a copy of its own.
            let writer = PartFile.deliverer(of: fd)
            close(fd)
            guard writer == sender else { return try openUnnamedPart(path, in: directory, for: sender, refused: Self.noSecondCopy(of: path)) }
            close(directory)
            throw PeerTransferError.fileFailed("another transfer is receiving \(Terminal.escape(path.description)) right now; try again when it is done")
        }
        let file = PartFile(inbox: self, directory: directory, fd: fd, path: path, partName: name)
        file.recordSender(sender)
        return file
    }

    /// Claims `path` for the small file `sender` is sending, until the claim goes (see
    /// ``BufferedFile``): such a file takes no part file, so no lock on one, and a sender that
    /// races itself (a retry while its first connection still delivers) must not get two copies.
    /// - Throws: ``PeerTransferError/fileFailed(_:)`` when a transfer from `sender` is receiving
    ///   that path now (that file alone fails).
    func claim(_ path: RelativePath, for sender: String) throws -> ReceivingClaim {
        let key = Array(sender.utf8) + [0] + FolderCache.key(path.components)
        guard receiving.withLock({ $0.insert(key).inserted }) else {
            throw PeerTransferError.fileFailed("another transfer is receiving \(Terminal.escape(path.description)) right now; try again when it is done")
        }
        return ReceivingClaim(inbox: self, key: key)
    }

    /// Ends a claim (see ``ReceivingClaim``).
    fileprivate func release(_ key: [UInt8]) {
        _ = receiving.withLock { $0.remove(key) }
    }

    /// Whether small files are written to files without a name (`O_TMPFILE`); tests turn it off
    /// to run the part-file way a file system without `O_TMPFILE` takes. Turned off for good,
    /// for the whole inbox, the first time any folder of it refuses `O_TMPFILE` (a file system
    /// mounted below it, say): a cost in speed only.
    var usesUnnamedFiles: Bool {
        get { makesUnnamedFiles.load(ordering: .relaxed) }
        set { makesUnnamedFiles.store(newValue, ordering: .relaxed) }
    }

    /// A file without a name (`O_TMPFILE`) in the folder of `path`, creating its folders, for a
    /// small file received whole from `sender` (whose key it records; see ``BufferedFile``).
    /// Nothing else can open it: it needs no lock, and naming it leaves nothing to remove. On
    /// a file system without `O_TMPFILE`, the sender's part file is opened instead (the caller
    /// empties it: it may hold an earlier try's bytes).
    /// - Throws: as ``openPart(_:for:cache:)``.
    func openUnnamedFile(_ path: RelativePath, for sender: String, cache: FolderCache? = nil) throws -> PartFile {
        guard usesUnnamedFiles else { return try openPart(path, for: sender, cache: cache) }
        guard let directory = try openDirectory(path.parent, create: true, cache: cache) else {
            throw PeerTransferError.runtime("cannot create the folder of \(path)")
        }
        return try openUnnamedPart(path, in: directory, for: sender) { failure, reason in
            switch failure {
            case EOPNOTSUPP, EISDIR, EINVAL:
                self.usesUnnamedFiles = false
                return try self.openPart(path, for: sender, cache: cache)
            default:   // EACCES, EPERM
                throw PeerTransferError.fileFailed("cannot make a file in the folder of \(Terminal.escape(path.description)): \(reason)")
            }
        }
    }

    /// A part file without a name (`O_TMPFILE`) in `directory`, which it takes over.
    /// - Parameter refused: what to do when the file system will not make one (EOPNOTSUPP,
    ///   EISDIR or EINVAL: no `O_TMPFILE` there; EACCES or EPERM), given its errno and reason,
    ///   `directory` already closed.
    /// - Throws: ``PeerTransferError/noSpace(_:)``; what `refused` throws;
    ///   ``PeerTransferError/runtime(_:)`` for other failures.
    private func openUnnamedPart(_ path: RelativePath, in directory: Int32, for sender: String,
                                 refused: (_ failure: Int32, _ reason: String) throws -> PartFile) throws -> PartFile {
        let fd = openat(directory, ".", PartFile.unnamedFileFlags | O_RDWR | O_CLOEXEC, 0o600)
        guard fd >= 0 else {
            let failure = errno
            close(directory)
            let reason = String(cString: strerror(failure))
            switch failure {
            case ENOSPC, EDQUOT:
                throw PeerTransferError.noSpace("the inbox's disk is full (receiving \(Terminal.escape(path.description)))")
            case EOPNOTSUPP, EISDIR, EINVAL, EACCES, EPERM:
                return try refused(failure, reason)
            default:
                throw PeerTransferError.runtime("cannot make a file in the folder of \(Terminal.escape(path.description)): \(reason)")
            }
        }
        let file = PartFile(inbox: self, directory: directory, fd: fd, path: path, partName: nil)
        file.recordSender(sender, new: true)
        return file
    }

    /// For a second sender whose copy cannot go to a file without a name: that file fails.
    private static func noSecondCopy(of path: RelativePath) -> (Int32, String) throws -> PartFile {
        { _, reason in
            throw PeerTransferError.fileFailed("the part file for \(Terminal.escape(path.description)) belongs to another sender's transfer, and this file system cannot hold a second copy beside it without a name (\(reason))")
        }
    }

    private static func shown<C: Collection>(_ components: C) -> String where C.Element == String {
        "\"" + Terminal.escape(components.joined(separator: "/")) + "\""
    }
}

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

    init(inbox: Inbox, directory: Int32, fd: Int32, path: RelativePath, partName: String?) {
        self.inbox = inbox
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
            throw PeerTransferError.runtime("the folder of \(Terminal.escape(path.description)) went away before it got its name")
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
            throw PeerTransferError.fileFailed("the part file of \(Terminal.escape(path.description)) holds \(info.st_size) bytes, fewer than the \(offset) to resume after (it changed since the answer); send it again")
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
        if !writesDirectly && fd >= 0 && DirectWrites.isSuitable(fd) && DirectWrites.set(true, on: fd) {
            writesDirectly = true
        }
        return writesDirectly
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
        try data.withUnsafeBytes { raw in
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
        }
        written = max(written, offset + UInt64(data.count))
        if writesDirectly {
            writeBackStart = written   // nothing of it waits in the page cache
        } else if written - writeBackStart >= Self.writeBackStep {
            startWriteBack()
        }
    }

    /// Makes the bytes written so far durable (fdatasync(2)). A large file calls it while it is
    /// still being received, from a queue of its own beside the writes (see ``FileSink``): the
    /// disk then works all along, and the batch's syncfs(2) before naming finds little left.
    /// With writes through the page cache, on this machine's virtual disk, that made 1 GiB
    /// durable in 1.7–2.0 s, against 2.5–2.9 s for one sync at the end. With direct writes (see
    /// ``writeDirectly()``) it is what asks the disk to make them durable as they go: all the
    /// syncs of a 1 GiB transfer then took 0.02–0.03 s together, against 0.24–0.63 s through the
    /// cache (`strace -T`, 2026-11-26).
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
        guard fchmod(fd, mode_t(mode & 0o755)) == 0 else { throw ioError("fchmod") }
        // A time from the network: applied only when it is one a file system can hold (a
        // bogus one, NaN or 1e300, is left out rather than trapping in the conversion).
        if modified.isFinite, abs(modified) < 1e11 {
            let seconds = modified.rounded(.down)
            var times = [timespec(tv_sec: time(nil), tv_nsec: 0),
                         timespec(tv_sec: Int(seconds), tv_nsec: Int((modified - seconds) * 1e9))]
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
    /// number (never replacing a file). Call once its data is on disk; the caller syncs the
    /// folder (see ``VerifiedBatch``).
    /// - Returns: the path it was stored under.
    func publish(cache: FolderCache? = nil) throws -> String {
        var own = stat()
        guard fd >= 0, fstat(fd, &own) == 0 else { throw ioError("fstat") }
        return try withFolder(cache: cache) { folder in
            for attempt in 0..<(Self.numberedNames + 64) {
                let candidate = attempt == 0 ? path.name
                    : attempt < Self.numberedNames ? Self.numbered(path.name, attempt)
                    : Self.labelled(path.name, String(UInt32.random(in: 0x1000_0000...UInt32.max), radix: 16))
                // link(2) refuses to replace an existing name: no file is ever overwritten. The
                // name is linked to the open, verified file itself (through /proc), not to
                // whatever the part file's name points at by now: a file renamed over it
                // after verification is never published in its place.
                if linkat(AT_FDCWD, "/proc/self/fd/\(fd)", folder, candidate, AT_SYMLINK_FOLLOW) == 0 {
                    // The part name goes only if it is still this file's.
                    if let partName, ownsName(partName, in: folder, own) {
                        guard unlinkat(folder, partName, 0) == 0 else { throw ioError("unlinkat") }
                    }
                    return (path.parent + [candidate]).joined(separator: "/")
                }
                if errno == ENOENT {
                    // The verified file has no name left: someone replaced or removed its part
                    // file. Linux links no file without a name; nothing is published for it.
                    throw PeerTransferError.unsafePath("the part file of \(Terminal.escape(path.description)) was replaced or removed after it was verified; nothing is published in its place")
                }
                guard errno == EEXIST else { throw ioError("linkat of the verified file") }
            }
            throw PeerTransferError.runtime("no free name for \(Terminal.escape(path.description)) after \(Self.numberedNames) numbered and 64 random tries")
        }
    }

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

    /// glibc's fsetxattr(2) and fgetxattr(2), looked up at run time (Swift's Glibc module
    /// leaves out sys/xattr.h).
    private static let setAttribute: (@convention(c) (Int32, UnsafePointer<CChar>?, UnsafeRawPointer?, Int, Int32) -> Int32)? = {
        guard let symbol = dlsym(nil, "fsetxattr") else { return nil }
        return unsafeBitCast(symbol, to: (@convention(c) (Int32, UnsafePointer<CChar>?, UnsafeRawPointer?, Int, Int32) -> Int32).self)
    }()
    private static let getAttribute: (@convention(c) (Int32, UnsafePointer<CChar>?, UnsafeMutableRawPointer?, Int) -> Int)? = {
        guard let symbol = dlsym(nil, "fgetxattr") else { return nil }
        return unsafeBitCast(symbol, to: (@convention(c) (Int32, UnsafePointer<CChar>?, UnsafeMutableRawPointer?, Int) -> Int).self)
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
        guard let setAttribute = Self.setAttribute, new || Self.deliverer(of: fd) != sender else { return }
        _ = sender.utf8CString.withUnsafeBufferPointer { key in
            setAttribute(fd, Self.delivererAttribute, key.baseAddress, key.count - 1, 0)
        }
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
        PeerTransferError.runtime("\(call) on \(Terminal.escape(path.description)): \(String(cString: strerror(errno)))")
    }
}

/// A small file's claim on its path for its sender (see ``Inbox/claim(_:for:)``), given back
/// when the last copy of the file that holds it goes: once its batch is published, or when its
/// transfer ends without publishing it.
final class ReceivingClaim: Sendable {
    private let inbox: Inbox
    private let key: [UInt8]

    fileprivate init(inbox: Inbox, key: [UInt8]) {
        self.inbox = inbox
        self.key = key
    }

    deinit { inbox.release(key) }
}
