import Foundation
import SalutStreams

/// What each sender's part files hold, for the per-sender cap (``Inbox/checkPartRoom(for:adding:replacing:transfer:)``):
/// the part files found by a walk of the inbox now and then (``Inbox/countParts()``, which the
/// daemon runs every few minutes, off any offer's way), and the part files each transfer under
/// way reserved when its offer was taken, at their full size, until it ends (then they count
/// for what is on disk). A walk replaces what it found, never a transfer's reservation; a file
/// that gets its name, or is given up, no longer counts. An offer never waits for a walk: an
/// inbox of hundreds of thousands of folders costs its walk, not every offer's answer.
/// The counts (see above), behind the inbox's lock.
struct PartLedger: Sendable {
    /// What the last walk found: by sender's tag, each part file's path (from the inbox) and bytes.
    var walked: [String: [String: UInt64]] = [:]
    /// What each transfer under way reserved: by the transfer's number, its sender's tag and
    /// its part files' paths and full sizes.
    var reserved: [Int: (tag: String, parts: [String: UInt64])] = [:]
    /// While a walk runs: what transfers that ended and files that were named changed since it
    /// began (by tag and path: the bytes now, or nil for gone), laid over what it finds.
    var changedDuringWalk: [String: [String: UInt64?]]?

    /// Records that `tag`'s part file at `path` now holds `bytes` (nil: it is gone).
    mutating func set(_ tag: String, _ path: String, to bytes: UInt64?) {
        walked[tag, default: [:]][path] = bytes
        changedDuringWalk?[tag, default: [:]][path] = .some(bytes)
    }

    /// The bytes `tag`'s part files hold or will, but for the paths in `replacing`, and those
    /// paths (from the inbox).
    func held(by tag: String, besides replacing: [String: UInt64]) -> [String: UInt64] {
        var parts: [String: UInt64] = [:]
        for (_, reservation) in reserved where reservation.tag == tag {
            for (path, bytes) in reservation.parts where replacing[path] == nil {
                parts[path] = max(parts[path] ?? 0, bytes)
            }
        }
        for (path, bytes) in walked[tag] ?? [:] where replacing[path] == nil && parts[path] == nil {
            parts[path] = bytes
        }
        return parts
    }
}

extension Inbox {
    /// The tag of `sender` in its part files' names (`NAME.<tag>.peerxfer-part`).
    static func partTag(of sender: String) -> String {
        let suffix = TransferLimits.partName(of: "", from: sender)  // ".<tag>.peerxfer-part"
        return String(decoding: suffix.utf8.dropFirst().dropLast(TransferLimits.partSuffix.utf8.count), as: UTF8.self)
    }

    /// Walks the inbox (blocking) and replaces what the last walk found with every part file
    /// there, by its sender's tag (transfers' reservations stay).
    func countParts() {
        // One walk at a time (the sweeper's task and the counting task may both ask).
        partWalk.withLock { _ in countPartsAlone() }
    }

    private func countPartsAlone() {
        partLedger.withLock { $0.changedDuringWalk = [:] }
        var found: [String: [String: UInt64]] = [:]
        let whole = PartSweeper.forEachPartFile(below: root) { relative, info in
            // NAME.<tag>.peerxfer-part: the tag is what lies between the last two dots.
            let bare = relative.utf8.dropLast(TransferLimits.partSuffix.utf8.count)
            guard let dot = bare.lastIndex(of: UInt8(ascii: ".")) else { return }
            let tag = String(decoding: bare[bare.index(after: dot)...], as: UTF8.self).lowercased()
            found[tag, default: [:]][relative] = UInt64(info.st_size)
        }
        partLedger.withLock { ledger in
            defer { ledger.changedDuringWalk = nil }
            // A walk cut short is not all there is: what was counted before stays.
            guard whole else { return }
            // What changed while the walk ran is newer than what it saw.
            for (tag, paths) in ledger.changedDuringWalk ?? [:] {
                for (path, bytes) in paths { found[tag, default: [:]][path] = bytes }
            }
            ledger.walked = found
        }
    }

