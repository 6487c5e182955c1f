import ArgumentParser
import Foundation
import PeerTransferCore
import Salut

/// `peerxfer trust`: trust a peer's key.
struct Trust: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Trust a peer: by name (its advertised key is looked up and pinned) or by key fingerprint.",
        discussion: """
            A trusted key may deliver to `serve --accept known`. Trusting a name also pins its key for sending.

            Exit codes: 0 trusted; 1 runtime error; 2 usage error; 3 no receiver of that name was found within --wait seconds; 6 the name advertises no key, or a key other than the one pinned for it.
            """
    )

    @Argument(help: ArgumentHelp("A receiver's name, or a key's SHA-256: all 64 hex digits, as `serve` prints it and `peers --json` shows it (`peers` shortens it).", valueName: "name-or-fingerprint"))
    var peer: String

    @OptionGroup var config: ConfigOptions

    @Option(parsing: .unconditional, help: ArgumentHelp("Seconds to look for a receiver named so before giving up with exit 3.", valueName: "seconds"))
    var wait: Double = 5

    func validate() throws {
        guard wait.isFinite, wait > 0, wait <= 86_400 else { throw ValidationError("--wait must be a number of seconds above 0, at most 86400") }
    }

    func run() async throws {
        // Trusting before the first `serve` is fine, but a mistyped --config would trust into a
        // new folder that no daemon reads: said when one is made.
        let configuration = try config.loadSayingIfMade()
        var known = try KnownPeers.load(from: configuration.knownPeersFile)
        let fingerprint = peer.lowercased().filter { $0 != ":" }
        let digits = fingerprint.filter { $0 != "…" }
        if digits.count >= 12, digits.count < 64, digits.allSatisfy(\.isHexDigit) {
            throw PeerTransferError.usage("\"\(Terminal.escape(peer))\" looks like a shortened key: give all 64 hex digits (`peerxfer peers --json` shows them), or the receiver's name")
        }
        if fingerprint.count == 64, fingerprint.allSatisfy(\.isHexDigit) {
            known.trusted[fingerprint] = known.trusted[fingerprint] ?? "(by fingerprint)"
            try known.save(to: configuration.knownPeersFile)
            printLine("trusted key \(fingerprint)")
            return
        }
        if peer.utf8.count > 63 {
            // Too long for a name (DNS-SD names are at most 63 bytes): a key with a typo.
            let wrong = fingerprint.enumerated().first { !$0.element.isHexDigit }
            throw PeerTransferError.usage(wrong.map { "\"\(Terminal.escape(peer))\" is not a key: character \($0.offset + 1) (\(Terminal.escape(String($0.element)))) is not a hex digit" }
                ?? "\"\(Terminal.escape(peer))\" is not a key (\(fingerprint.count) hex digits, not 64), and too long for a name (at most 63 bytes)")
        }
        let resolved: ResolvedService
        do {
            resolved = try await DiscoveredService(name: peer, type: TransferLimits.serviceType).resolve(timeout: wait)
        } catch let error as DiscoveryError where ![.notFound, .timedOut, .cancelled].contains(error.code) {
            // The daemon failed or refused: not a receiver that is not there.
            throw PeerTransferError.runtime("cannot look for \"\(Terminal.escape(peer))\": \(error)")
        } catch {
            // A few hex digits were most likely a key cut short rather than a name.
            let keyHint = !digits.isEmpty && digits.allSatisfy(\.isHexDigit)
                ? "; if \"\(Terminal.escape(peer))\" is the start of a key, give all 64 hex digits (`peerxfer peers --json` shows them)"
                : "; `peerxfer peers` lists the receivers that can be seen, or give the key's fingerprint instead"
            throw PeerTransferError.peerNotFound("no receiver named \"\(Terminal.escape(peer))\" was found within \(wait.rounded() == wait ? String(Int(wait)) : String(wait)) s (\(error))\(keyHint)")
        }
        guard let key = resolved.txtRecord.string(for: "fp")?.lowercased(), key.count == 64, key.allSatisfy(\.isHexDigit) else {
            throw PeerTransferError.trust("\"\(Terminal.escape(peer))\" advertises no key fingerprint")
        }
        // Pinned under the name as published ("kitchen" finds "Kitchen"), as `send` pins it.
        let published = known.pinnedSpelling(of: resolved.service.name) ?? resolved.service.name
        if let pinned = known.pins[published], pinned != key {
            throw PeerTransferError.trust("\"\(Terminal.escape(published))\" advertises \(key) but was pinned with \(pinned); run `peerxfer untrust \"\(Terminal.escape(published))\"` first if the change is expected")
        }
        known.pins[published] = key
        known.trusted[key] = published
        try known.save(to: configuration.knownPeersFile)
        printLine("trusted \"\(Terminal.escape(published))\" with key \(key)")
    }
}

/// `peerxfer untrust`: forget a peer's pin and trust.
struct Untrust: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Forget a peer: its pinned key (so a new key is accepted on next use) and its trust.",
        discussion: "Exit codes: 0 forgotten; 1 runtime error; 2 usage error (among them a name or key that is neither pinned nor trusted here)."
    )

    @Argument(help: ArgumentHelp("A name or a key fingerprint.", valueName: "name-or-fingerprint"))
    var peer: String

    @OptionGroup var config: ConfigOptions

    func run() async throws {
        let configuration = try config.loadExisting()
        var known = try KnownPeers.load(from: configuration.knownPeersFile)
        let fingerprint = peer.lowercased().filter { $0 != ":" }
        var removed = 0
        if let spelled = known.pinnedSpelling(of: peer), let key = known.pins.removeValue(forKey: spelled) {
            removed += 1
            if known.trusted[key] == spelled { known.trusted[key] = nil }
        }
        if known.trusted.removeValue(forKey: fingerprint) != nil { removed += 1 }
        for (key, label) in known.trusted where label == peer {
            known.trusted[key] = nil
            removed += 1
        }
        guard removed > 0 else {
            throw PeerTransferError.usage("\"\(Terminal.escape(peer))\" is neither pinned nor trusted here")
        }
        try known.save(to: configuration.knownPeersFile)
        printLine("forgot \"\(Terminal.escape(peer))\"")
    }
}
