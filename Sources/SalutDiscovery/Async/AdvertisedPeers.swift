import Foundation
import SalutStreams

/// The peers of a browse with the TLS keys they advertise in their TXT records, judged against a
/// book of keys trusted on first use: which listed peers to connect to, and which name a client's
/// key belongs to. The bookkeeping of a LAN app whose peers both connect and accept (a chat, a
/// sync tool), where each publishes the SHA-256 of its key under one TXT key.
///
/// Feed it every update of a browser made with ``ServiceBrowser/includingTXTRecords(waitingUpTo:maximumWatched:)``,
/// pass every service ``servicesToConnect(after:skipping:)`` returns to
/// ``connect(to:tls:bufferSize:resolveTimeout:context:)``, and judge each client with
/// ``owner(ofClientKey:trustingOnFirstUse:waitingUpTo:)``:
///
/// ```swift
/// let peers = AdvertisedPeers(txtKey: "fp", trustedKeys: book, ownKey: identity.publicKeySHA256)
/// for try await update in browser {
///     for service in peers.servicesToConnect(after: update, skipping: connected) {
///         Task { let pair = try await peers.connect(to: service, tls: identity.clientConfiguration); … }
///     }
/// }
/// ```
///
/// Its rules:
/// - A service is returned to connect to once its TXT record is known, and again only when the
///   key it advertises or the key the book trusts for its name changed since its last try (an
///   entry removed from the book's file, say), after it left and came back, or after
///   ``tryAgain(_:)`` or ``tryAgain(named:)`` (a connection lost; a peer that refused this end
///   connecting to it, so that it may take this end's key now). At most
///   ``maximumConcurrentConnections`` tries run at once: a service returned is reserved until
///   its `connect` ends (or it leaves the browse first), and the others wait for a later call (call
///   `servicesToConnect(skipping:)` when a try ends, or now and then). Those waiting longest
///   come first, so names that keep changing their keys cannot keep the others waiting.
/// - A service that advertises this end's key is never returned (it is this end, or points at
///   it). One that advertises a key the book trusts under another name is refused before a
///   connection is made (a name pointed at someone else is not a peer of its own), and either is
///   refused if the key it proves in the handshake is such a key.
/// - A client's key belongs to the name the book trusts with it; when none does, to the one
///   listed service that advertises it and has no key trusted yet (trusted from now on when
///   asked to, once the client proved it holds the key in the handshake). Two services claiming
///   the same key are refused, whichever is real.
///
/// Names are compared by their bytes (ASCII letters in either case), as mDNS compares them: a
/// look-alike spelled with other code points is another service, and the book never trusts a
/// name that is not in NFC. Thread-safe.
public final class AdvertisedPeers: Sendable {
    /// The TXT entry the peers advertise their keys' SHA-256 under.
    public let txtKey: String
    /// The book of keys trusted on first use.
    public let trustedKeys: TrustedKeys
    /// The SHA-256 of this end's own key (never a peer's), or nil.
    public let ownKey: String?
    /// How many services may be reserved for ``connect(to:tls:bufferSize:resolveTimeout:context:)``
    /// at once before ``servicesToConnect(after:skipping:)`` holds further ones back.
    public let maximumConcurrentConnections: Int

    private struct State {
        var listed: Set<DiscoveredService> = []
        /// The services whose TXT record is known.
        var recorded: Set<DiscoveredService> = []
        var advertised: [DiscoveredService: String] = [:]
        /// For each service tried and still listed: what its try depended on.
        var tried: [DiscoveredService: Attempt] = [:]
        /// Returned, and not yet passed to `connect` (dropped if it leaves the browse first).
        var reserved: Set<DiscoveredService> = []
        /// In `connect` now.
        var connecting: Set<DiscoveredService> = []
        /// For each listed service, when it was first seen or last returned (lower goes first).
        var turn: [DiscoveredService: UInt64] = [:]
        var nextTurn: UInt64 = 0
        /// Clients waiting in `owner(ofClientKey:…)` for the browse to list their name.
        var waitingClients = 0
        /// For `clientEvaluator`'s reports: when one was last made, and refusals left unsaid since.
        var lastRefusalReport: ContinuousClock.Instant?
        var unreportedRefusals = 0

        /// Puts `service` last in line (first seen, or just returned).
        mutating func giveTurn(to service: DiscoveredService) {
            turn[service] = nextTurn
            nextTurn += 1
        }
    }

    /// Clients waiting for their name now (for tests).
    var waitingClientsNow: Int { state.withLock { $0.waitingClients } }

    /// How many clients may wait at once in ``owner(ofClientKey:trustingOnFirstUse:waitingUpTo:)``
    /// for the browse to list their name; others are answered at once.
    public static let maximumWaitingClients = 32

