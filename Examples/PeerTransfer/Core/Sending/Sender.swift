import Foundation
import Salut

/// What a sender reports as a transfer goes on.
public enum SendEvent: Sendable {
    /// Looking for the receiver by name.
    case resolving(name: String)
    /// Connected over TLS to the receiver whose key is `key`; `firstUse` when it is new here (it
    /// is pinned once it accepts the offer).
    /// `renamedFrom`: the name its key was pinned under, when it is a known device met under
    /// a new name.
    case connected(name: String, key: String, firstUse: Bool, renamedFrom: String?)
    /// The receiver answered: entries accepted (`acceptedFiles` of them files, the rest
    /// folders), declined, files it already had, and the bytes this run will send (after
    /// resuming).
    case answered(
        accepted: Int, acceptedFiles: Int, declined: Int, alreadyThere: Int, bytesToSend: UInt64, reason: String?)
    /// A file starts (at `offset` when resuming).
    case fileStarted(index: Int, path: String, size: UInt64, offset: UInt64)
    /// Bytes handed to the connection so far in this run, of `total`.
    case progress(sent: UInt64, total: UInt64)
    /// The receiver verified a file and stored it as `storedAs` (as the receiver said it: escape
    /// it to show it).
    case fileVerified(index: Int, path: String, storedAs: String)
    /// A file did not arrive verified.
    case fileFailed(index: Int, path: String, reason: String)
}

/// How a transfer ended (when it did not throw).
public struct SendReport: Sendable {
    /// Files the receiver verified (already present ones included).
    public var verified: Int
    /// Paths of files that failed, with why.
    public var failed: [String]
    /// Paths the receiver declined.
    public var declined: [String]
    /// File bytes sent in this run.
    public var bytesSent: UInt64
    /// File bytes not sent because the receiver had them (resumed or already there).
    public var bytesSkipped: UInt64
    /// Who declined the ``declined`` entries, as the receiver's answer said (a failure
    /// frame's code; nil when none was declined or the receiver did not say).
    var declineCode: String? = nil

    /// The failure that reports the ``declined`` entries, saying `message`: declined by the
    /// receiver's hook when its answer said so, else by the person there.
    public func declineError(_ message: String) -> PeerTransferError {
        declineCode == PeerTransferError.declinedByHook("").wireCode ? .declinedByHook(message) : .declined(message)
    }
}

/// Sends a ``TransferPlan`` to a peerxfer receiver found by name.
public struct Sender: Sendable {
    /// This device's configuration (identity, pins).
    public var configuration: PeerConfiguration
    /// This device's name, as the receiver is told.
    public var displayName: String
    /// How long to look for the receiver before giving up with a peer-not-found error.
    public var findTimeout: TimeInterval = 10
    /// How long the receiver may make no progress (while a person decides, ``answerWait``).
    public var idleBound: Duration = .seconds(60)
    /// How long the sender waits for the receiver's answer to its offer: the 120 s a person or
    /// a hook has there, and time to spare.
    public static let answerWait: Duration = .seconds(150)
    /// How long this sender waits for the answer to its offer: ``answerWait`` (tests shorten it).
    var answerBound = Sender.answerWait
    /// The DNS-SD domain the receiver is published in: `local` (the link), or a wide-area zone.
    public var domain = "local"
    /// For a wide-area ``domain``: find the receiver with unicast DNS queries to this name
    /// server; nil finds it through avahi-daemon (which must be set up for the domain).
    public var wideArea: WideAreaBrowsing?
    /// The receiver's key must start with these hex digits (`--expect-key`), whatever the pins
    /// say; a receiver that is new here and passes this check is pinned.
    public var expectedKey: String?
    /// What to do with a receiver that is new here (and not vouched for by ``expectedKey``).
    public var firstContact: FirstContact = .refuse
    /// Whether a name granted by a queued `send --background --accept-new-key` may be pinned on
    /// first contact: true only for the daemon's queued sends, never for a foreground send.
    public var honoursQueuedGrants = false
    /// Stops this sender's sends between two frames and tells the receiver why (see
    /// ``SendStopper``): call its ``SendStopper/stop(_:)`` from a signal handler, for example.
    /// Nil: each transfer has one of its own, stopped only by the cancellation of its task.
    public var stopper: SendStopper?
    /// What a cancellation of the task that sends means to the receiver: interrupted (it keeps
    /// what it received, to resume) unless this says cancelled (it removes it).
    public var cancellationMeans: @Sendable () -> SendStop = { .interrupted }

