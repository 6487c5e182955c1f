import Foundation
import Glibc

/// An exclusive `flock(2)` on a file, for work that two processes must not do at once (making
/// an identity, say): taken with a bound, given back when the work ends.
public enum FileLock {
    /// Runs `body` holding an exclusive lock on `path` (made, 0600, if missing; a symlink there
    /// is refused). Waits up to `limit` seconds for another holder to let go.
    /// - Throws: ``TLSError/cannotLoad(file:reason:)`` when the file cannot be opened or locked,
    ///   or is still locked after `limit`; what `body` throws.
    public static func withExclusiveLock<T>(
        on path: String, waitingUpTo limit: TimeInterval = 10,
        _ body: () throws -> T
    ) throws -> T {
        let fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0o600)
        guard fd >= 0 else { throw TLSError.cannotLoad(file: path, reason: String(cString: strerror(errno))) }
        defer { close(fd) }  // which lets go of the lock
        let deadline = Date().addingTimeInterval(limit)
        while flock(fd, LOCK_EX | LOCK_NB) != 0 {
            guard errno == EWOULDBLOCK || errno == EINTR else {
                throw TLSError.cannotLoad(file: path, reason: "cannot lock it: \(String(cString: strerror(errno)))")
            }
            guard Date() < deadline else {
                throw TLSError.cannotLoad(file: path, reason: "another process has held it locked for \(Int(limit)) s")
            }
            usleep(10_000)
        }
        return try body()
    }
}
