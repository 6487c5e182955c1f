import Foundation
import Salut

extension Sender {
    /// How a send reaches its receiver, as a state machine: from the look-up of the name to an
    /// open connection with a key judged, the trust decision included. Events in (what the
    /// look-up, the search by key, the person asked and the connection gave), actions out
    /// (what the shell does next); no I/O. The shell, ``Sender/send(preparing:to:events:)``,
    /// performs each action and feeds back its result.
    ///
    /// Trust is by key. A name that is not there, or that answers with another key than the
    /// one expected or pinned, makes the machine look for the wanted key under any name (a
    /// squatter that took the name first makes avahi-daemon rename the real receiver). The
    /// key found is then judged: the expected key (`--expect-key`), the pins (a changed key is
    /// refused), a queued send's grant, and last the first-contact rule (refuse, ask a
    /// person, or accept a new key as the user said in advance).
    struct StateMachine: Sendable {
        /// What the sender was asked to do and how it treats a receiver new here.
        struct Settings: Sendable {
            /// The receiver's name as the user gave it.
            var name: String
            /// The DNS-SD domain it is looked for in (`local`: the link).
            var domain = "local"
            /// Hex digits the receiver's key must start with (`--expect-key`).
            var expectedKey: String?
            /// What to do with a receiver new here.
            var firstContact = FirstContactRule.refuse
            /// Whether a queued send's `--accept-new-key` grant may pin on first contact.
            var honoursQueuedGrants = false
            /// This device's key (for the verification code).
            var ownKey = ""
            /// The `--config` option to repeat in the commands a refusal suggests.
            var configOption = ""

            /// Whether the receiver is looked for on the link, not in a wide-area zone.
            var onTheLink: Bool { ["local", "local.", ""].contains(domain.lowercased()) }
        }

        /// ``FirstContact`` without the question itself (the shell holds that).
        enum FirstContactRule: Sendable, Equatable {
            case refuse, acceptNewKey, ask
        }

        /// When the receiver's key is written into the pins.
        enum PinTime: Sendable, Equatable {
            /// It is pinned already (or vouched for by nothing that pins).
            case never
            /// At once: a paired device met under another name.
            case beforeSending
            /// Once the receiver accepts the offer: a device new here, whose person sees the
            /// verification code and can say no (a first contact not taken pins nothing).
            case onceAccepted
        }

        /// The receiver reached, as the shell reports and pins it.
        struct Reached: Sendable, Equatable {
            /// Its name as it publishes it.
            var published: String
            /// Its name as pinned: the published name on the link, `NAME.ZONE` in a zone.
            var spelled: String
            /// The SHA-256 of its key, hex, as advertised and proven in the handshake.
            var key: String
            /// Whether it is new here.
            var firstUse: Bool
            /// The name its key is known under here, when met under another.
            var renamedFrom: String?
            /// When its key is pinned.
            var pin: PinTime
            /// Whether it was found by its key rather than by the name asked for.
            var foundByKey: Bool
        }

        /// Why a connection attempt failed, as the shell classifies it.
        enum ConnectFailure: Sendable, Equatable {
            /// The TLS handshake failed: `pinMismatch` when the key proven was not the one
            /// pinned; `presented`, the key it presented, when known.
            case tls(pinMismatch: Bool, presented: String?, description: String)
            /// The address refused, or the name no longer resolves: it stopped a moment ago.
            case unreachable(description: String)
            /// Anything else.
            case other(description: String)
        }

        /// What the shell does next.
        enum Action: Sendable, Equatable {
            /// Look on the link for receivers advertising this key (or a key starting with
            /// these digits), under any name, and report them with ``searchedByKey(_:)``.
            case searchByKey(String)
            /// Say why the receiver was not found (the shell knows the names on the link and
            /// when a paired one was last reached); the send ends.
            case reportNotFound
            /// The send ends with this error.
            case fail(PeerTransferError)
            /// Ask the person whether to trust this receiver; answer with ``answered(trusting:)``.
            case ask(NewReceiver)
            /// Connect to `service`, pinning `key` in the TLS handshake; report with
            /// ``connected()`` or ``connectionFailed(_:)``.
            case connect(DiscoveredService, key: String)
            /// The receiver is reached: offer the plan.
            case transfer(Reached)
        }

        /// A receiver whose key was judged.
        private struct Judged: Sendable {
            var reached: Reached
            var service: DiscoveredService
            var alternatives: [ResolvedService]
        }

        private enum State: Sendable {
            /// The name is being looked up.
            case lookingUp
            /// The wanted key is looked for under any name; `fallback`: what the name found,
            /// used when nobody advertises the key.
            case searchingByKey(fallback: ResolvedService?)
            /// A person is asked about a receiver new here.
            case asking(Judged)
            /// Connecting, with those advertising the same key to try should this one fail its
            /// TLS check.
            case connecting(Judged, next: [DiscoveredService])
            /// Reached, or ended: no more events are expected.
            case done
        }