    /// A sender with this device's `configuration`.
    public init(configuration: PeerConfiguration, displayName: String) {
        self.configuration = configuration
        self.displayName = displayName
    }

    /// Finds the receiver `name`, checks its key, offers the plan, and sends what it accepts.
    /// - Returns: what was verified, failed and declined; it throws for failures that end the
    ///   whole transfer.
    /// - Throws: ``PeerTransferError``: `peerNotFound` (not visible in time), `trust` (key
    ///   changed, spoofed, or the receiver does not know us), `declined` (nothing accepted),
    ///   `runtime`/`protocolViolation` for failures on the way.
    public func send(
        _ plan: TransferPlan, to name: String,
        events: @escaping @Sendable (SendEvent) -> Void = { _ in }
    ) async throws -> SendReport {
        try await send(preparing: { plan }, to: name, events: events)
    }

    /// Like ``send(_:to:events:)``, with the plan made by `preparing` while the receiver is
    /// looked for (walking a large tree and the DNS-SD lookup overlap; the connection is made
    /// once the plan is ready, so no receiver waits on a sender that is still walking).
    /// - Throws: what `preparing` throws, or what ``send(_:to:events:)`` throws.
    public func send(
        preparing: @escaping @Sendable () async throws -> TransferPlan, to name: String,
        events: @escaping @Sendable (SendEvent) -> Void = { _ in }
    ) async throws -> SendReport {
        events(.resolving(name: name))
        // Trust is by key (see `Sender.StateMachine`): this shell does what the machine says.
        var machine = StateMachine(
            StateMachine.Settings(
                name: name, domain: domain, expectedKey: expectedKey, firstContact: firstContactRule,
                honoursQueuedGrants: honoursQueuedGrants, ownKey: configuration.identity.publicKeySHA256,
                configOption: configuration.configOption))
        let onTheLink = machine.settings.onTheLink
        let (plan, looked) = try await prepare(preparing, lookingUp: name, onTheLink: onTheLink)
        let book = Result { try KnownPeers.load(from: self.configuration.knownPeersFile) }
            .mapError { $0 as? PeerTransferError ?? .runtime("\($0)") }
        let (pair, reached) = try await reach(name, with: &machine, from: machine.lookedUp(looked, book: book))
        defer {
            pair.input.close()
            pair.output.close()
        }
        let pin = pinning(reached, askedAs: name)
        if reached.pin == .beforeSending { try pin() }
        if onTheLink { LastSeen.record(reached.published, in: configuration) }
        events(
            .connected(
                name: reached.published, key: reached.key, firstUse: reached.firstUse, renamedFrom: reached.renamedFrom)
        )
        guard reached.pin == .onceAccepted else {
            return try await transfer(plan, over: pair, to: name, events: events)
        }
        // Pinned once the receiver accepts something: a first contact not taken pins nothing.
        let pinned = Locked<(done: Bool, error: (any Error)?)>((false, nil))
        let report = try await transfer(
            plan, over: pair, to: name,
            events: { event in
                if case .answered(let accepted, _, _, _, _, _) = event, accepted > 0,
                    !pinned.withLock({ state in
                        defer { state.done = true }
                        return state.done
                    })
                {
                    do { try pin() } catch { pinned.withLock { $0.error = error } }
                }
                events(event)
            })
        if let error = pinned.value.error { throw error }
        return report
    }

    /// Makes the plan while the receiver is looked for. A plan that cannot be made (bad
    /// arguments, the user's to fix) ends the look-up at once and is what is reported; a
    /// receiver not found is reported once the plan is known to be good.
    private func prepare(
        _ preparing: @escaping @Sendable () async throws -> TransferPlan, lookingUp name: String, onTheLink: Bool
    ) async throws -> (TransferPlan, Result<ResolvedService, PeerTransferError>) {
        let asked = DiscoveredService(name: name, type: TransferLimits.serviceType, domain: domain)
        return try await withThrowingTaskGroup(of: Preparation.self) { group in
            group.addTask { .plan(try await preparing()) }
            group.addTask { [self] in .lookup(await lookUp(asked, name: name, onTheLink: onTheLink)) }
            var plan: TransferPlan?
            var looked: Result<ResolvedService, PeerTransferError>?
            for try await finished in group {
                switch finished {
                case .plan(let made): plan = made
                case .lookup(let result): looked = result
                }
            }
            return (plan!, looked!)
        }
    }

