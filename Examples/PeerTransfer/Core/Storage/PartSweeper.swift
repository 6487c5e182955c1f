import Foundation

/// Clears the inbox of part files that no sender came back for: keys are free to make, so a
/// peer could otherwise leave part files under one key after another until the disk is full.
///
/// A part file is removed when it has not been written for ``maximumAge`` (7 days by default;
/// a sender that resumes within that time finds it), and, oldest first, while the file
/// system's free space is below ``reserve`` (5 % by default). One that a transfer is writing
/// now (it holds the file's lock) is never removed.
public struct PartSweeper: Sendable {
    /// How long a part file may go unwritten before it is removed.
    public var maximumAge: Duration = .seconds(7 * 86_400)
    /// The share of the file system kept free by removing part files, oldest first (0…1).
    public var reserve: Double = 0.05
    /// The share of the file system one sender's part files may hold (0…1): an offer that would
    /// take a sender past it is refused (a ``PeerTransferError/limit(_:)``), so that no one
    /// sender's unfinished files crowd out everyone else's.
    public var shareOfOneSender: Double = 0.5

    /// A sweeper with the defaults.
    public init() {}

    /// What a sweep removed.
    public struct Outcome: Sendable, Equatable {
        /// Part files removed.
        public var removed = 0
        /// Their bytes.
        public var bytes: UInt64 = 0
    }

    /// Sweeps the inbox at `path` (blocking: it walks the tree).
    public func sweep(_ path: String, now: Date = Date()) -> Outcome {
        var outcome = Outcome()
        var parts: [(path: String, modified: Date, size: UInt64)] = []
        let root = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard root >= 0 else { return outcome }
        defer { close(root) }
        Self.forEachPartFile(below: root) { relative, info in
            let modified = Date(timeIntervalSince1970: Double(info.st_mtim.tv_sec) + Double(info.st_mtim.tv_nsec) / 1e9)
            parts.append((relative, modified, UInt64(info.st_size)))
        }
        parts.sort { $0.modified < $1.modified }
        let age = Double(maximumAge.components.seconds)
        var kept: [(path: String, modified: Date, size: UInt64)] = []
        for part in parts {
            if now.timeIntervalSince(part.modified) > age, Self.removeUnlessInUse(part.path, from: root) {
                outcome.removed += 1
                outcome.bytes += part.size
            } else {
                kept.append(part)
            }
        }
        for part in kept where Self.freeShare(of: path).map({ $0 < reserve }) ?? false {
            if Self.removeUnlessInUse(part.path, from: root) {
                outcome.removed += 1
                outcome.bytes += part.size
            }
        }
        return outcome
    }

    /// Calls `body` with the path (from `root`) and status of every part file below the folder
    /// `root` (blocking). Walked from descriptors, folder by folder (`openat`, `fdopendir`), so
    /// that a part file deeper than a whole path can name (PATH_MAX, counting the inbox's own
    /// path) is found all the same; symlinks are not followed; names are matched as bytes.
    static func forEachPartFile(below root: Int32, _ body: (String, stat) -> Void) {
        func walk(_ fd: Int32, _ prefix: String, depth: Int) {
            guard let folder = fdopendir(fd) else {
                close(fd)
                return
            }
            defer { closedir(folder) }
            let descriptor = dirfd(folder)
            while let entry = readdir(folder) {
                let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                    String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
                }
                if name == "." || name == ".." { continue }
                var info = stat()
                guard fstatat(descriptor, name, &info, AT_SYMLINK_NOFOLLOW) == 0 else { continue }
                let relative = prefix.isEmpty ? name : prefix + "/" + name
                switch info.st_mode & S_IFMT {
                case S_IFDIR where depth <= TransferLimits.maximumDepth:
                    let child = openat(descriptor, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
                    if child >= 0 { walk(child, relative, depth: depth + 1) }
                case S_IFREG where TransferLimits.isPartName(name):
                    body(relative, info)
                default:
                    break
                }
            }
        }
        // A descriptor of its own, not a dup: a dup shares the directory's read position, and a
        // second walk would start where the first ended, finding nothing.
        let start = openat(root, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        if start >= 0 { walk(start, "", depth: 0) }
    }

    /// The share of the file system at `path` free for unprivileged writers; nil when unknown.
    static func freeShare(of path: String) -> Double? {
        var info = statvfs()
        guard statvfs(path, &info) == 0, info.f_blocks > 0 else { return nil }
        return Double(info.f_bavail) / Double(info.f_blocks)
    }

    /// Removes the regular file at `path` unless a transfer holds its lock now. The file
    /// removed is the one locked: should another have been put under the name meanwhile, it
    /// is left alone (a transfer that opened the part file just before this removal sees, once
    /// it holds the lock, that it has no name left, and makes it anew: see `Inbox.openPart`).
    /// With `root` (the inbox's descriptor), `path` is relative to it: a deep part file's whole
    /// path may be longer than a call takes (PATH_MAX).
    static func removeUnlessInUse(_ path: String, from root: Int32 = AT_FDCWD) -> Bool {
        let url = URL(fileURLWithPath: path, relativeTo: root == AT_FDCWD ? nil : URL(fileURLWithPath: "/"))
        let parent =
            root == AT_FDCWD
            ? url.deletingLastPathComponent().path
            : String(path.utf8.lastIndex(of: UInt8(ascii: "/")).map { path[..<$0] } ?? ".")
        let folder = openat(root, parent, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        guard folder >= 0 else { return false }
        defer { close(folder) }
        let name =
            root == AT_FDCWD
            ? url.lastPathComponent
            : String(
                path.utf8.lastIndex(of: UInt8(ascii: "/")).map { path[path.utf8.index(after: $0)...] } ?? path[...])
        let fd = openat(folder, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0, (info.st_mode & S_IFMT) == S_IFREG, flock(fd, LOCK_EX | LOCK_NB) == 0,
            Inbox.stillNamed(name, in: folder, fd, alone: false)
        else { return false }
        return unlinkat(folder, name, 0) == 0
    }
}