    /// What a try to connect to a service depends on: the key it advertises and the key the book
    /// trusts for its name. A try is made again when either changes.
    private struct Attempt: Equatable {
        var advertised: String?
        var trusted: String?
        /// Another listed name with no trusted key advertises the same key (so it was refused).
        var shared: Bool
    }

    private let state = Locked(State())

    /// Bookkeeping for peers advertising their keys under `txtKey`, trusted with `trustedKeys`.
    /// - Parameters:
    ///   - txtKey: the TXT entry holding each peer's key's SHA-256 (`fp` in peerxfer and the
    ///     LAN-chat example).
    ///   - trustedKeys: the book; its file may be edited while this runs (call
    ///     `servicesToConnect(skipping:)` now and then to notice an entry removed).
    ///   - ownKey: this end's key's SHA-256 (`TLSIdentity.publicKeySHA256`: 64 hex digits, a
    ///     precondition), refused as a peer's; nil when this end has none.
    ///   - maximumConcurrentConnections: how many tries may run at once (at least 1).
    public init(txtKey: String, trustedKeys: TrustedKeys, ownKey: String?, maximumConcurrentConnections: Int = 8) {
        let own = ownKey.map { SHA256Digest(hex: $0)?.hex }
        precondition(own != .some(nil), "ownKey is not a SHA-256 fingerprint (64 hex digits)")
        self.txtKey = txtKey
        self.trustedKeys = trustedKeys
        self.ownKey = own ?? nil
        self.maximumConcurrentConnections = max(1, maximumConcurrentConnections)
    }

    /// Takes in a browse update, if any (none: only looks again at the book), and returns the
    /// services to connect to now: listed with a known TXT record, not this end, not reserved or
    /// in `skipping`, new or changed since their last try (see the rules above), those waiting
    /// longest first. Each one returned counts as tried and is reserved until it is passed to
    /// ``connect(to:tls:bufferSize:resolveTimeout:context:)``: pass every one (leave out those
    /// you will not connect to, one you are connected to already, with `skipping`).
    public func servicesToConnect(
        after update: BrowseUpdate? = nil, skipping: Set<DiscoveredService> = []
    ) -> [DiscoveredService] {
        state.withLock { state in
            if let update {
                for case .removed(let service) in update.changes { state.tried[service] = nil }
                state.listed = update.services
                state.recorded = Set(update.txtRecords.keys)
                state.advertised = update.txtRecords.compactMapValues {
                    $0.advertisedPublicKeySHA256(forTXTKey: txtKey)
                }
                state.tried = state.tried.filter { state.listed.contains($0.key) }
                state.turn = state.turn.filter { state.listed.contains($0.key) }
                state.reserved.formIntersection(state.listed)
                for service in state.listed.sorted(by: { ExactText($0.name) < ExactText($1.name) })
                where state.turn[service] == nil {
                    state.giveTurn(to: service)
                }
            }
            var due: [DiscoveredService] = []
            let room = maximumConcurrentConnections - state.reserved.count - state.connecting.count
            for service in state.listed.sorted(by: { state.turn[$0, default: 0] < state.turn[$1, default: 0] }) {
                guard due.count < room else { break }
                // One advertising this end's key is this end (or points at it): never a peer.
                guard state.recorded.contains(service), ownKey == nil || state.advertised[service] != ownKey,
                    !state.reserved.contains(service), !state.connecting.contains(service), !skipping.contains(service)
                else { continue }
                let attempt = attempt(for: service, in: state)
                guard state.tried[service] != attempt else { continue }
                state.tried[service] = attempt
                state.reserved.insert(service)
                state.giveTurn(to: service)
                due.append(service)
            }
            return due
        }
    }

    /// Lets `service` be returned again by the next ``servicesToConnect(after:skipping:)``
    /// although nothing changed (to connect again after a connection was lost, say).
    public func tryAgain(_ service: DiscoveredService) {
        state.withLock { _ = $0.tried.removeValue(forKey: service) }
    }

    /// Lets the services named `name` (compared as DNS compares names) be returned again by the
    /// next ``servicesToConnect(after:skipping:)``: for a client admitted under `name` that this
    /// end is not connected to (it may take this end's key now, having refused it before).
    public func tryAgain(named name: String) {
        state.withLock { state in
            state.tried = state.tried.filter { !ServiceNames.sameIgnoringASCIICase($0.key.name, name) }
        }
    }

    /// The key `service` advertised in the last update, as 64 lower-case hex digits; nil when
    /// it advertises none (or is not listed).
    public func advertisedKey(of service: DiscoveredService) -> String? {
        state.withLock { $0.advertised[service] }
    }

