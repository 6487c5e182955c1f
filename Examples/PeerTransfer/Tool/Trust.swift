import ArgumentParser
import Foundation
import PeerTransferCore
import Salut

/// `peerxfer trust`: pair with a receiver (pin its key), or trust a sender's key.
struct Trust: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Pair with a peer: pin a receiver's key, or trust a sender's key to deliver here.",
        discussion: """
            Trust is by key: a name is only a label, and anyone on the link can answer to one. Three ways:
              peerxfer trust --pin Kitchen 368bc9ff…(64 hex digits)   pin the key `peerxfer identity` printed on Kitchen (no network needed)
              peerxfer trust Kitchen                               look Kitchen up, show its key and verification code, and ask
              peerxfer trust 368bc9ff…(64 hex digits)              trust a sender's key to deliver under `serve --accept known`
              peerxfer trust 368bc9ff2a0d14e7                      the same, by its first 16 digits, for a sender that came here (its whole key is shown to confirm)
            A pinned receiver is sent to only while it proves that key; a key change is refused (exit 6) until `peerxfer untrust NAME`. Pairing by name also trusts the key as a sender, and by --pin too.

            Exit codes: 0 trusted; 1 runtime error; 2 usage error; 3 no receiver of that name was found within --wait seconds; 6 not trusted: the name advertises no key or a key other than the one pinned, or (without a terminal to ask on) a name given without its key.
            """
    )

    @Argument(
        help: ArgumentHelp(
            "A receiver's name, or a sender's key: all 64 hex digits as `peerxfer identity` prints it, or the start of the key (16 hex digits at least) of a sender that offered files here or was turned away.",
            valueName: "name-or-key"))
    var peer: String = ""

    @Argument(
        help: ArgumentHelp(
            "With --pin: the receiver's key, all 64 hex digits, as `peerxfer identity` prints it on that device.",
            valueName: "key"))
    var key: String?

    @Flag(
        help:
            "Pin NAME to KEY, obtained out of band (from `peerxfer identity` on that device), without looking at the network."
    )
    var pin = false

    @Flag(
        help: "List the receivers paired here (name and key) and the senders' keys trusted here, and do nothing else.")
    var list = false

    @OptionGroup var config: ConfigOptions

    @Option(
        parsing: .unconditional,
        help: ArgumentHelp(
            "Seconds to look for a receiver named so before giving up with exit 3.", valueName: "seconds"))
    var wait: Double = 5

    func validate() throws {
        if list {
            guard peer.isEmpty, key == nil, !pin else { throw ValidationError("--list takes no name or key") }
            return
        }
        guard !peer.isEmpty else { throw ValidationError("give a receiver's name or a sender's key (or --list)") }
        guard wait.isFinite, wait >= 0.01, wait <= 86_400 else {
            throw ValidationError("--wait must be a number of seconds above 0 (0.01 at least), at most 86400")
        }
        if pin { try PeerNameRule.check(peer, option: "NAME") }
        if pin && key == nil {
            throw ValidationError(
                "--pin needs the name and the key: peerxfer trust --pin NAME KEY (the key as `peerxfer identity` prints it on that device)"
            )
        }
        if key != nil && !pin {
            throw ValidationError(
                "a name and a key: did you mean `peerxfer trust --pin \(Terminal.escape(peer)) \(Terminal.escape(key ?? ""))`?"
            )
        }
    }

    func run() async throws {
        // Trusting before the first `serve` is fine, but a mistyped --config would trust into a
        // new folder that no daemon reads: said when one is made.
        if list { return try listTrust() }
        let configuration = try config.loadSayingIfMade()
        let file = configuration.knownPeersFile
        if pin, let key { return try pinGivenKey(key, configuration: configuration) }
        let fingerprint = peer.lowercased().filter { $0 != ":" }
        let digits = fingerprint.filter { $0 != "…" }
        if digits.count >= 8, digits.count < 64, let hex = KeyText.digits(digits) {
            return try await trustSeenKey(startingWith: hex, configuration: configuration)
        }
        if let whole = KeyText.whole(peer) {
            try KnownPeers.update(at: file) { $0.trusted[whole] = $0.trusted[whole] ?? KnownPeers.trustedByFingerprint }
            printLine("trusted key \(whole)")
            return
        }
        if peer.utf8.count > 63 {
            // Too long for a name (DNS-SD names are at most 63 bytes): a key with a typo.
            let wrong = fingerprint.unicodeScalars.enumerated().first { KeyText.digits(String($0.element)) == nil }
            throw PeerTransferError.usage(
                wrong.map {
                    "\"\(Terminal.escape(peer))\" is not a key: character \($0.offset + 1) (\(Terminal.escape(String($0.element)))) is not a hex digit"
                }
                    ?? "\"\(Terminal.escape(peer))\" is not a key (\(fingerprint.count) hex digits, not 64), and too long for a name (at most 63 bytes)"
            )
        }
        try await pair(
            with: try await receiver(looksLikeKey: KeyText.digits(digits) != nil), configuration: configuration)
    }

    /// `trust --pin NAME KEY`: pins the name to the whole key given.
    private func pinGivenKey(_ key: String, configuration: PeerConfiguration) throws {
        try ServiceNames.checkName(peer, allowEmpty: false)
        guard let whole = KeyText.whole(key) else {
            // Not hex: said which character is wrong. Hex, but not all of it: a pin is a
            // whole key (a start of one is for --expect-key and `trust` of a sender).
            if KeyText.digits(key) == nil { _ = try KeyText.prefix(key, option: "KEY") }
            let count = KeyText.digits(key)?.count ?? 0
            throw PeerTransferError.usage(
                "KEY: a pin takes all 64 hex digits of the receiver's key, as `peerxfer identity` prints it there (\"\(Terminal.escape(key))\" has \(count)); to check only the first 16, send with --expect-key instead"
            )
        }
        try Self.pin(peer, to: whole, in: configuration.knownPeersFile, configOption: configuration.configOption)
    }

    /// The receiver named `peer`, resolved (`looksLikeKey`: the name is a few hex digits, most
    /// likely a key cut short, which the refusal then says).
    private func receiver(looksLikeKey: Bool) async throws -> ResolvedService {
        let resolved: ResolvedService
        do {
            resolved = try await DiscoveredService(name: peer, type: TransferLimits.serviceType).resolve(timeout: wait)
        } catch let error as DiscoveryError where ![.notFound, .timedOut, .cancelled].contains(error.code) {
            // The daemon failed or refused: not a receiver that is not there.
            throw PeerTransferError.runtime("cannot look for \"\(Terminal.escape(peer))\": \(error)")
        } catch {
            // A few hex digits were most likely a key cut short rather than a name.
            let keyHint =
                looksLikeKey
                ? "; if \"\(Terminal.escape(peer))\" is the start of a key, give all 64 hex digits (`peerxfer peers --json` shows them)"
                : await Self.namesLike(peer).map { "; did you mean \($0)?" }
                    ?? "; `peerxfer peers` lists the receivers that can be seen, or pin its key with --pin NAME KEY"
            throw PeerTransferError.peerNotFound(
                "no receiver named \"\(Terminal.escape(peer))\" was found within \(wait.rounded() == wait ? String(Int(wait)) : String(wait)) s (\(error))\(keyHint)"
            )
        }
        return resolved
    }

    /// Pairs with a receiver found on the link: shows its key and verification code and pins it
    /// once the person confirms (or says it is paired already, or refuses a changed key).
    private func pair(with resolved: ResolvedService, configuration: PeerConfiguration) async throws {
        let file = configuration.knownPeersFile
        guard let advertised = resolved.advertisedPublicKeySHA256(forTXTKey: "fp") else {
            throw PeerTransferError.trust("\"\(Terminal.escape(peer))\" advertises no key fingerprint")
        }
        let published = resolved.service.name
        let known = try KnownPeers.load(from: file)
        switch known.verdict(forReceiver: published, key: advertised) {
        case .pinned(let spelled):
            try KnownPeers.update(at: file) { $0.trusted[advertised] = $0.trusted[advertised] ?? spelled }
            printLine(
                "\"\(Terminal.escape(spelled))\" is paired already (key \(advertised)); its key is trusted to deliver here"
            )
            return
        case .keyChanged(let pinnedAs, let pinnedKey):
            throw Sender.keyChanged(
                name: published, key: advertised, pinnedAs: pinnedAs, pinnedKey: pinnedKey,
                configOption: configuration.configOption)
        case .renamed, .trustedKey, .new:
            break
        }
        let code = VerificationCode.between(configuration.identity.publicKeySHA256, advertised)
        let command = "peerxfer trust --pin \(ShellWord.quoted(published)) \(advertised)\(configuration.configOption)"
        guard isatty(0) == 1 && isatty(2) == 1 else {
            throw PeerTransferError.trust(
                """
                "\(Terminal.escape(published))" answers with the key \(advertised) (verification code \(code)), but anyone on the link can answer to a name, \
                and there is no terminal to ask on: nothing was trusted. If `peerxfer identity` on that device prints this key, run: \(command)
                """)
        }
        printError(
            """
            "\(Terminal.escape(published))" answers on the link with:
              key                \(advertised)
              verification code  \(code)
            Compare the key with what `peerxfer identity` prints on that device (the same code shows in its prompt when it runs --accept ask).
            """)
        guard await TerminalQuestion.ask("Pin and trust this key? [y/N] ") else {
            throw PeerTransferError.trust("not trusted: you answered no")
        }
        try Self.pin(published, to: advertised, in: file, configOption: configuration.configOption)
    }

    /// `trust PREFIX`: trusts the sender whose key starts with `prefix` (at least
    /// ``KeyText/shortestPrefix`` digits: fewer can be matched by a key made for the purpose),
    /// among the keys of those that offered files here or were turned away (the daemon's
    /// status keeps them), when exactly one does. The whole key is shown, with who it was and
    /// when; on a terminal the person confirms it.
    private func trustSeenKey(startingWith prefix: String, configuration: PeerConfiguration) async throws {
        // Fewer digits can be matched by a key made for the purpose (8 take hours of one
        // core), and an attacker can push the real sender out of the list by making keys.
        guard prefix.count >= KeyText.shortestPrefix else {
            throw PeerTransferError.usage(
                "give at least \(KeyText.shortestPrefix) hex digits of the key (or all 64): \(prefix.count) could be matched by a key made for the purpose (`peerxfer identity` on that device prints the key; the receiver's log and its question show 16 digits of it)"
            )
        }
        let asked = isatty(0) == 1 && isatty(2) == 1
        let status = (try? DaemonStatus.load(from: configuration.statusFile)) ?? nil
        // Key → who it was and what it did here, newest last.
        var seen: [String: String] = [:]
        for away in status?.turnedAway ?? [] where away.key.hasPrefix(prefix) {
            seen[away.key] = "was turned away here on \(Self.time(away.time)) (not trusted), as \(away.sender)"
        }
        for offer in status?.transfers ?? [] where offer.direction == "in" {
            if let key = offer.key, key.hasPrefix(prefix) {
                seen[key] =
                    "offered \(Wording.counted(offer.files, "file")) here on \(Self.time(offer.started)), as \(offer.peer)"
            }
        }
        guard seen.count == 1, let (key, what) = seen.first else {
            throw PeerTransferError.usage(
                seen.isEmpty
                    ? "no sender whose key starts with \(prefix) has offered files here lately: give all 64 hex digits, as `peerxfer identity` prints them on that device"
                    : "\(Wording.counted(seen.count, "sender")) whose keys start with \(prefix) came here: give more of the key (`peerxfer status --json` lists their whole keys)"
            )
        }
        let known = try KnownPeers.load(from: configuration.knownPeersFile)
        if known.trusted[key] != nil {
            printLine("the key \(key) is trusted here already")
            return
        }
        let code = VerificationCode.between(configuration.identity.publicKeySHA256, key)

        printError(
            """
            the sender whose key starts with \(prefix) \(what):
              key                \(key)
              verification code  \(code)
            Compare the key with what `peerxfer identity` prints on that device.
            """)
        if asked, !(await TerminalQuestion.ask("Trust this key to deliver here? [y/N] ")) {
            throw PeerTransferError.trust("not trusted: you answered no")
        }
        try KnownPeers.update(at: configuration.knownPeersFile) {
            $0.trusted[key] = $0.trusted[key] ?? KnownPeers.trustedByFingerprint
        }
        printLine("trusted key \(key)")
    }

    private static func time(_ seconds: Double) -> String {
        Date(timeIntervalSince1970: seconds).formatted(date: .abbreviated, time: .shortened)
    }

    /// The receivers on the link now whose names `typed` may be a typo of, quoted, or nil.
    private static func namesLike(_ typed: String) async -> String? {
        let near = NameSuggestions.closest(to: typed, among: await ReceiverSearch.names(within: 1))
        return near.isEmpty ? nil : near.map { "\"\(Terminal.escape($0))\"" }.joined(separator: " or ")
    }

    /// `--list`: the paired receivers and the trusted senders, one a line (JSON-free on purpose:
    /// `known-peers.json` is the machine-readable form).
    private func listTrust() throws {
        let configuration = try config.loadExisting()
        let known = try KnownPeers.load(from: configuration.knownPeersFile)
        if known.pins.isEmpty && known.trusted.isEmpty {
            printLine(
                "nothing is paired or trusted here (peerxfer trust --pin NAME KEY pairs a receiver; peerxfer trust KEY trusts a sender)"
            )
            return
        }
        for (name, key) in known.pins.sorted(by: { $0.key < $1.key }) {
            printLine("receiver \"\(Terminal.escape(name))\"  key \(key)")
        }
        for (key, label) in known.trusted.sorted(by: { $0.key < $1.key }) {
            let named = label == KnownPeers.trustedByFingerprint ? "" : "  (trusted as \"\(Terminal.escape(label))\")"
            printLine("sender key \(key)\(named)")
        }
    }

    /// Pins `name` to `key` and trusts the key as a sender, unless the name (or one that looks
    /// like it) is pinned to another key already.
    static func pin(_ name: String, to key: String, in file: String, configOption: String) throws {
        try KnownPeers.update(at: file) { known in
            if let spelled = known.pinnedSpelling(of: name), let pinned = known.pins[spelled], pinned != key {
                throw PeerTransferError.trust(
                    "\"\(Terminal.escape(spelled))\" is pinned to the key \(pinned) already; run `peerxfer untrust \(ShellWord.quoted(spelled))\(configOption)` first if the change is expected"
                )
            }
            known.pin(name, to: key)
            known.trusted[key] = known.trusted[key] ?? name
        }
        printLine(
            "trusted \"\(Terminal.escape(name))\" with key \(key): sends to it go only to this key, and it may deliver here"
        )
    }
}

