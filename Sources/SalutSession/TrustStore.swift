import Foundation
import SalutStreams

/// Trust-on-first-use memory: the public-key fingerprint first trusted for each peer, in
/// memory (ephemeral sessions) or in a JSON file shared by the sessions and processes that use
/// the same file.
///
/// A peer is named by its host and port or its service (see `PeerStreamTask`), compared without
/// ASCII case as DNS names are. The file is read afresh for every decision and changed only under
/// an exclusive lock (`FILE.lock`) on a fresh read, so that two processes never lose each other's
/// pins. It fails closed: a file that exists but cannot be read or understood trusts no peer at
/// all (each is refused, saying why) and is never written over. A key is remembered only once
/// the whole decision, the delegate's included, has trusted it (``remember(peer:fingerprint:)``),
/// and only if no other key was remembered for that peer meanwhile: two first uses at once with
/// different keys cannot both go on.
final class TrustStore: Sendable {
    private let file: URL?
    /// The pins of an ephemeral store (no file).
    private let memory = Locked<[String: String]>([:])

    init(file: URL?) {
        self.file = file
    }

    /// Judges `fingerprint` for `peer`: nil when it is the key remembered for it, or when the
    /// peer is new (first use: the caller remembers it once trusted); else why not.
    func check(peer: String, fingerprint: String) -> TLSError? {
        let known: [String: String]
        do {
            known = try load()
        } catch {
            return .untrustedPeer(reason: error.description)
        }
        guard let seen = known[Self.folded(peer)] else { return nil }
        return seen == fingerprint
            ? nil
            : .untrustedPeer(reason: "the public key of \(peer) changed (was SHA-256 \(seen), now \(fingerprint))")
    }

    /// Remembers `fingerprint` for `peer` after it was trusted, unless a key was remembered for
    /// it meanwhile (by another connection, session or process): that one stays.
    /// - Returns: false when another key is remembered for `peer`, so this connection must not
    ///   go on; true when `fingerprint` is the one remembered (or could not be saved: the
    ///   decision stands for this connection, and the log says why).
    func remember(peer: String, fingerprint: String) -> Bool {
        let name = Self.folded(peer)
        guard let file else {
            return memory.withLock { known in
                if known[name] == nil { known[name] = fingerprint }
                return known[name] == fingerprint
            }
        }
        do {
            try FileManager.default.createDirectory(
                at: file.deletingLastPathComponent(), withIntermediateDirectories: true)
            return try FileLock.withExclusiveLock(on: file.path + ".lock") {
                var known = try load()
                if let stored = known[name] { return stored == fingerprint }
                known[name] = fingerprint
                try AtomicFile.write(try JSONEncoder().encode(known), to: file.path, mode: 0o600)
                return true
            }
        } catch let error as StoreUnreadable {
            SalutLogging.logger.error("\(error.description)")
            return false
        } catch {
            // A library does not write to the program's terminal: the log says it.
            SalutLogging.logger.error("cannot save trusted peers to \(file.path): \(error)")
            return true
        }
    }

    /// The remembered keys, read afresh. An absent file is an empty store.
    /// - Throws: ``StoreUnreadable`` when the file exists but cannot be read or parsed.
    private func load() throws(StoreUnreadable) -> [String: String] {
        guard let file else { return memory.value }
        guard FileManager.default.fileExists(atPath: file.path) else { return [:] }
        do {
            let stored = try JSONDecoder().decode([String: String].self, from: Data(contentsOf: file))
            // Names written in another case by an earlier version are the same peers.
            return Dictionary(stored.map { (Self.folded($0.key), $0.value) }) { first, _ in first }
        } catch {
            throw StoreUnreadable(
                description:
                    "the trust store \(file.path) cannot be read (\(error)); no new peer is trusted on first use until it is fixed or moved away"
            )
        }
    }

    /// Why the store's file could not be used.
    struct StoreUnreadable: Error, CustomStringConvertible {
        var description: String
    }

    /// `peer` with ASCII letters in lower case (DNS names do not compare case).
    static func folded(_ peer: String) -> String {
        String(decoding: peer.utf8.map { (0x41...0x5A).contains($0) ? $0 + 0x20 : $0 }, as: UTF8.self)
    }
}
