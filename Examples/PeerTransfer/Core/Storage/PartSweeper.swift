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
    /// - Returns: false when the walk was cut short (a folder could not be read to its end):
    ///   what it found is then not all there is.
    @discardableResult
    static func forEachPartFile(below root: Int32, _ body: (String, stat) -> Void) -> Bool {
        var whole = true
        func walk(_ fd: Int32, _ prefix: String, depth: Int, device: UInt64) {
            guard let folder = fdopendir(fd) else {
                close(fd)
                whole = false
                return
            }
            defer { closedir(folder) }
            let descriptor = dirfd(folder)
            while true {
                errno = 0
                guard let entry = readdir(folder) else {
                    if errno != 0 { whole = false }
                    return
                }
                // The name's own bytes for the calls (a name that is not UTF-8 still names its
                // file); its text only for the paths reported.
                var raw = entry.pointee.d_name
                let capacity = MemoryLayout.size(ofValue: raw)
                let (name, info, isFolder) = withUnsafePointer(to: &raw) { tuple in
                    tuple.withMemoryRebound(to: CChar.self, capacity: capacity) {
                        bytes -> (String, stat?, Int32?) in
                        let name = String(
                            decoding: UnsafeRawBufferPointer(start: bytes, count: strlen(bytes)), as: UTF8.self)
                        if name == "." || name == ".." { return (name, nil, nil) }
                        var info = stat()
                        guard fstatat(descriptor, bytes, &info, AT_SYMLINK_NOFOLLOW) == 0 else {
                            return (name, nil, nil)
                        }
                        // Folders on this file system only (a mount below the inbox is not its).
                        guard (info.st_mode & S_IFMT) == S_IFDIR, UInt64(info.st_dev) == device,
                            depth <= TransferLimits.maximumDepth
                        else { return (name, info, nil) }
                        return (name, info, openat(descriptor, bytes, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC))
                    }
                }
                guard let info else { continue }
                let relative = prefix.isEmpty ? name : prefix + "/" + name
                if let isFolder {
                    if isFolder >= 0 { walk(isFolder, relative, depth: depth + 1, device: device) }
                } else if (info.st_mode & S_IFMT) == S_IFREG, TransferLimits.isPartName(name) {
                    body(relative, info)
                }
            }
        }
        // A descriptor of its own, not a dup: a dup shares the directory's read position, and a
        // second walk would start where the first ended, finding nothing.
        let start = openat(root, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        var rootInfo = stat()
        guard start >= 0, fstat(start, &rootInfo) == 0 else {
            if start >= 0 { close(start) }
            return false
        }
        walk(start, "", depth: 0, device: UInt64(rootInfo.st_dev))
        return whole
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