/// `peerxfer untrust`: forget a peer's pin and trust.
struct Untrust: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Forget a peer: its key, pinned under any name, and its trust as a sender.",
        discussion:
            "Exit codes: 0 forgotten; 1 runtime error; 2 usage error (among them a name or key that is neither pinned nor trusted here)."
    )

    @Argument(help: ArgumentHelp("A name or a key fingerprint.", valueName: "name-or-fingerprint"))
    var peer: String

    @OptionGroup var config: ConfigOptions

    func run() async throws {
        let configuration = try config.loadExisting()
        var forgotten: [String] = []
        try KnownPeers.update(at: configuration.knownPeersFile) { known in
            let fingerprint = peer.lowercased().filter { $0 != ":" }
            var removed: [String] = []
            // The name as pinned, in any ASCII case (not a look-alike: that is another name).
            // Trust is by key: forgetting a receiver forgets its key under every name it was
            // pinned as (a renamed device, a name found by key) and as a trusted sender.
            let spelled =
                known.pins[peer] != nil
                ? peer : known.pins.keys.sorted().first { ServiceNames.sameIgnoringASCIICase($0, peer) }
            var keys = Set<String>()
            if let spelled, let key = known.pins[spelled] { keys.insert(key) }
            if let whole = KeyText.whole(fingerprint) { keys.insert(whole) }
            // Or the start of a key (8 hex digits at least), when it names one key only.
            if keys.isEmpty, fingerprint.count >= 8, let digits = KeyText.digits(fingerprint) {
                let matching = Set(
                    known.pins.values.filter { $0.hasPrefix(digits) }
                        + known.trusted.keys.filter { $0.hasPrefix(digits) })
                guard matching.count <= 1 else {
                    throw PeerTransferError.usage(
                        "\"\(Terminal.escape(peer))\" is the start of \(matching.count) keys here; give more of it (peerxfer trust --list shows them)"
                    )
                }
                keys.formUnion(matching)
            }
            // By label, but not the placeholder of keys trusted without one (that would be all).
            for (key, label) in known.trusted where label == peer && label != KnownPeers.trustedByFingerprint {
                keys.insert(key)
            }
            for key in keys.sorted() {
                let short = "[key \(key.prefix(16))…]"
                for (name, pinned) in known.pins.sorted(by: { $0.key < $1.key }) where pinned == key {
                    known.pins[name] = nil
                    removed.append("the receiver \"\(Terminal.escape(name))\" \(short) (pinned)")
                }
                if let label = known.trusted.removeValue(forKey: key) {
                    removed.append(
                        label == KnownPeers.trustedByFingerprint
                            ? "the sender \(short) (trusted by its key)"
                            : "the sender \"\(Terminal.escape(label))\" \(short) (trusted)")
                }
            }
            guard !removed.isEmpty else {
                throw PeerTransferError.usage(
                    "\"\(Terminal.escape(peer))\" is neither pinned nor trusted here (peerxfer trust --list shows what is)"
                )
            }
            forgotten = removed
        }
        // Trust is by key: the same key under other names goes too, and the person is told.
        for line in forgotten { printLine("forgot \(line)") }
    }
}
