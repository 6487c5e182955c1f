import Foundation

/// The inbox folder a transfer opened last, kept open: a tree arrives folder by folder, so
/// most files find their folder here instead of walking from the inbox's root again (a
/// `dup` instead of an `openat` per path component).
///
/// The descriptor is the folder as it was reached, with `O_NOFOLLOW` at every step, when it
/// was first opened; later lookups of the same path use it as they would a folder held open
/// while one file is written. Not thread-safe: each task or thread keeps its own.
final class FolderCache {
    private var components: [String]?
    private var fd: Int32 = -1
    /// True when `components` was looked up without creating it and did not exist.
    private var missing = false

    init() {}

    deinit { forget() }

    /// Closes the folder kept, if any.
    func forget() {
        if fd >= 0 { close(fd) }
        fd = -1
        components = nil
        missing = false
    }

    /// What is known of `path`: a new descriptor for it (the caller closes it), `.missing`
    /// when it was found missing (only for lookups that create nothing), or `.unknown`.
    func lookUp(_ path: [String], creating: Bool) -> Known {
        guard components == path else { return .unknown }
        if fd >= 0 {
            let copy = dup(fd)
            return copy >= 0 ? .open(copy) : .unknown
        }
        return missing && !creating ? .missing : .unknown
    }

    /// Keeps a copy of `descriptor` (left open for the caller) as the folder at `path`, or
    /// records that `path` is missing when `descriptor` is nil.
    func remember(_ path: [String], _ descriptor: Int32?) {
        forget()
        if let descriptor {
            let copy = dup(descriptor)
            guard copy >= 0 else { return }
            fd = copy
        } else {
            missing = true
        }
        components = path
    }

    enum Known {
        case open(Int32)
        case missing
        case unknown
    }
}