        let settings: Settings
        private var state = State.lookingUp
        /// The known-peers book as read once the look-up ended (or why it could not be read:
        /// said only when a decision needs it).
        private var book: Result<KnownPeers, PeerTransferError> = .success(KnownPeers())

        init(_ settings: Settings) {
            self.settings = settings
        }

        /// The look-up of the name ended, with what it found or why not; `book` is the
        /// known-peers book read then.
        mutating func lookedUp(
            _ result: Result<ResolvedService, PeerTransferError>, book: Result<KnownPeers, PeerTransferError>
        ) -> Action {
            guard case .lookingUp = state else { return unexpected("lookedUp") }
            self.book = book
            switch result {
            case .failure(let error):
                // Only a name that is not there (not a failed name server) is looked for by key,
                // and only on the link.
                guard error.exitCode == 3, settings.onTheLink else { return end(.fail(error)) }
                switch wantedKey(for: settings.name) {
                case .failure(let error): return end(.fail(error))
                case .success(nil): return end(.reportNotFound)
                case .success(let wanted?):
                    state = .searchingByKey(fallback: nil)
                    return .searchByKey(wanted)
                }
            case .success(let found):
                if settings.onTheLink {
                    switch wantedKey(for: found.service.name) {
                    case .failure(let error): return end(.fail(error))
                    case .success(let wanted?)
                    where (try? Sender.advertisedKey(found, name: settings.name))?.hasPrefix(wanted) != true:
                        state = .searchingByKey(fallback: found)
                        return .searchByKey(wanted)
                    case .success:
                        break
                    }
                }
                return judge(found, alternatives: [], foundByKey: false)
            }
        }

        /// The search by key ended: those advertising the wanted key, best first.
        mutating func searchedByKey(_ found: [ResolvedService]) -> Action {
            guard case .searchingByKey(let fallback) = state else { return unexpected("searchedByKey") }
            if let first = found.first {
                return judge(first, alternatives: Array(found.dropFirst()), foundByKey: true)
            }
            guard let fallback else { return end(.reportNotFound) }
            return judge(fallback, alternatives: [], foundByKey: false)
        }

        /// The person asked about a new receiver answered.
        mutating func answered(trusting: Bool) -> Action {
            guard case .asking(let judged) = state else { return unexpected("answered") }
            guard trusting else {
                return end(
                    .fail(
                        .trust(
                            "you did not trust \"\(Terminal.escape(judged.reached.published))\" (key \(judged.reached.key.prefix(16))…); nothing was sent"
                        )))
            }
            return connect(judged)
        }

        /// The connection is open and the key proven.
        mutating func connected() -> Action {
            guard case .connecting(let judged, _) = state else { return unexpected("connected") }
            return end(.transfer(judged.reached))
        }

        /// The connection attempt failed.
        mutating func connectionFailed(_ failure: ConnectFailure) -> Action {
            guard case .connecting(let judged, var next) = state else { return unexpected("connectionFailed") }
            let name = "\"\(Terminal.escape(settings.name))\""
            switch failure {
            case .tls(pinMismatch: true, _, _) where !next.isEmpty:
                // An impostor advertising the key: the next one that advertises it.
                let candidate = next.removeFirst()
                state = .connecting(judged, next: next)
                return .connect(candidate, key: judged.reached.key)
            case .tls(_, let presented?, _):
                return end(
                    .fail(
                        .trust(
                            "the receiver \(name) presented a key (\(presented)) that is not the one it advertises (\(judged.reached.key)); refused before sending anything, this device's own key included"
                        )))
            case .tls(_, nil, let description):
                return end(.fail(.trust("TLS with \(name) failed: \(description)")))
            case .unreachable where settings.onTheLink:
                // Gone between the look-up and the connection (it stopped a moment ago and the
                // link's cache still held it): not there, as a look-up that found nothing.
                return end(.reportNotFound)
            case .unreachable(let description), .other(let description):
                return end(.fail(.runtime("cannot connect to \(name): \(description)")))
            }
        }

        // MARK: - Judging

        /// The key `name` must have, when one is known: the expected key, else the key pinned
        /// under that name (or one that looks like it).
        private func wantedKey(for name: String) -> Result<String?, PeerTransferError> {
            if let expected = settings.expectedKey { return .success(expected) }
            return book.map { known in known.pinnedSpelling(of: name).flatMap { known.pins[$0] } }
        }

