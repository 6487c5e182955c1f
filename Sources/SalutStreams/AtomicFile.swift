import Foundation

/// Whole-file replacement that never leaves a half-written file: the bytes go to a new file
/// beside the target, which is synced and renamed over it, then the folder is synced. After a
/// crash at any point the target holds either the old contents or the new, never a mix.
/// Shared by the TLS identity, the background-session journal and peerxfer's configuration.
public enum AtomicFile {
    /// A write that did not happen: which file, which call failed, and why.
    public struct Failure: Error, CustomStringConvertible {
        /// The file that was to be written.
        public let path: String
        /// The system call that failed (`open`, `write`, `fsync`, `rename`…).
        public let call: String
        /// The system's reason (strerror).
        public let reason: String

        /// One line: the file, the call and the reason.
        public var description: String { "cannot write \(path): \(call): \(reason)" }
    }

    /// Replaces the file at `path` with `data`, created with `mode`. With `durable` false the
    /// syncs are left out: for a view rewritten often, which a crash may lose but never tear.
    /// - Throws: ``Failure`` naming the failing call. Up to the rename the target is unchanged
    ///   and the temporary file removed; a failure to sync the folder after it (durable writes
    ///   only) leaves the new contents in place, not yet known to be on disk.
    public static func write(_ data: Data, to path: String, mode: mode_t, durable: Bool = true) throws {
        let temporary = path + ".\(getpid()).\(UInt32.random(in: 0...UInt32.max)).new"
        func failure(_ call: String) -> Failure {
            Failure(path: path, call: call, reason: String(cString: strerror(errno)))
        }
        let fd = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode)
        guard fd >= 0 else { throw failure("open") }
        var failed: Failure?
        data.withUnsafeBytes { raw in
            var done = 0
            while done < raw.count {
                let n = Glibc.write(fd, raw.baseAddress! + done, raw.count - done)
                if n < 0 {
                    if errno == EINTR { continue }
                    failed = failure("write")
                    return
                }
                done += n
            }
        }
        if failed == nil && durable && fsync(fd) != 0 { failed = failure("fsync") }
        if close(fd) != 0 && failed == nil { failed = failure("close") }
        if failed == nil && rename(temporary, path) != 0 { failed = failure("rename") }
        if let failed {
            unlink(temporary)
            throw failed
        }
        guard durable else { return }
        let folder = open(
            (path as NSString).deletingLastPathComponent.isEmpty ? "." : (path as NSString).deletingLastPathComponent,
            O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard folder >= 0 else { throw failure("open of the folder") }
        defer { close(folder) }
        guard fsync(folder) == 0 else { throw failure("fsync of the folder") }
    }
}
