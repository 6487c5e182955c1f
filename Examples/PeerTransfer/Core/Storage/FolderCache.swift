import Foundation

/// The inbox folder a transfer opened last, kept open: a tree arrives folder by folder, so
/// most files find their folder here instead of walking from the inbox's root again (a
/// `dup` and an `fstatat` per path component instead of an `openat` and a `close`).
///
/// The descriptor is the folder as it was reached, with `O_NOFOLLOW` at every step, when it
/// was first opened. Before it is used again, ``Inbox/openDirectory(_:create:mode:cache:madeFor:)``
/// checks that the path still leads from the inbox's root to that very folder (device and
/// inode); a folder removed, moved or replaced meanwhile is walked to again, and refused or
/// made again as on a first visit. Paths are told apart by their bytes, as the file system
/// does (two spellings of "é" are two folders). Not thread-safe: each task or thread keeps its own.
final class FolderCache {
    /// The folder's path as UTF-8, its components joined by `/`.
    private var key: [UInt8]?
    private var fd: Int32 = -1
    private var identity: (device: UInt64, inode: UInt64) = (0, 0)
    /// True when the path was looked up without creating it and did not exist.
    private var missing = false

    /// A cache holding nothing yet.
    init() {}

    deinit { forget() }

    /// Closes the folder kept, if any.
    func forget() {
        if fd >= 0 { close(fd) }
        fd = -1
        key = nil
        missing = false
    }

    /// The key of a folder path: its bytes.
    static func key(_ components: [String]) -> [UInt8] {
        Array(components.joined(separator: "/").utf8)
    }

    /// What is known of `path`: a new descriptor for it (the caller closes it) with the device
    /// and inode it had, `.missing` when it was found missing (only for lookups that create
    /// nothing), or `.unknown`.
    func lookUp(_ path: [String], creating: Bool) -> Known {
        guard let key, key == Self.key(path) else { return .unknown }
        if fd >= 0 {
            let copy = dup(fd)
            return copy >= 0 ? .open(copy, device: identity.device, inode: identity.inode) : .unknown
        }
        return missing && !creating ? .missing : .unknown
    }

    /// Keeps a copy of `descriptor` (left open for the caller) as the folder at `path`, or
    /// records that `path` is missing when `descriptor` is nil.
    func remember(_ path: [String], _ descriptor: Int32?) {
        forget()
        if let descriptor {
            var info = stat()
            guard fstat(descriptor, &info) == 0 else { return }
            let copy = dup(descriptor)
            guard copy >= 0 else { return }
            fd = copy
            identity = (UInt64(info.st_dev), UInt64(info.st_ino))
        } else {
            missing = true
        }
        key = Self.key(path)
    }

    /// What a cache knows of a folder path.
    enum Known {
        /// A new descriptor for the folder kept (the caller closes it), and the device and
        /// inode the folder had when it was walked to.
        case open(Int32, device: UInt64, inode: UInt64)
        /// Looked up without creating it, and not there.
        case missing
        /// Not the folder kept: walk to it.
        case unknown
    }
}
