import Foundation
import SalutStreams
import Synchronization

/// The folder received files land in. Every operation walks from the inbox's own descriptor
/// with `openat(…, O_NOFOLLOW)`, so no path, and no symlink planted inside the inbox, can lead
/// a write outside it.
final class Inbox: @unchecked Sendable {
    // @unchecked: `root` and `trusts` (a Sendable closure) are set once and only read; the
    // descriptor calls are thread-safe; `promised`, `receiving` and `partShareOfOneSender` are
    // Locked boxes, `makesUnnamedFiles` an Atomic; `digests` is Sendable (its own lock).
    let path: String
    let root: Int32
    /// Bytes that accepted transfers still have to write: free space is promised to one
    /// transfer at a time, so that two offers that each fit do not together fill the disk.
    private let promised = Locked<UInt64>(0)
    /// Digests of delivered files, for `existing` offers (see ``digest(ofFile:size:deliveredBy:)``).
    let digests: DigestCache
    /// Chunk digests of part files, for `have` answers: an offer sent again and again (by a
    /// peer that then hangs up) costs one hashing of its part file, not one each.
    let partDigests: DigestCache
    /// The small files being received, each as its sender's key and its path (see
    /// ``claim(_:for:)``).
    private let receiving = Locked<Set<[UInt8]>>([])
    /// False once the file system refused `O_TMPFILE`: small files go to part files from then on.
    private let makesUnnamedFiles = Atomic<Bool>(true)

    /// True for the key of a sender trusted here: its files take names back from files of
    /// untrusted senders (see ``PartFile/publish(cache:)``).
    let trusts: @Sendable (String) -> Bool