    /// The name a client's key belongs to (see the rules above), or nil when none: the name
    /// the book trusts with `key`, or else the one listed service advertising it whose name has
    /// no trusted key yet. Waits up to `wait` for the browse to list such a service (a peer
    /// connecting as it starts may be heard before it is seen).
    /// - Parameters:
    ///   - key: the SHA-256 of the key the client presented (`TLSPeerTrust.publicKeySHA256`).
    ///   - trustingOnFirstUse: trust `key` for that service's name from now on; only once the
    ///     client proved it holds the key (after the handshake, not from a trust evaluator).
    ///   - wait: how long to wait for the browse.
    /// - Throws: `TrustedKeys.Failure` or `AtomicFile.Failure` when the key should be trusted
    ///   and the book cannot take it (the client is then not admitted); `CancellationError`.
    public func owner(
        ofClientKey key: String, trustingOnFirstUse: Bool = false, waitingUpTo wait: Duration = .seconds(5)
    ) async throws -> String? {
        guard let digest = SHA256Digest(hex: key)?.hex, digest != ownKey else { return nil }
        let clock = ContinuousClock()
        let deadline = clock.now + wait
        var waiting = false
        defer { if waiting { state.withLock { $0.waitingClients -= 1 } } }
        while true {
            // Judged (and trusted) under the state's lock, as `connect` does.
            let found: String?? = try state.withLock { state in
                if let name = trustedKeys.names(trusting: digest).first { return .some(name) }
                let claims = untrustedServices(advertising: digest, in: state)
                guard claims.count == 1, let claim = claims.first else { return nil }
                guard trustingOnFirstUse else { return .some(claim.name) }
                return try trustedKeys.trustOnFirstUse(digest, for: claim.name) ? .some(claim.name) : nil
            }
            if let found { return found }
            // The browse is the app's to follow: look again shortly, within the bound; at most
            // `maximumWaitingClients` wait at once (a flood of unknown keys is refused at once).
            guard clock.now < deadline else { return nil }
            if !waiting {
                waiting = state.withLock { state in
                    guard state.waitingClients < Self.maximumWaitingClients else { return false }
                    state.waitingClients += 1
                    return true
                }
                guard waiting else { return nil }
            }
            try await Task.sleep(for: .milliseconds(100))
        }
    }

    /// A trust evaluator for a listener (`StreamListener(tls:…, trustEvaluator:)`, with
    /// `requiresClientCertificate` set) that admits, during the handshake, a client whose key
    /// ``owner(ofClientKey:trustingOnFirstUse:waitingUpTo:)`` finds a name for, and refuses
    /// the others before any application byte. It trusts nothing on first use: call
    /// `owner(ofClientKey:trustingOnFirstUse: true)` once the connection is open, to learn
    /// the client's name and trust its key (the client has proved it holds the key by then).
    /// - Parameters:
    ///   - wait: how long to wait for the browse to list a client's name.
    ///   - interval: how often at most `refused` is called.
    ///   - refused: hears of clients refused, to tell a person, at most once per `interval` (a
    ///     flood of strangers must not become a flood of lines); the refusals in between are
    ///     counted in the next report (none comes until another client is refused).
    public func clientEvaluator(
        waitingUpTo wait: Duration = .seconds(5), reportingAtMostEvery interval: Duration = .seconds(1),
        refused: @escaping @Sendable (RefusedClients) -> Void = { _ in }
    ) -> TLSTrustEvaluator {
        { [self] trust, decide in
            Task {
                let owner = try? await owner(ofClientKey: trust.publicKeySHA256, waitingUpTo: wait)
                decide(owner != nil)
                guard owner == nil else { return }
                let now = ContinuousClock.now
                let report = state.withLock { state -> Int? in
                    if let last = state.lastRefusalReport, now - last < interval {
                        state.unreportedRefusals += 1
                        return nil
                    }
                    defer { state.unreportedRefusals = 0 }
                    state.lastRefusalReport = now
                    return state.unreportedRefusals
                }
                if let report { refused(RefusedClients(key: trust.publicKeySHA256, othersSinceLastReport: report)) }
            }
        }
    }