    /// Performs the machine's actions from `action` on until the receiver `name` is reached:
    /// the open connection, and the receiver as the machine judged it.
    /// - Throws: the machine's failure, or why the receiver was not found.
    private func reach(
        _ name: String, with machine: inout StateMachine, from action: StateMachine.Action
    ) async throws -> (BoundStreamPair, StateMachine.Reached) {
        var action = action
        var opened: BoundStreamPair?
        while true {
            switch action {
            case .searchByKey(let wanted):
                action = machine.searchedByKey(
                    await ReceiverSearch.receivers(withKey: wanted, within: Self.searchByKey))
            case .reportNotFound:
                throw await notFound(name)
            case .fail(let error):
                opened?.input.close()
                opened?.output.close()
                throw error
            case .ask(let receiver):
                guard case .ask(let question) = firstContact else {
                    preconditionFailure("the machine asks only when the rule is to ask")
                }
                action = machine.answered(trusting: await question(receiver))
            case .connect(let service, let key):
                do {
                    opened = try await connect(service, key: key)
                    action = machine.connected()
                } catch {
                    action = machine.connectionFailed(Self.connectFailure(error))
                }
            case .transfer(let reached):
                guard let pair = opened else { preconditionFailure("the machine transfers only once connected") }
                return (pair, reached)
            }
        }
    }

    /// What pins the key of the receiver reached (asked for as `name`), when the machine says.
    ///
    /// Pinned on a fresh read of the book (a pin or an untrust made meanwhile by another
    /// command is kept, not written over). A known device found under another name: at once.
    /// A device new here: once it accepts the offer, for the person there sees the offer with
    /// the verification code beside this device's key, and says no if the codes differ (or never
    /// sees an offer at all, when something else answered to the name): a first contact not
    /// taken pins nothing, and the next send asks again.
    private func pinning(_ reached: StateMachine.Reached, askedAs name: String) -> @Sendable () throws -> Void {
        let (spelled, key, wasFoundByKey) = (reached.spelled, reached.key, reached.foundByKey)
        let configuration = self.configuration
        return {
            try KnownPeers.update(at: configuration.knownPeersFile) { known in
                if case .keyChanged(let pinnedAs, let pinnedKey) = known.verdict(forReceiver: spelled, key: key) {
                    throw Self.keyChanged(
                        name: name, key: key, pinnedAs: pinnedAs, pinnedKey: pinnedKey,
                        configOption: configuration.configOption)
                }
                // Found by its key under another name: the name the user gave is the one that
                // now stands for this key (the other is the link's doing, "Kitchen #2").
                // (Unless that name is pinned to another key: that pin stays, for `untrust`.)
                let askedIsFree = known.pinnedSpelling(of: name).map { known.pins[$0] == key } ?? true
                let label = wasFoundByKey && askedIsFree ? name : spelled
                known.pin(label, to: key)
                known.revokeNewKeyGrants { ServiceNames.sameIgnoringASCIICase($0, spelled) }
            }
        }
    }

    /// Why `name` was not found on the link, for a person: a paired receiver is said to be
    /// paired, with when it was last reached; another name gets the names it may be a typo of,
    /// from those on the link and those paired here.
    private func notFound(_ name: String) async -> PeerTransferError {
        let shown = "\"\(Terminal.escape(name))\""
        let within = "within \(Wording.duration(findTimeout))"
        let known = try? KnownPeers.load(from: configuration.knownPeersFile)
        if let pinned = known?.pinnedSpelling(of: name), ServiceNames.sameIgnoringASCIICase(pinned, name) {
            let seen = LastSeen.date(of: pinned, in: configuration).map {
                "; it was last reached \(Wording.ago(Date().timeIntervalSince($0)))"
            }
            return .peerNotFound(
                "\"\(Terminal.escape(pinned))\" is paired with this device but did not answer \(within)\(seen ?? ""): it may be off, asleep or on another network (`send --background` delivers when it appears)"
            )
        }
        // Paired in a wide-area zone (pinned as "NAME.ZONE"): said so, with the option that finds it.
        if let zoned = known?.pins.keys.sorted().first(where: {
            $0.count > name.count + 1 && $0.hasPrefix(name + ".") && !$0.dropFirst(name.count + 1).contains(" ")
        }) {
            let zone = zoned.dropFirst(name.count + 1)
            return .peerNotFound(
                "no receiver named \(shown) answered on the link \(within); it is paired in \(Terminal.escape(String(zone))): add --domain \(Terminal.escape(String(zone)))"
            )
        }
        let onTheLink = await ReceiverSearch.names(within: Self.namesLookup)
        let suggestions = NameSuggestions.closest(to: name, among: onTheLink.union(known?.pins.keys ?? [:].keys))
        if !suggestions.isEmpty {
            let listed = suggestions.map { candidate in
                "\"\(Terminal.escape(candidate))\"\(onTheLink.contains(candidate) ? " (on the link now)" : " (paired, not seen now)")"
            }
            return .peerNotFound(
                "no receiver named \(shown) answered \(within). Did you mean \(listed.joined(separator: " or "))?")
        }
        let seen =
            onTheLink.isEmpty
            ? "no receiver is visible on the link at all (is the other device's `peerxfer serve` running, on this network?)"
            : "`peerxfer peers` lists the \(Wording.counted(onTheLink.count, "receiver")) that can be seen"
        return .peerNotFound("no receiver named \(shown) answered \(within); \(seen)")
    }