        /// Judges `resolved` by its key: the expected key when one was given, then the pins (a
        /// changed key is refused), then the first-contact rule for a receiver new here.
        private mutating func judge(
            _ resolved: ResolvedService, alternatives: [ResolvedService], foundByKey: Bool
        ) -> Action {
            let published = resolved.service.name
            let key: String
            do {
                key = try Sender.advertisedKey(resolved, name: published)
            } catch let error as PeerTransferError {
                return end(.fail(error))
            } catch {
                return end(.fail(.protocolViolation("\(error)")))
            }
            // Pinned by name on the link, by name and domain in a zone: "Office" on the link and
            // "Office" in home.arpa are two receivers. Under the name as the receiver publishes
            // it ("kitchen" finds "Kitchen"), so that one receiver has one pin.
            let domain = settings.domain
            let spelled =
                settings.onTheLink
                ? published : published + "." + (domain.hasSuffix(".") ? String(domain.dropLast()) : domain)
            var judged = Judged(
                reached: Reached(
                    published: published, spelled: spelled, key: key, firstUse: false, renamedFrom: nil, pin: .never,
                    foundByKey: foundByKey),
                service: resolved.service, alternatives: alternatives)
            // The trust decision speaks of the receiver as it publishes itself.
            let name = published
            if let expected = settings.expectedKey, !key.hasPrefix(expected) {
                return end(.fail(Self.notTheExpectedKey(name: name, key: key, expected: expected)))
            }
            let known: KnownPeers
            switch book {
            case .success(let read): known = read
            case .failure(let error): return end(.fail(error))
            }
            let knownAs: String?
            switch known.verdict(forReceiver: spelled, key: key) {
            case .pinned:
                return connect(judged)
            case .keyChanged(let pinnedAs, let pinnedKey):
                return end(
                    .fail(
                        Sender.keyChanged(
                            name: name, key: key, pinnedAs: pinnedAs, pinnedKey: pinnedKey,
                            configOption: settings.configOption)))
            case .renamed(let pinnedAs) where foundByKey:
                // The paired device, found by its key under the name the link gave it.
                judged.reached.pin = .beforeSending
                judged.reached.renamedFrom = pinnedAs
                return connect(judged)
            case .renamed(let pinnedAs):
                // A device paired under another name answers to a name not paired: it may be
                // that device renamed, or that device squatting a name meant for another. Asked
                // as for a new receiver, never sent to silently.
                knownAs = pinnedAs
            case .trustedKey(let label):
                knownAs = label == KnownPeers.trustedByFingerprint ? "a trusted sender" : label
            case .new:
                knownAs = nil
            }
            return firstContact(judged, knownAs: knownAs, grantedInTheBook: known.grantsNewKey(to: spelled))
        }

        /// A receiver new here (`knownAs`: the name its key is known under, when it is): the
        /// expected key, a queued send's grant, the first-contact rule, in that order.
        private mutating func firstContact(_ judged: Judged, knownAs: String?, grantedInTheBook: Bool) -> Action {
            var judged = judged
            judged.reached.firstUse = true
            judged.reached.pin = .onceAccepted
            judged.reached.renamedFrom = knownAs
            if settings.expectedKey != nil { return connect(judged) }
            if settings.honoursQueuedGrants, grantedInTheBook { return connect(judged) }
            let (name, key) = (judged.reached.published, judged.reached.key)
            let code = VerificationCode.between(settings.ownKey, key)
            switch settings.firstContact {
            case .acceptNewKey:
                return connect(judged)
            case .ask:
                state = .asking(judged)
                return .ask(NewReceiver(name: name, key: key, code: code, knownAs: knownAs))
            case .refuse:
                return end(.fail(newReceiverRefused(judged.reached, knownAs: knownAs, code: code)))
            }
        }

        /// The refusal of a receiver that answers with another key than the one expected.
        private static func notTheExpectedKey(name: String, key: String, expected: String) -> PeerTransferError {
            .trust(
                """
                the receiver "\(Terminal.escape(name))" answers with the key \(key), not the one you expected (\(expected)…); \
                refused, nothing was sent. It may be another device using that name: compare with `peerxfer identity` on the receiver
                """)
        }

        /// The refusal of a receiver new here, saying how to pair with it.
        private func newReceiverRefused(_ reached: Reached, knownAs: String?, code: String) -> PeerTransferError {
            let also =
                knownAs.map {
                    " (this key is paired here as \"\(Terminal.escape($0))\": the same device under a new name, or that device answering to a name meant for another)"
                } ?? ""
            let (name, key, spelled) = (reached.published, reached.key, reached.spelled)
            return .trust(
                """
                "\(Terminal.escape(name))" is new to this device, and anyone on the link can answer to a name: nothing was sent. \
                It answers with the key \(key)\(also) (verification code \(code)). If `peerxfer identity` on the receiver shows that key, \
                pair with it once: peerxfer trust --pin \(ShellWord.quoted(spelled)) \(key)\(settings.configOption) \
                (or add --expect-key \(key.prefix(16)) to this send); --accept-new-key trusts whatever key answers first
                """)
        }

        /// Connects to the judged receiver; those advertising exactly its key wait their turn
        /// should it fail its TLS check.
        private mutating func connect(_ judged: Judged) -> Action {
            let key = judged.reached.key
            let next = judged.alternatives.filter { (try? Sender.advertisedKey($0, name: settings.name)) == key }
                .map(\.service)
            state = .connecting(judged, next: next)
            return .connect(judged.service, key: key)
        }

        private mutating func end(_ action: Action) -> Action {
            state = .done
            return action
        }

        /// An event the shell cannot send in this state: a bug in the shell.
        private mutating func unexpected(_ event: String) -> Action {
            assertionFailure("Sender.StateMachine: \(event) in \(state)")
            return end(.fail(.runtime("internal error: \(event) came when it could not")))
        }
    }
}
