import Foundation
import SalutStreams

/// Trust-on-first-use memory: the public-key fingerprint first trusted for each peer, in
/// memory (ephemeral sessions) or in a `TrustedKeys` book shared by the sessions and
/// processes that use the same file.
///
/// A peer is named by its host and port or its service (see `PeerStreamTask`), compared without
/// ASCII case as DNS names are. The book reads its file again whenever it changed and changes it
/// only under an exclusive lock (`FILE.lock`) on a fresh read, so that two processes never lose
/// each other's pins. It fails closed: a file that cannot be read or understood when the
/// session first needs it trusts no peer at all (each is refused, saying why); one damaged or
/// removed later keeps the keys read before and takes no new one; neither is written over. A
/// key is remembered only once the whole decision, the delegate's included, has trusted it
/// (``remember(peer:fingerprint:)``), and only if no other key was remembered for that peer
/// meanwhile: two first uses at once with different keys cannot both go on.
final class TrustStore: Sendable {
    private let file: URL?
    /// The pins of an ephemeral store (no file), and those of a file store that could not be
    /// saved (kept for this session, so that a failing disk does not mean "trust anyone").
    private let memory = Locked<[[UInt8]: String]>([:])
    /// The book on `file`, once it could be opened.
    private let book = Locked<TrustedKeys?>(nil)

    init(file: URL?) {
        self.file = file
    }

    /// Judges `fingerprint` for `peer`: nil when it is the key remembered for it, or when the
    /// peer is new (first use: the caller remembers it once trusted); else why not.
    func check(peer: String, fingerprint: String) -> TLSError? {
        // The file's entry first (a person may have removed it to accept a new key); a pin kept
        // in memory only when the file has none.
        var seen: String?
        if file != nil {
            do {
                seen = try opened().key(for: peer)
            } catch {
                return .untrustedPeer(reason: "\(error)")
            }
        }
        if seen == nil { seen = memory.withLock { $0[ASCIICase.folded(peer)] } }
        guard let seen else { return nil }
        return seen == fingerprint.lowercased()
            ? nil
            : .untrustedPeer(reason: "the public key of \(peer) changed (was SHA-256 \(seen), now \(fingerprint))")
    }

    /// Remembers `fingerprint` for `peer` after it was trusted, unless a key was remembered for
    /// it meanwhile (by another connection, session or process): that one stays.
    /// - Returns: false when another key is remembered for `peer`, or the book is damaged, so
    ///   this connection must not go on; true when `fingerprint` is the one remembered (when it
    ///   could not be saved, it is kept for this session, and the log says why).
    func remember(peer: String, fingerprint: String) -> Bool {
        let pinInMemory = {
            self.memory.withLock { known in
                let name = ASCIICase.folded(peer)
                if known[name] == nil { known[name] = fingerprint.lowercased() }
                return known[name] == fingerprint.lowercased()
            }
        }
        guard let file else { return pinInMemory() }
        do {
            try FileManager.default.createDirectory(
                at: file.deletingLastPathComponent(), withIntermediateDirectories: true)
            // A key pinned in memory (its save failed) holds until the book has one.
            let pinned = memory.withLock { $0[ASCIICase.folded(peer)] }
            if let pinned, pinned != fingerprint.lowercased() { return false }
            let trusted = try opened().trustOnFirstUse(fingerprint, for: peer)
            if trusted, pinned != nil { _ = memory.withLock { $0.removeValue(forKey: ASCIICase.folded(peer)) } }
            return trusted
        } catch let error as TrustedKeys.Failure where error.code == .cannotWrite {
            // Pinned for this session all the same: a later key for the peer is held to it.
            // A library does not write to the program's terminal: the log says it.
            SalutLogging.logger.error("cannot save trusted peers (kept for this session only): \(error)")
            return pinInMemory()
        } catch let error as TrustedKeys.Failure where [.locked, .unnormalizedName, .full].contains(error.code) {
            SalutLogging.logger.error("\(peer) is not trusted on first use: \(error)")
            return false
        } catch let error as StoreUnreadable {
            SalutLogging.logger.error("\(error.description)")
            return false
        } catch {
            SalutLogging.logger.error("\(StoreUnreadable(error).description)")
            return false
        }
    }

    /// The book on the file, opened the first time it can be.
    /// - Throws: ``StoreUnreadable`` when the file exists but cannot be used.
    private func opened() throws -> TrustedKeys {
        do {
            return try book.withLock { book in
                if let book { return book }
                let opening = try TrustedKeys(path: file!.path)
                book = opening
                return opening
            }
        } catch {
            throw StoreUnreadable(error)
        }
    }

    /// Why the store's file could not be used.
    struct StoreUnreadable: Error, CustomStringConvertible {
        var description: String

        init(_ error: any Error) {
            description =
                "the trust store cannot be used (\(error)); no new peer is trusted on first use until it is fixed or moved away"
        }
    }
}