    /// Seconds spent gathering the names on the link for "did you mean".
    static let namesLookup: Double = 1

    /// ``firstContact`` as the state machine knows it (without the question).
    private var firstContactRule: StateMachine.FirstContactRule {
        switch firstContact {
        case .refuse: return .refuse
        case .acceptNewKey: return .acceptNewKey
        case .ask: return .ask
        }
    }

    /// Why a connection failed, as the state machine tells failures apart.
    static func connectFailure(_ error: any Error) -> StateMachine.ConnectFailure {
        guard let error = error as? SocketStreamError else { return .other(description: "\(error)") }
        switch error.code {
        case .tls:
            // A name that now advertises another key is, for the sender, a key that did not
            // match its pin: someone else may hold the name.
            let keyDiffers = [TLSError.Code.pinMismatch, .advertisedKeyChanged].contains(error.tlsError?.code)
            return .tls(
                pinMismatch: keyDiffers,
                presented: error.tlsError?.presentedPublicKeyFingerprint
                    ?? error.tlsError?.advertisedPublicKeyFingerprint ?? error.tlsError?.presentedFingerprint,
                description: error.tlsError.map { "\($0)" } ?? "\(error)")
        case .nameNotFound, .connectionRefused:
            return .unreachable(description: "\(error)")
        default:
            return .other(description: "\(error)")
        }
    }

    /// Seconds spent looking for a receiver by its key, when its name is not there or answers
    /// with another key.
    static let searchByKey: Double = 3

    /// The refusal of a receiver whose name (or a look-alike of it) is pinned to another key.
    public static func keyChanged(
        name: String, key: String, pinnedAs: String, pinnedKey: String, configOption: String
    ) -> PeerTransferError {
        let same = pinnedAs == name ? "" : " (pinned as \"\(Terminal.escape(pinnedAs))\", which looks the same)"
        return PeerTransferError.trust(
            """
            KEY CHANGED: the receiver "\(Terminal.escape(name))"\(same) now advertises the key \(key), but its pinned key is \(pinnedKey); \
            someone may be impersonating it. Nothing was sent. If it really got a new key, run: peerxfer untrust \(ShellWord.quoted(pinnedAs))\(configOption)
            """)
    }

    /// Connects to `service`, looking it up again while its address refuses, for up to
    /// ``refusalWindow`` (or ``findTimeout`` if shorter): a receiver restarted a moment ago
    /// listens on a new port, and its old one may still be answered for about a second.
    /// - Throws: the last connection's error (``SocketStreamError``); `CancellationError`.
    private func connect(_ service: DiscoveredService, key: String) async throws -> BoundStreamPair {
        let tls = configuration.senderTLS(pinning: key)
        let deadline = ContinuousClock.now + min(Self.refusalWindow, .milliseconds(Int(findTimeout * 1000)))
        while true {
            do {
                if let wideArea {
                    return try await service.connect(
                        tls: tls, bufferSize: 4 << 20, resolveTimeout: findTimeout, wideArea: wideArea)
                }
                // Pinned to the key the receiver advertises, which must still be `key`: the
                // library's "pin the advertised key, trust on first use" (the lookup's answer
                // serves, so no second round of mDNS).
                return try await service.connect(
                    pinningAdvertisedKey: "fp", trustedKey: key, tls: tls, bufferSize: 4 << 20,
                    resolveTimeout: findTimeout)
            } catch let error as SocketStreamError
                where error.code == .connectionRefused && .now + Self.refusedRetry < deadline
            {
                try await Task.sleep(for: Self.refusedRetry)
            }
        }
    }

