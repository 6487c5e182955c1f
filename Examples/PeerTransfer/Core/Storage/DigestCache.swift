import Foundation
import SalutStreams

/// The SHA-256 of files the receiver offers as `existing`, remembered by the file's identity
/// and times, and computed once when several transfers ask for the same file at once.
///
/// Without it, every offer of a large file that the inbox already holds re-read and re-hashed
/// that file before the answer: a peer offering one such file over and over, on every
/// connection the daemon admits, kept all of them busy hashing. A file whose bytes change
/// gets a new change time (`st_ctime`, which no unprivileged call can set back), so a
/// remembered digest is only used for the very same bytes. Two cautions make that hold:
/// a digest is remembered only when the file's key is the same after hashing as before, and
/// only once the change time lies further back than the kernel's timestamp granularity (before
/// Linux 6.13, a write within the same clock tick as the last change keeps the same ctime).
final class DigestCache: Sendable {
    /// What identifies a file's contents: device, inode, size, and the modification and change
    /// times to the nanosecond.
    struct Key: Hashable, Sendable {
        var device: UInt64
        var inode: UInt64
        var size: UInt64
        var modified: [Int]
        var changed: [Int]
        /// For a part file's chunk digests: the chunk size they are of (0 for a whole file's).
        var chunkSize = 0

        /// The key of the file whose fstat is `info`.
        init(_ info: stat) {
            device = UInt64(info.st_dev)
            inode = UInt64(info.st_ino)
            size = UInt64(info.st_size)
            modified = [info.st_mtim.tv_sec, info.st_mtim.tv_nsec]
            changed = [info.st_ctim.tv_sec, info.st_ctim.tv_nsec]
        }
    }

    /// One hashing in progress: others asking for the same key wait for it.
    ///
    /// `@unchecked Sendable`: `digest` is written once, by the thread that hashes, before
    /// `group.leave()`; others read it only after `group.wait()` returned.
    private final class Flight: @unchecked Sendable {
        let group = DispatchGroup()
        var digests: [SHA256Digest]?
    }

    /// A whole file's digest is one element; a part file's chunk digests are many.
    private enum Entry {
        case known([SHA256Digest])
        case hashing(Flight)
    }

    private let entries = Locked<[Key: Entry]>([:])
    private let capacity: Int
    /// The time now, as file times are taken (`CLOCK_REALTIME`); nil when it cannot be read.
    private let now: @Sendable () -> timespec?

    /// A cache of at most `capacity` digests (when full, half of them are forgotten), judging
    /// files' change times by `now` (the system's clock; tests give another).
    init(capacity: Int = 4_096, now: @escaping @Sendable () -> timespec? = DigestCache.realTime) {
        self.capacity = capacity
        self.now = now
    }

    /// `CLOCK_REALTIME` now, the clock file times are taken from.
    static func realTime() -> timespec? {
        var now = timespec()
        return clock_gettime(CLOCK_REALTIME, &now) == 0 ? now : nil
    }

    /// How far back a change time must lie for a digest to be remembered: twice the coarse
    /// clock's resolution, which file timestamps are taken from on kernels before 6.13.
    static let settleTime: Duration = {
        var resolution = timespec()
        guard clock_getres(CLOCK_REALTIME_COARSE, &resolution) == 0 else { return .milliseconds(20) }
        return .seconds(resolution.tv_sec) * 2 + .nanoseconds(resolution.tv_nsec) * 2
    }()

    /// True when `info`'s change time lies further back than ``settleTime``: a later change of
    /// the file is sure to give it another change time.
    func isSettled(_ info: stat) -> Bool {
        guard let now = now() else { return false }
        let age = Duration.seconds(now.tv_sec - info.st_ctim.tv_sec) + .nanoseconds(now.tv_nsec - info.st_ctim.tv_nsec)
        return age > Self.settleTime
    }

    /// The digest for `key`: remembered, or waited for while another thread computes it, or
    /// computed by `hash` now (on the calling thread, which it blocks). `hash` also says
    /// whether its digest may be remembered; a failed `hash` (nil) is not.
    func digest(for key: Key, hash: () -> (digest: SHA256Digest, remember: Bool)?) -> SHA256Digest? {
        digests(for: key) { hash().map { ([$0.digest], $0.remember) } }?.first
    }

    /// Hashings computed so far (not answered from memory or by waiting): for tests.
    var hashings: Int { computed.withLock { $0 } }
    private let computed = Locked(0)

    /// Like ``digest(for:hash:)``, for a list of digests (a part file's chunks): remembered,
    /// waited for, or computed by `hash` now.
    func digests(for key: Key, hash: () -> (digests: [SHA256Digest], remember: Bool)?) -> [SHA256Digest]? {
        enum Step { case known([SHA256Digest]), wait(Flight), compute(Flight) }
        let step = entries.withLock { entries -> Step in
            switch entries[key] {
            case .known(let digest)?: return .known(digest)
            case .hashing(let flight)?: return .wait(flight)
            case nil:
                let flight = Flight()
                flight.group.enter()
                entries[key] = .hashing(flight)
                return .compute(flight)
            }
        }
        switch step {
        case .known(let digests):
            return digests
        case .wait(let flight):
            flight.group.wait()
            return flight.digests
        case .compute(let flight):
            computed.withLock { $0 += 1 }
            let outcome = hash()
            flight.digests = outcome?.digests
            entries.withLock { entries in
                if let outcome, outcome.remember {
                    if entries.count >= capacity { forgetHalf(&entries) }
                    entries[key] = .known(outcome.digests)
                } else {
                    entries[key] = nil
                }
            }
            flight.group.leave()
            return outcome?.digests
        }
    }

    /// How many digests are remembered (for tests).
    var count: Int {
        entries.withLock { $0.values.count { if case .known = $0 { true } else { false } } }
    }

    /// Forgets half of the remembered digests (which half matters only for how often a file is
    /// hashed again, never for what is answered).
    private func forgetHalf(_ entries: inout [Key: Entry]) {
        let known = entries.compactMap { key, entry -> Key? in
            if case .known = entry { return key } else { return nil }
        }
        for key in known.prefix(max(1, known.count / 2)) { entries[key] = nil }
    }
}
