import Foundation
import Glibc

/// One `serve` per configuration folder: an exclusive `flock(2)` on `CONFIG/serve.lock`, held
/// for as long as the daemon runs.
///
/// Two daemons on one configuration would share one key, one background queue and one
/// `status.json`, and the second to stop would leave "not running" behind while the first
/// still serves. The lock is the kernel's: it goes when the process ends, however it ends (a
/// SIGKILL or a crash leaves no stale lock to clean up), and the file holds the holder's pid
/// for the message the next one prints.
public final class DaemonLock {
    private let fd: Int32

    /// Takes the lock on `configuration`'s folder.
    /// - Throws: ``PeerTransferError/runtime(_:)`` naming the running daemon's pid when another
    ///   process holds the lock, or saying which call failed when the file cannot be opened,
    ///   locked or written.
    public init(for configuration: PeerConfiguration) throws {
        let path = configuration.lockFile
        let fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0o600)
        guard fd >= 0 else {
            throw PeerTransferError.runtime("cannot open \(path): \(String(cString: strerror(errno)))")
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
                    "\(who) already runs with the configuration \(configuration.directory); stop it first, or give this one its own --config (and so its own key)")
            }
            throw PeerTransferError.runtime("cannot lock \(path): \(String(cString: strerror(reason)))")
        }
        let pid = Array("\(getpid())\n".utf8)
        let written = pid.withUnsafeBytes { pwrite(fd, $0.baseAddress, $0.count, 0) }
        guard written == pid.count, ftruncate(fd, off_t(pid.count)) == 0 else {
            let reason = errno
            close(fd)
            throw PeerTransferError.runtime("cannot write \(path): \(String(cString: strerror(reason)))")
        }
        self.fd = fd
    }

    /// Lets go of the lock (closing the file releases it).
    deinit { close(fd) }

    /// The pid a holder wrote in the file, if it reads as one.
    private static func recordedPid(_ fd: Int32) -> Int32? {
        var bytes = [UInt8](repeating: 0, count: 16)
        let n = bytes.withUnsafeMutableBytes { pread(fd, $0.baseAddress, $0.count, 0) }
        guard n > 0 else { return nil }
        let text = String(decoding: bytes[0..<n], as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        return Int32(text).flatMap { $0 > 0 ? $0 : nil }
    }
}