    /// Checks that `sender` may have `bytes` more in part files, at the paths `replacing` (from
    /// the inbox, with their sizes), for the transfer numbered `transfer`: when it has other
    /// part files here, those and `bytes` together must stay within ``partShareOfOneSender`` of
    /// the file system; a sender with none is held to the free space alone (see
    /// ``promise(_:)``). When it may, the new part files are reserved for the transfer until
    /// ``settleParts(of:)``, so that offers in quick succession cannot each pass alone.
    /// - Throws: ``PeerTransferError/limit(_:)`` saying how much the sender's unfinished files
    ///   hold, naming some, and how to free them; ``PeerTransferError/runtime(_:)`` when the
    ///   file system's size cannot be read.
    func checkPartRoom(for sender: String, adding bytes: UInt64, replacing: [String: UInt64], transfer: Int) throws {
        guard bytes > 0 else { return }
        var info = statvfs()
        guard fstatvfs(root, &info) == 0 else {
            throw PeerTransferError.runtime(
                "cannot read the size of the inbox's disk: \(String(cString: strerror(errno)))")
        }
        let limit = UInt64(Double(UInt64(info.f_blocks) * UInt64(info.f_frsize)) * partShareOfOneSender.withLock { $0 })
        let tag = Self.partTag(of: sender)
        let others = partLedger.withLock { ledger -> [String: UInt64] in
            let others = ledger.held(by: tag, besides: replacing)
            let held = others.values.reduce(0, +)
            guard held == 0 || held + bytes <= limit else { return others }
            var reservation = ledger.reserved[transfer] ?? (tag, [:])
            reservation.parts.merge(replacing) { _, new in new }
            ledger.reserved[transfer] = reservation
            return [:]
        }
        guard !others.isEmpty else { return }
        let held = others.values.reduce(0, +)
        let suffix = TransferLimits.partName(of: "", from: sender).utf8.count
        let names = others.keys.sorted().map { String(decoding: $0.utf8.dropLast(suffix), as: UTF8.self) }
        let shown =
            names.prefix(3).map { "\"" + Terminal.escape(Receiver.shortened($0, toBytes: 120)) + "\"" }
            .joined(separator: ", ") + (names.count > 3 ? "…" : "")
        throw PeerTransferError.limit(
            "this sender already has \(Wording.bytes(held)) of unfinished files at the receiver, or on their way (\(Wording.counted(names.count, "file")) whose transfer was cut or is under way: \(shown)), and the receiver keeps at most \(Wording.bytes(limit)) of them for one sender; with this offer's \(Wording.bytes(bytes)) still to come, that is too much. Send those files again to finish them, send less at once, or wait until the receiver clears them (after the days of its --keep-parts)"
        )
    }

    /// Ends the reservation of the transfer numbered `transfer` (blocking: one `fstatat` a part
    /// file): its part files count from now on for what is on disk, and not at all when gone.
    func settleParts(of transfer: Int) {
        guard let reservation = partLedger.withLock({ $0.reserved[transfer] }) else { return }
        var actual: [String: UInt64] = [:]
        for relative in reservation.parts.keys {
            var info = stat()
            if fstatat(root, relative, &info, AT_SYMLINK_NOFOLLOW) == 0, (info.st_mode & S_IFMT) == S_IFREG {
                actual[relative] = UInt64(info.st_size)
            }
        }
        partLedger.withLock { ledger in
            ledger.reserved[transfer] = nil
            for relative in reservation.parts.keys { ledger.set(reservation.tag, relative, to: actual[relative]) }
        }
    }

    /// Takes `sender`'s part file for `path` out of what was found on disk: its file got its
    /// name, or was given up. A transfer's reservation stays until that transfer ends (another
    /// transfer of the sender may be writing the same path).
    func forgetPart(of sender: String, _ path: RelativePath) {
        let relative = (path.parent + [TransferLimits.partName(of: path.name, from: sender)]).joined(separator: "/")
        let tag = Self.partTag(of: sender)
        partLedger.withLock { $0.set(tag, relative, to: nil) }
    }
}
