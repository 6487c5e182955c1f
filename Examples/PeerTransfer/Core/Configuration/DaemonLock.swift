import Foundation
import Glibc

/// One `serve` per configuration folder: an exclusive `flock(2)` on `CONFIG/serve.lock`, held
/// for as long as the daemon runs.
///
/// Two daemons on one configuration would share one key, one background queue and one
/// `status.json`, and the second to stop would leave "not running" behind while the first
/// still serves. The lock is taken before the configuration is read or made, so two daemons
/// started at once on a new folder cannot both write its key. It is the kernel's: it goes when
/// the process ends, however it ends (a SIGKILL or a crash leaves no stale lock to clean up),
/// and the file holds the holder's pid for the message the next one prints. The descriptor is
/// close-on-exec: a hook the daemon runs does not hold the lock after it.
public final class DaemonLock {
    private let fd: Int32

    /// Takes the lock on the configuration folder `directory`, making the folder (0700) when
    /// it is missing.
    /// - Throws: ``PeerTransferError/runtime(_:)`` naming the running daemon's pid when another
    ///   process holds the lock; saying what is wrong when the folder cannot be made or the file
    ///   cannot be opened, locked or written (a symlink or anything but a regular file there).
    public init(directory: String) throws {
        let shown = Terminal.escape(directory)
        do {
            try FileManager.default.createDirectory(
                atPath: directory, withIntermediateDirectories: true,
                attributes: [.posixPermissions: 0o700])
        } catch {
            throw PeerTransferError.runtime(
                "cannot make the configuration folder \(shown): \(error.localizedDescription)")
        }
        let path = (directory as NSString).appendingPathComponent(Self.fileName)
        let name = Terminal.escape(path)
        // O_NONBLOCK: a FIFO planted there must not hang the open.
        let fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0o600)
        guard fd >= 0 else {
            let reason = errno == ELOOP ? "it is a symbolic link (remove it)" : String(cString: strerror(errno))
            throw PeerTransferError.runtime("cannot open \(name): \(reason)")
        }
        var info = stat()
        guard fstat(fd, &info) == 0 else {
            let reason = String(cString: strerror(errno))
            close(fd)
            throw PeerTransferError.runtime("cannot use \(name): \(reason)")
        }
        guard info.st_mode & S_IFMT == S_IFREG, info.st_nlink == 1 else {
            close(fd)
            // A hard link would have this daemon's pid written over another file's contents.
            let what = info.st_nlink > 1 ? "it is a hard link to another file" : "it is not a regular file"
            throw PeerTransferError.runtime("cannot use \(name): \(what) (remove it)")
        }
        var result: Int32
        repeat { result = flock(fd, LOCK_EX | LOCK_NB) } while result != 0 && errno == EINTR
        guard result == 0 else {
            let reason = errno
            let holder = Self.recordedPid(fd)
            close(fd)
            if reason == EWOULDBLOCK {
                let who = holder.map { "another peerxfer serve (pid \($0))" } ?? "another peerxfer serve"
                throw PeerTransferError.runtime(
                    "\(who) already runs with the configuration \(shown); stop it first, or give this one its own --config (and so its own key)"
                )
            }
            throw PeerTransferError.runtime("cannot lock \(name): \(String(cString: strerror(reason)))")
        }
        // Emptied first: a reader never sees this pid over the end of a longer, older one.
        let pid = Array("\(getpid())\n".utf8)
        guard ftruncate(fd, 0) == 0 else {
            let reason = errno
            close(fd)
            throw PeerTransferError.runtime("cannot write \(name): \(String(cString: strerror(reason)))")
        }
        let written = pid.withUnsafeBytes { pwrite(fd, $0.baseAddress, $0.count, 0) }
        guard written == pid.count else {
            let reason = written < 0 ? String(cString: strerror(errno)) : "\(written) of \(pid.count) bytes written"
            close(fd)
            throw PeerTransferError.runtime("cannot write \(name): \(reason)")
        }
        self.fd = fd
    }

    /// Lets go of the lock (closing the file releases it).
    deinit { close(fd) }

    /// The lock file's name in the configuration folder.
    public static let fileName = "serve.lock"

    /// The pid a holder wrote in the file, if it reads as one.
    private static func recordedPid(_ fd: Int32) -> Int32? {
        var bytes = [UInt8](repeating: 0, count: 16)
        let n = bytes.withUnsafeMutableBytes { pread(fd, $0.baseAddress, $0.count, 0) }
        guard n > 0 else { return nil }
        let text = String(decoding: bytes[0..<n], as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        return Int32(text).flatMap { $0 > 0 ? $0 : nil }
    }
}
