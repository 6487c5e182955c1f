import Foundation
import SalutStreams

/// What each sender's part files hold, for the per-sender cap (``Inbox/checkPartRoom(for:adding:replacing:)``):
/// counted by a walk of the inbox now and then (``Inbox/countParts()``, which the daemon runs
/// every few minutes, off any offer's way), and kept up to date between walks by the offers
/// that are taken (their part files are counted at once) and the files that get their names
/// (theirs no longer are). An offer never waits for a walk: an inbox of hundreds of thousands
/// of folders costs its walk, not every offer's answer.
extension Inbox {
    /// The tag of `sender` in its part files' names (`NAME.<tag>.peerxfer-part`).
    static func partTag(of sender: String) -> String {
        let suffix = TransferLimits.partName(of: "", from: sender)  // ".<tag>.peerxfer-part"
        return String(decoding: suffix.utf8.dropFirst().dropLast(TransferLimits.partSuffix.utf8.count), as: UTF8.self)
    }

    /// Walks the inbox (blocking) and replaces the ledger with every part file found, by its
    /// sender's tag. Symlinks are not followed; names are compared as bytes.
    func countParts() {
        guard let walk = FileManager.default.enumerator(atPath: path) else { return }
        var found: [String: [String: UInt64]] = [:]
        for case let relative as String in walk where TransferLimits.isPartName(relative) {
            var info = stat()
            guard fstatat(root, relative, &info, AT_SYMLINK_NOFOLLOW) == 0, (info.st_mode & S_IFMT) == S_IFREG else {
                continue
            }
            // NAME.<tag>.peerxfer-part: the tag is what lies between the last two dots.
            let bare = relative.utf8.dropLast(TransferLimits.partSuffix.utf8.count)
            guard let dot = bare.lastIndex(of: UInt8(ascii: ".")) else { continue }
            let tag = String(decoding: bare[bare.index(after: dot)...], as: UTF8.self).lowercased()
            found[tag, default: [:]][relative] = UInt64(info.st_size)
        }
        partLedger.withLock { $0 = found }
    }

    /// Checks that `sender` may have `bytes` more in part files, at the paths `replacing` (from
    /// the inbox): when it has other part files here, those and `bytes` together must stay
    /// within ``partShareOfOneSender`` of the file system; a sender with none is held to the
    /// free space alone (see ``promise(_:)``). When it may, the new part files are counted at
    /// once, so that offers in quick succession cannot each pass alone.
    /// - Throws: ``PeerTransferError/limit(_:)`` saying how much the sender's unfinished files
    ///   hold, naming some, and how to free them; ``PeerTransferError/runtime(_:)`` when the
    ///   file system's size cannot be read.
    func checkPartRoom(for sender: String, adding bytes: UInt64, replacing: [String: UInt64]) throws {
        guard bytes > 0 else { return }
        var info = statvfs()
        guard fstatvfs(root, &info) == 0 else {
            throw PeerTransferError.runtime(
                "cannot read the size of the inbox's disk: \(String(cString: strerror(errno)))")
        }
        let limit = UInt64(Double(UInt64(info.f_blocks) * UInt64(info.f_frsize)) * partShareOfOneSender.withLock { $0 })
        let tag = Self.partTag(of: sender)
        let others = partLedger.withLock { ledger -> [String: UInt64] in
            let others = (ledger[tag] ?? [:]).filter { replacing[$0.key] == nil }
            let held = others.values.reduce(0, +)
            guard held == 0 || held + bytes <= limit else { return others }
            ledger[tag, default: [:]].merge(replacing) { _, new in new }
            return [:]
        }
        guard !others.isEmpty else { return }
        let held = others.values.reduce(0, +)
        let suffix = TransferLimits.partName(of: "", from: sender).utf8.count
        let names = others.keys.sorted().map { String(decoding: $0.utf8.dropLast(suffix), as: UTF8.self) }
        let shown =
            names.prefix(3).map { "\"" + Terminal.escape($0) + "\"" }.joined(separator: ", ")
            + (names.count > 3 ? "…" : "")
        throw PeerTransferError.limit(
            "this sender already has \(Wording.bytes(held)) of unfinished files at the receiver (\(Wording.counted(names.count, "file")) whose transfer was cut: \(shown)), and the receiver keeps at most \(Wording.bytes(limit)) of them for one sender; with this offer's \(Wording.bytes(bytes)) still to come, that is too much. Send those files again to finish them, send less at once, or wait until the receiver clears them (after the days of its --keep-parts)"
        )
    }

    /// Takes `sender`'s part file for `path` out of the ledger: its file got its name, or was
    /// given up.
    func forgetPart(of sender: String, _ path: RelativePath) {
        let relative = (path.parent + [TransferLimits.partName(of: path.name, from: sender)]).joined(separator: "/")
        let tag = Self.partTag(of: sender)
        partLedger.withLock { _ = $0[tag]?.removeValue(forKey: relative) }
    }
}