    /// Opens the inbox folder, creating it (mode 0700) if it does not exist. `trusts` tells
    /// trusted senders' keys (none by default); `now` is the clock file times are judged by
    /// (see ``DigestCache/isSettled(_:)``; tests give another).
    /// - Throws: ``PeerTransferError/usage(_:)`` when it cannot be created, opened or written
    ///   (a file, a read-only file system, another user's folder): the user's to fix.
    init(
        path: String, trusts: @escaping @Sendable (String) -> Bool = { _ in false },
        now: @escaping @Sendable () -> timespec? = DigestCache.realTime
    ) throws {
        self.path = path
        self.trusts = trusts
        digests = DigestCache(now: now)
        partDigests = DigestCache(capacity: 1_024, now: now)
        func refusal(_ what: String) -> PeerTransferError {
            let reason = String(cString: strerror(errno))  // (before anything else can change errno)
            return .usage(
                "\(what) the inbox \(Terminal.escape(path)) (\(reason)); give --inbox a folder this user can write")
        }
        if mkdir(path, 0o700) != 0 && errno != EEXIST { throw refusal("cannot create") }
        root = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard root >= 0 else { throw refusal("cannot open") }
        // A daemon that cannot write where files land would publish itself and then fail
        // every transfer: refused at the start instead. Asked, then tried (the superuser
        // passes every permission check, not a read-only file system's).
        guard faccessat(root, ".", W_OK | X_OK, AT_EACCESS) == 0 else { throw refusal("cannot write to") }
        let probe = ".peerxfer-probe-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        let written = openat(root, probe, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0o600)
        guard written >= 0 else { throw refusal("cannot write to") }
        close(written)
        _ = unlinkat(root, probe, 0)
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
            sync()  // no syncfs in this libc: the whole system, which includes the inbox
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
            throw PeerTransferError.runtime(
                "cannot read the free space of \(path): \(String(cString: strerror(errno)))")
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
                throw PeerTransferError.noSpace(
                    "the receiver has \(available) bytes free for this transfer, which needs \(bytes)")
            }
            promised += bytes
        }
    }

    /// The share of the file system one sender's part files may hold (see
    /// ``PartSweeper/shareOfOneSender``).
    let partShareOfOneSender = Locked<Double>(PartSweeper().shareOfOneSender)

    /// Every sender's part files, as last counted and as transfers under way reserved them
    /// (see `PartLedger.swift`).
    let partLedger = Locked(PartLedger())
    /// Held through a walk of the inbox for the ledger: one walk at a time.
    let partWalk = Locked(0)

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
    func openDirectory(
        _ components: [String], create: Bool, mode: mode_t = 0o755,
        cache: FolderCache? = nil, madeFor sender: String? = nil
    ) throws -> Int32? {
        if let cache, !components.isEmpty {
            return try openDirectory(components, create: create, mode: mode, through: cache, madeFor: sender)
        }
        var current = dup(root)
        guard current >= 0 else { throw PeerTransferError.runtime("dup: \(String(cString: strerror(errno)))") }
        for (depth, component) in components.enumerated() {
            var next = openat(current, component, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
            // A file an untrusted sender left where a trusted sender's folder goes moves aside.
            if next < 0 && errno == ENOTDIR && create, let sender,
                moveStrangersFileAside(component, in: current, for: sender)
            {
                errno = ENOENT
            }
            if next < 0 && errno == ENOENT && create {
                let made = mkdirat(current, component, mode) == 0
                if !made && errno != EEXIST {
                    let failure = errno
                    close(current)
                    throw Self.creationFailure(failure, of: Self.shown(components.prefix(depth + 1)))
                }
                next = openat(current, component, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
                // Whose folder it is: a trusted sender's file takes its name back from a
                // stranger's folder as from a stranger's file (see `PartFile.publish`).
                if made, next >= 0, let sender { PartFile.record(sender, on: next) }
            }
            let failure = errno
            close(current)
            guard next >= 0 else {
                if failure == ENOENT && !create { return nil }
                throw Self.openingFailure(failure, of: Self.shown(components.prefix(depth + 1)))
            }
            current = next
        }
        return current
    }

    /// ``openDirectory(_:create:mode:cache:madeFor:)`` with a `cache`: the folder it holds when
    /// that is still the one the path leads to, else the one walked to (then kept there).
    private func openDirectory(
        _ components: [String], create: Bool, mode: mode_t, through cache: FolderCache, madeFor sender: String?
    ) throws -> Int32? {
        switch cache.lookUp(components, creating: create) {
        case .open(let fd, let device, let inode):
            // Still the folder the path leads to from the root (not removed, moved or replaced
            // since it was walked to): then it is used as it is.
            if leadsTo(components, device: device, inode: inode) { return fd }
            close(fd)
            cache.forget()
        case .missing:
            return nil
        case .unknown:
            break
        }
        let fd = try openDirectory(components, create: create, mode: mode, madeFor: sender)
        cache.remember(components, fd)
        return fd
    }

    /// Why the folder `shown` could not be made (`mkdirat` failed with `failure`).
    private static func creationFailure(_ failure: Int32, of shown: String) -> PeerTransferError {
        let reason = String(cString: strerror(failure))
        switch failure {
        case ENOSPC, EDQUOT: return .noSpace("no space for the folder \(shown)")
        case ENOTDIR: return .unsafePath("something in the way of the folder \(shown) is not a folder")
        case EACCES, EPERM: return .fileFailed("cannot create \(shown): \(reason)")
        // The folder it goes in was removed or moved away meanwhile: this path alone.
        case ENOENT: return .fileFailed("cannot create \(shown): a folder on its way went away meanwhile")
        default: return .runtime("cannot create \(shown): \(reason)")
        }
    }

    /// Why the folder `shown` could not be opened (`openat` failed with `failure`).
    private static func openingFailure(_ failure: Int32, of shown: String) -> PeerTransferError {
        let reason = String(cString: strerror(failure))
        switch failure {
        case ELOOP, ENOTDIR:
            return .unsafePath("\(shown) in the inbox is a symlink or not a folder; nothing is written through it")
        // This folder alone: the files below it fail, the others go on.
        case EACCES, EPERM: return .fileFailed("cannot open \(shown): \(reason)")
        // Made just now and already removed or moved away: this path alone.
        case ENOENT: return .fileFailed("cannot open \(shown): it went away as it was made")
        default: return .runtime("cannot open \(shown): \(reason)")
        }
    }

    /// True for a key recorded on a file that is a sender's (64 hex digits), not `sender` and
    /// not trusted here: a stranger to `sender`, whose files give their names up to its.
    func isStranger(_ key: String, to sender: String) -> Bool {
        SHA256DigestText.isValid(key) && key != sender && !trusts(key)
    }

    /// Moves the file `name` in `folder` to `NAME (from <8 hex>).EXT` when an untrusted sender
    /// delivered it and `sender` is trusted: a stranger's file does not keep a trusted sender's
    /// files out of the folder of that name (see ``PartFile/publish(cache:)`` for files). True
    /// when it moved.
    private func moveStrangersFileAside(_ name: String, in folder: Int32, for sender: String) -> Bool {
        guard let renameat2 = PartFile.renameat2, trusts(sender) else { return false }
        let held = openat(folder, name, PartFile.pathOnly | O_NOFOLLOW | O_CLOEXEC)
        guard held >= 0 else { return false }
        defer { close(held) }
        var info = stat()
        guard fstat(held, &info) == 0, (info.st_mode & S_IFMT) == S_IFREG,
            let deliverer = PartFile.deliverer(ofPath: "/proc/self/fd/\(held)"), isStranger(deliverer, to: sender)
        else { return false }
        for attempt in 0..<PartFile.numberedNames {
            let aside = PartFile.candidateName(name, marked: PartFile.asideMark(of: deliverer), attempt: attempt)
            if renameat2(folder, name, folder, aside, PartFile.renameNoReplace) == 0 {
                // The file moved must be the one judged: another put under the name meanwhile
                // goes back.
                var moved = stat()
                guard fstatat(folder, aside, &moved, AT_SYMLINK_NOFOLLOW) == 0,
                    moved.st_dev == info.st_dev, moved.st_ino == info.st_ino
                else {
                    _ = renameat2(folder, aside, folder, name, PartFile.renameNoReplace)
                    return false
                }
                return true
            }
            guard errno == EEXIST else { return false }
        }
        return false
    }

    /// True when `components`, followed from the inbox's root, are each a folder (none a
    /// symlink) and lead to the folder with this device and inode. (Each step is looked at
    /// from the root with `AT_SYMLINK_NOFOLLOW`, so a symlink anywhere on the way is seen.)
    private func leadsTo(_ components: [String], device: UInt64, inode: UInt64) -> Bool {
        var info = stat()
        var prefix = ""
        for component in components {
            prefix = prefix.isEmpty ? component : prefix + "/" + component
            guard fstatat(root, prefix, &info, AT_SYMLINK_NOFOLLOW) == 0, (info.st_mode & S_IFMT) == S_IFDIR else {
                return false
            }
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
    func digest(
        ofFile path: RelativePath, size: UInt64, deliveredBy sender: String,
        cache: FolderCache? = nil
    ) -> SHA256Digest? {
        guard let directory = try? openDirectory(path.parent, create: false, cache: cache) else { return nil }
        defer { close(directory) }
        // O_NONBLOCK: a FIFO planted under the name must not hang the daemon (regular files
        // ignore the flag).
        let fd = openat(directory, path.name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0, (info.st_mode & S_IFMT) == S_IFREG, UInt64(info.st_size) == size,
            PartFile.deliverer(of: fd) == sender, !sender.isEmpty
        else { return nil }
        let key = DigestCache.Key(info)
        return digests.digest(for: key) {
            guard let digest = try? FileHashing.digest(of: fd, length: size) else { return nil }
            // Remembered only for bytes that did not change while they were read.
            var after = stat()
            let unchanged = fstat(fd, &after) == 0 && DigestCache.Key(after) == key
            return (digest, unchanged && digests.isSettled(info))
        }
    }

    /// SHA-256 of each whole chunk of `sender`'s part file for `path` (empty when there is none,
    /// or when another sender wrote it: its digests would tell this one about someone else's file).
    func partChunkDigests(
        _ path: RelativePath, chunkSize: Int, for sender: String,
        cache: FolderCache? = nil
    ) -> [SHA256Digest] {
        resumablePart(path, chunkSize: chunkSize, for: sender, cache: cache) ?? []
    }

    /// SHA-256 of each whole chunk of `sender`'s part file for `path`; nil when there is no
    /// part file that `sender` may resume (none, another sender's, one being written now).
    func resumablePart(
        _ path: RelativePath, chunkSize: Int, for sender: String,
        cache: FolderCache? = nil, stop: StopFlag? = nil
    ) -> [SHA256Digest]? {
        guard let directory = try? openDirectory(path.parent, create: false, cache: cache) else { return nil }
        defer { close(directory) }
        let fd = openat(
            directory, TransferLimits.partName(of: path.name, from: sender),
            O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var info = stat()
        // Only a plain part file of our own counts: not a FIFO or device, not a hard link to a
        // file elsewhere, not one another transfer is writing now (it holds the lock).
        guard fstat(fd, &info) == 0, (info.st_mode & S_IFMT) == S_IFREG, info.st_nlink == 1,
            PartFile.mayResume(fd, sender: sender), flock(fd, LOCK_SH | LOCK_NB) == 0
        else { return nil }
        // Only a probe: held while hashing (seconds for a large file), the lock would make a
        // transfer that opens this part file meanwhile fail. The digests are a hint; the whole
        // file is checked again before it gets its name.
        _ = flock(fd, LOCK_UN)  // closing the descriptor below releases it anyway
        // Remembered by the file's identity and times (as delivered files' digests are): the
        // same part file offered again is not hashed again. A hashing stopped because the
        // offer's sender left answers nothing and is not remembered.
        var key = DigestCache.Key(info)
        key.chunkSize = chunkSize
        if stop?.isSet == true { return nil }
        return partDigests.digests(for: key) {
            guard
                let digests = try? FileHashing.chunkDigests(
                    of: fd, length: UInt64(info.st_size), chunkSize: chunkSize, stop: stop)
            else {
                return nil
            }
            var after = stat()
            guard fstat(fd, &after) == 0 else { return (digests, false) }
            var afterKey = DigestCache.Key(after)
            afterKey.chunkSize = chunkSize
            return (digests, afterKey == key && partDigests.isSettled(info))
        } ?? (stop?.isSet == true ? nil : [])
    }

    /// Removes `sender`'s part file for `path` (what a cancelled send left): only a plain file
    /// of that sender's that no transfer is writing now. True when one was removed.
    func discardPart(_ path: RelativePath, for sender: String, cache: FolderCache? = nil) -> Bool {
        guard let directory = try? openDirectory(path.parent, create: false, cache: cache) else { return false }
        defer { close(directory) }
        let name = TransferLimits.partName(of: path.name, from: sender)
        let fd = openat(directory, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0, (info.st_mode & S_IFMT) == S_IFREG,
            PartFile.mayResume(fd, sender: sender), flock(fd, LOCK_EX | LOCK_NB) == 0,
            Self.stillNamed(name, in: directory, fd), unlinkat(directory, name, 0) == 0
        else { return false }
        forgetPart(of: sender, path)
        return true
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
        // The sweeper may remove the part file between its opening here and its lock (see
        // `stillNamed`): then it is opened again, made anew.
        for _ in 0..<3 {
            if let file = try openPart(path, for: sender, cache: cache, attempt: ()) { return file }
        }
        throw PeerTransferError.fileFailed(
            "the part file of \(Terminal.escape(path.description)) was removed three times as it was opened; try again")
    }

    /// One try of ``openPart(_:for:cache:)``: nil when the part file lost its name before it
    /// was locked.
    private func openPart(
        _ path: RelativePath, for sender: String, cache: FolderCache?, attempt: Void
    ) throws -> PartFile? {
        guard let directory = try openDirectory(path.parent, create: true, cache: cache, madeFor: sender) else {
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
            case EISDIR, ENOTDIR, ENXIO:  // a folder, or a socket (ENXIO), where the part file goes
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
            throw PeerTransferError.unsafePath(
                "\(shown) is not a plain file of its own (a hard link, a FIFO or a device); nothing is written to it")
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
            guard writer == sender else {
                return try openUnnamedPart(path, in: directory, for: sender, refused: Self.noSecondCopy(of: path))
            }
            close(directory)
            throw PeerTransferError.fileFailed(
                "another transfer is receiving \(Terminal.escape(path.description)) right now; try again when it is done"
            )
        }
        guard Self.stillNamed(name, in: directory, fd) else {
            close(fd)
            close(directory)
            return nil
        }
        let file = PartFile(inbox: self, directory: directory, fd: fd, path: path, partName: name, sender: sender)
        file.recordSender(sender)
        return file
    }

    /// True when `name` in `directory` is still the open file `fd`: the ``PartSweeper`` removes
    /// a part file it could lock, and one opened just before that (and locked just after) would
    /// otherwise be written with no name left to publish it by.
    /// With `alone` (a part file about to be written), it must also have no other name: a
    /// hard link would let writes land elsewhere.
    static func stillNamed(_ name: String, in directory: Int32, _ fd: Int32, alone: Bool = true) -> Bool {
        var open = stat(), named = stat()
        return fstat(fd, &open) == 0 && (alone ? open.st_nlink == 1 : open.st_nlink > 0)
            && fstatat(directory, name, &named, AT_SYMLINK_NOFOLLOW) == 0
            && named.st_dev == open.st_dev && named.st_ino == open.st_ino
    }

    /// Claims `path` for the small file `sender` is sending, until the claim goes (see
    /// ``BufferedFile``): such a file takes no part file, so no lock on one, and a sender that
    /// races itself (a retry while its first connection still delivers) must not get two copies.
    /// - Throws: ``PeerTransferError/fileFailed(_:)`` when a transfer from `sender` is receiving
    ///   that path now (that file alone fails).
    func claim(_ path: RelativePath, for sender: String) throws -> ReceivingClaim {
        let key = Array(sender.utf8) + [0] + FolderCache.key(path.components)
        guard receiving.withLock({ $0.insert(key).inserted }) else {
            throw PeerTransferError.fileFailed(
                "another transfer is receiving \(Terminal.escape(path.description)) right now; try again when it is done"
            )
        }
        return ReceivingClaim(inbox: self, key: key)
    }

    /// Ends a claim (see ``ReceivingClaim``).
    func release(_ key: [UInt8]) {
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
        guard let directory = try openDirectory(path.parent, create: true, cache: cache, madeFor: sender) else {
            throw PeerTransferError.runtime("cannot create the folder of \(path)")
        }
        return try openUnnamedPart(path, in: directory, for: sender) { failure, reason in
            switch failure {
            case EOPNOTSUPP, EISDIR, EINVAL:
                self.usesUnnamedFiles = false
                return try self.openPart(path, for: sender, cache: cache)
            default:  // EACCES, EPERM
                throw PeerTransferError.fileFailed(
                    "cannot make a file in the folder of \(Terminal.escape(path.description)): \(reason)")
            }
        }
    }

    /// A part file without a name (`O_TMPFILE`) in `directory`, which it takes over.
    /// - Parameter refused: what to do when the file system will not make one (EOPNOTSUPP,
    ///   EISDIR or EINVAL: no `O_TMPFILE` there; EACCES or EPERM), given its errno and reason,
    ///   `directory` already closed.
    /// - Throws: ``PeerTransferError/noSpace(_:)``; what `refused` throws;
    ///   ``PeerTransferError/runtime(_:)`` for other failures.
    private func openUnnamedPart(
        _ path: RelativePath, in directory: Int32, for sender: String,
        refused: (_ failure: Int32, _ reason: String) throws -> PartFile
    ) throws -> PartFile {
        let fd = openat(directory, ".", PartFile.unnamedFileFlags | O_RDWR | O_CLOEXEC, 0o600)
        guard fd >= 0 else {
            let failure = errno
            close(directory)
            let reason = String(cString: strerror(failure))
            switch failure {
            case ENOSPC, EDQUOT:
                throw PeerTransferError.noSpace(
                    "the inbox's disk is full (receiving \(Terminal.escape(path.description)))")
            case EOPNOTSUPP, EISDIR, EINVAL, EACCES, EPERM:
                return try refused(failure, reason)
            default:
                throw PeerTransferError.runtime(
                    "cannot make a file in the folder of \(Terminal.escape(path.description)): \(reason)")
            }
        }
        let file = PartFile(inbox: self, directory: directory, fd: fd, path: path, partName: nil, sender: sender)
        file.recordSender(sender, new: true)
        return file
    }

    /// For a second sender whose copy cannot go to a file without a name: that file fails.
    private static func noSecondCopy(of path: RelativePath) -> (Int32, String) throws -> PartFile {
        { _, reason in
            throw PeerTransferError.fileFailed(
                "the part file for \(Terminal.escape(path.description)) belongs to another sender's transfer, and this file system cannot hold a second copy beside it without a name (\(reason))"
            )
        }
    }

    private static func shown<C: Collection>(_ components: C) -> String where C.Element == String {
        "\"" + Terminal.escape(components.joined(separator: "/")) + "\""
    }
}