    /// Connects to `service` pinned to the key it advertises, trusting it on first use with the
    /// book (as `connect(pinningAdvertisedKey:trustedKeys:…)`), after refusing a service that
    /// advertises or proves this end's key or a key trusted under another name. Counts as the
    /// service's try: ``servicesToConnect(after:skipping:)`` returns it again only when
    /// something changes after it, and its reservation ends with it.
    /// - Parameters:
    ///   - service: a service ``servicesToConnect(after:skipping:)`` returned.
    ///   - tls: this end's TLS configuration as a client (its certificate, for peers that judge
    ///     their clients' keys).
    ///   - bufferSize: bytes buffered in each direction.
    ///   - resolveTimeout: how long resolving may take.
    ///   - context: the connection to the avahi-daemon.
    /// - Returns: the open streams; the book trusts their key for the service's name.
    /// - Throws: ``Refusal`` (`keyChanged` when the service advertises or proves another key
    ///   than the book holds for its name, `ownKey`, `anotherNamesKey`, `sharedKey`); otherwise as
    ///   `connect(pinningAdvertisedKey:trustedKey:…)` (`nameNotFound`, connection and TLS
    ///   failures), or the book's `TrustedKeys.Failure` or `AtomicFile.Failure` when it cannot
    ///   take the key (the connection is then closed).
    public func connect(
        to service: DiscoveredService, tls: TLSConfiguration, bufferSize: Int = 256 * 1024,
        resolveTimeout: TimeInterval = 5, context: DiscoveryContext = .shared
    ) async throws -> BoundStreamPair {
        state.withLock { state in
            state.reserved.remove(service)
            state.connecting.insert(service)
        }
        defer {
            state.withLock { state in
                state.connecting.remove(service)
                // As things stand after this try (unless it left meanwhile).
                if state.tried[service] != nil { state.tried[service] = attempt(for: service, in: state) }
            }
        }
        try state.withLock { state in
            if let key = state.advertised[service], let refusal = refusal(of: service, holding: key, in: state) {
                throw refusal
            }
        }
        let pair: BoundStreamPair
        do {
            pair = try await service.connect(
                pinningAdvertisedKey: txtKey, trustedKey: trustedKeys.key(for: service.name), tls: tls,
                bufferSize: bufferSize, resolveTimeout: resolveTimeout, context: context)
        } catch let error as SocketStreamError where error.tlsError?.code == .advertisedKeyChanged {
            throw changed(service, key: error.tlsError?.advertisedPublicKeyFingerprint ?? "unknown")
        }
        do {
            // Its record may have changed between the browse and the handshake. Judged and
            // trusted under the state's lock: two tries (or a client's) never both pass the
            // judgement before either is trusted, so no key is trusted under two names here.
            let key = pair.peerTrust?.publicKeySHA256 ?? ""
            try state.withLock { state in
                if let refusal = refusal(of: service, holding: key, in: state) { throw refusal }
                guard try trustedKeys.trustOnFirstUse(key, for: service.name) else { throw changed(service, key: key) }
            }
        } catch {
            pair.close()
            throw error
        }
        return pair
    }

    /// Why `service` holding `key` is not a peer of its own, or nil: this end's key, a key
    /// trusted under another name, or (on first use) a key another listed service advertises.
    private func refusal(of service: DiscoveredService, holding key: String, in state: State) -> Refusal? {
        if key == ownKey { return refusal(.ownKey, service, key: key) }
        let others = trustedKeys.names(trusting: key).filter { !ServiceNames.sameIgnoringASCIICase($0, service.name) }
        if let other = others.first { return refusal(.anotherNamesKey, service, key: key, otherName: other) }
        guard trustedKeys.key(for: service.name) == nil else { return nil }
        return sharer(of: key, besides: service, in: state).map {
            refusal(.sharedKey, service, key: key, otherName: $0.name)
        }
    }

    /// `service` holds `key`, not the key the book trusts for its name.
    private func changed(_ service: DiscoveredService, key: String) -> Refusal {
        refusal(
            .keyChanged, service, key: key, trustedKey: trustedKeys.key(for: service.name), bookPath: trustedKeys.path)
    }

    private func refusal(
        _ code: Refusal.Code, _ service: DiscoveredService, key: String, trustedKey: String? = nil,
        otherName: String? = nil, bookPath: String? = nil
    ) -> Refusal {
        Refusal(
            code: code, service: service, key: key, trustedKey: trustedKey, otherName: otherName, bookPath: bookPath)
    }

    private func attempt(for service: DiscoveredService, in state: State) -> Attempt {
        let advertised = state.advertised[service]
        return Attempt(
            advertised: advertised, trusted: trustedKeys.key(for: service.name),
            shared: advertised.map { sharer(of: $0, besides: service, in: state) != nil } ?? false)
    }

    /// Another listed service, with no key trusted for its name, that advertises `key` too.
    private func sharer(of key: String, besides service: DiscoveredService, in state: State) -> DiscoveredService? {
        untrustedServices(advertising: key, in: state).first {
            !ServiceNames.sameIgnoringASCIICase($0.name, service.name)
        }
    }

    /// The listed services advertising `key` whose names have no key trusted: those that may
    /// claim it on first use (the book is asked only about them).
    private func untrustedServices(advertising key: String, in state: State) -> [DiscoveredService] {
        state.listed.filter { state.advertised[$0] == key && trustedKeys.key(for: $0.name) == nil }
    }
}