    /// How long the sender waits before looking a receiver up again after a refusal, and for
    /// how long in all it does (mDNS forgets a withdrawn record 1 s after its goodbye).
    static let refusedRetry: Duration = .milliseconds(200)
    static let refusalWindow: Duration = .seconds(3)

    /// What the two halves of getting ready give: the plan, or how the receiver was looked for.
    private enum Preparation: Sendable {
        case plan(TransferPlan)
        case lookup(Result<ResolvedService, PeerTransferError>)
    }

    /// Looks for the receiver `service`: its resolved address and TXT record, or why not
    /// (``PeerTransferError/peerNotFound(_:)`` when it is not there in time,
    /// ``PeerTransferError/runtime(_:)`` when the name server failed).
    private func lookUp(
        _ service: DiscoveredService, name: String, onTheLink: Bool
    ) async -> Result<ResolvedService, PeerTransferError> {
        do {
            if let wideArea {
                return .success(try await Self.resolve(service, wideArea: wideArea, within: findTimeout))
            }
            // The first answer already holds all a transfer needs (an address, the port and
            // the TXT record with `fp`), and any address on the link will do: wait only a
            // moment for answers arriving with it, not the library's 0.2 s for both families.
            return .success(try await service.resolve(timeout: findTimeout, settle: Self.resolveSettle))
        } catch let error as DiscoveryError where ![.notFound, .timedOut, .cancelled].contains(error.code) {
            // The name server failed (no answer, a refusal): not a receiver that is not there.
            return .failure(
                .runtime("cannot look for \"\(Terminal.escape(name))\" in \(Terminal.escape(domain)): \(error)"))
        } catch {
            let place = onTheLink ? "" : " in \(Terminal.escape(domain))"
            let listing = onTheLink ? "; `peerxfer peers` lists the receivers that can be seen" : ""
            return .failure(
                .peerNotFound(
                    "no peerxfer receiver named \"\(Terminal.escape(name))\"\(place) was found within \(Wording.duration(findTimeout)) (\(error))\(listing)"
                ))
        }
    }

    /// Seconds a lookup on the link waits after the first answer for answers coming with it
    /// (other interfaces, the other address family): Avahi sends those within a few
    /// milliseconds when it holds the records, and the connection tries every address it got.
    static let resolveSettle: TimeInterval = 0.02

    /// Resolves `service` by unicast DNS, looking again every second while it is not in the zone
    /// yet, until `seconds` have passed (as the link's resolve waits for an answer).
    static func resolve(
        _ service: DiscoveredService, wideArea: WideAreaBrowsing, within seconds: TimeInterval
    ) async throws -> ResolvedService {
        let deadline = ContinuousClock.now + .milliseconds(Int(seconds * 1000))
        while true {
            let left =
                Double((deadline - .now).components.seconds) + Double((deadline - .now).components.attoseconds) / 1e18
            do {
                return try await service.resolve(wideArea: wideArea, timeout: max(0.1, left))
            } catch let error as DiscoveryError
                where error.code == .notFound && ContinuousClock.now + .seconds(1) < deadline
            {
                try await Task.sleep(for: .seconds(1))
            }
        }
    }

    /// The `fp` the receiver advertises, checked.
    /// - Throws: ``PeerTransferError`` when it speaks another protocol version or advertises no
    ///   valid key.
    public static func advertisedKey(_ resolved: ResolvedService, name: String) throws -> String {
        guard let version = resolved.txtRecord.string(for: "v"),
            version.split(separator: ",").contains(where: { Int($0) == TransferLimits.protocolVersion })
        else {
            throw PeerTransferError.protocolViolation(
                "\"\(Terminal.escape(name))\" does not speak peerxfer protocol \(TransferLimits.protocolVersion) (it advertises v=\(Terminal.escape(resolved.txtRecord.string(for: "v") ?? "nothing")))"
            )
        }
        guard let key = resolved.advertisedPublicKeySHA256(forTXTKey: "fp") else {
            throw PeerTransferError.trust(
                "\"\(Terminal.escape(name))\" advertises no valid key fingerprint (fp); refused")
        }
        return key
    }

}
