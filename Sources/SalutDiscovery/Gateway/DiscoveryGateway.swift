import Foundation
import SalutStreams

/// Mirrors the services of this link, found by mDNS through avahi-daemon, into a DNS zone by
/// signed updates (RFC 2136), under a label of its own: a discovery proxy in the manner of
/// RFC 8766, with an ordinary DNS server (BIND) as the store. Clients on other links find the
/// services by wide-area DNS-SD (`avahi-browse -d`, ``ServiceBrowser`` with a wide-area
/// domain, `dig`), and connect to them at their routed addresses.
///
/// ```swift
/// let gateway = DiscoveryGateway(
///     configuration: .init(domain: "home.arpa", label: "lab-a", key: try SalutTSIGKey(contentsOfFile: "gw.key")),
///     reports: { print($0) })
/// try await gateway.run()   // until the task is cancelled
/// ```
///
/// `Office Printer._ipp._tcp` on the link becomes `Office Printer._ipp._tcp.lab-a.home.arpa`,
/// its SRV naming `HOST.lab-a.home.arpa`, whose A and AAAA records are the host's addresses
/// that route off the link (never 169.254/16, IPv6 link-local or loopback). TXT records follow
/// changes; a service that leaves the link leaves the zone. On start the gateway reads what the
/// zone holds under its label and, once the link had ``Configuration/settleTime`` to show what
/// it holds, removes what left while it was not running. A server that does not answer is
/// tried again, waiting twice as long each time (at most a minute); a key or zone the server
/// refuses ends ``run()``. With ``Configuration/announceRemote``, the other way too: the
/// services other links' gateways wrote into the zone are announced on this link by mDNS.
public final class DiscoveryGateway: Sendable {
    /// What a gateway mirrors, and where.
    public struct Configuration: Sendable {
        /// The DNS domain the services are written under (`home.arpa`), inside a zone that takes
        /// updates signed with ``key`` (the domain may be the zone or a name below it).
        public var domain: String
        /// This link's label: its services go under `LABEL.DOMAIN`. One DNS label.
        public var label: String
        /// The TSIG key the zone's server takes updates with.
        public var key: SalutTSIGKey
        /// The name server to ask for the zone and its primary; nil: `/etc/resolv.conf`'s first.
        public var nameServer: SocketAddress?
        /// The service types to mirror (`_ipp._tcp`); empty: every type on the link
        /// (`_services._dns-sd._udp`), at most ``maximumTypes`` of them.
        public var types: [String]
        /// Types never mirrored.
        public var excludedTypes: [String]
        /// At most this many services of the link are mirrored (first come, first served).
        public var maximumServices: Int
        /// At most this many types are browsed when ``types`` is empty.
        public var maximumTypes: Int
        /// How long the link has to show what it holds before the zone's leftovers are removed.
        public var settleTime: Duration
        /// Sends nothing: each update is reported (``Report/wouldSend(_:)``) and taken as
        /// applied. The zone is still read.
        public var dryRun: Bool
        /// Whether the services the other links' gateways wrote into the zone (under other
        /// labels) are announced on this link by mDNS, for clients that speak only mDNS: each
        /// on a host `HOST.LABEL.local` with its routed addresses, withdrawn when it leaves
        /// the zone. A gateway never writes such a host's services back into the zone. At most
        /// ``DiscoveryGateway/maximumAnnouncedServices`` are announced (fewer when
        /// ``maximumServices`` is lower), the links taking turns.
        public var announceRemote: Bool
        /// How often the zone's serial is asked for ``announceRemote`` (DNS pushes nothing), the
        /// zone being read again only when the serial changed: a quarter of a second by default
        /// and at least (one small query to the server; half a second took a quarter of a second
        /// more, on average, for another link's services to show).
        public var announceInterval: Duration

        /// A configuration; see each property.
        public init(
            domain: String, label: String, key: SalutTSIGKey, nameServer: SocketAddress? = nil, types: [String] = [],
            excludedTypes: [String] = [], maximumServices: Int = 1000, maximumTypes: Int = 200,
            settleTime: Duration = .seconds(3), dryRun: Bool = false, announceRemote: Bool = false,
            announceInterval: Duration = .milliseconds(250)
        ) {
            self.domain = domain
            self.label = label
            self.key = key
            self.nameServer = nameServer
            self.types = types
            self.excludedTypes = excludedTypes
            self.maximumServices = maximumServices
            self.maximumTypes = maximumTypes
            self.settleTime = settleTime
            self.dryRun = dryRun
            self.announceRemote = announceRemote
            self.announceInterval = announceInterval
        }
    }

    /// A service of the link by its name and type (`_ipp._tcp`).
    public struct ServiceKey: Sendable, Hashable, Comparable, CustomStringConvertible {
        /// The instance name.
        public var name: String
        /// The service type, `_name._tcp` or `_name._udp`.
        public var type: String

        /// A key; see each property.
        public init(name: String, type: String) {
            self.name = name
            self.type = type
        }

        /// By type, then name, byte by byte.
        public static func < (a: ServiceKey, b: ServiceKey) -> Bool {
            (ExactText(a.type), ExactText(a.name)) < (ExactText(b.type), ExactText(b.name))
        }

        /// The same service: name and type equal byte for byte, as DNS compares them (a look-alike
        /// written with other code points, a Kelvin sign for a `K`, is another service).
        public static func == (a: ServiceKey, b: ServiceKey) -> Bool {
            ExactText(a.name) == ExactText(b.name) && ExactText(a.type) == ExactText(b.type)
        }

        /// Hashes the name and type by their bytes (as `==` compares them).
        public func hash(into hasher: inout Hasher) {
            for part in [name, type] { hasher.combine(ExactText(part)) }
        }

        /// `Name._type._tcp`.
        public var description: String { "\(name).\(type)" }
    }

    /// What the gateway did, for its log.
    public enum Report: Sendable, Equatable {
        /// The zone was found: updates go to `server`, services under `labelDomain`.
        case started(zone: String, labelDomain: String, server: String)
        /// The zone held this many services under the label at the start.
        case listed(count: Int)
        /// A service is in the zone as the link has it (written, or changed).
        case mirrored(ServiceKey)
        /// A service was removed from the zone (it left the link, or left while the gateway
        /// was not running).
        case removed(ServiceKey)
        /// A service is not mirrored (or, with ``Configuration/announceRemote``, another
        /// link's is not announced here), and why.
        case skipped(ServiceKey, reason: String)
        /// An update, or a read of the zone, failed and is tried again after `seconds`.
        case retrying(reason: String, seconds: Double)
        /// With ``Configuration/dryRun``: the update that would be sent, as `nsupdate` lines.
        case wouldSend(String)
        /// With ``Configuration/announceRemote``: a service of the link `fromLabel` is
        /// announced on this link (or its TXT record changed), under the name `as` (another
        /// than its own when the name was taken here).
        case announced(ServiceKey, fromLabel: String, as: String)
        /// With ``Configuration/announceRemote``: a service of the link `fromLabel` is no longer
        /// announced here: it left the zone, or it was withdrawn or could not be announced again
        /// (a ``skipped(_:reason:)`` report says why).
        case unannounced(ServiceKey, fromLabel: String)
        /// Where the gateway stands now (said when it changed, at most once a second).
        case status(Status)
    }

    /// A service as the gateway writes it: the link's records, with the host's first label and
    /// only the addresses that route off the link.
    struct MirroredService: Sendable, Hashable {
        var key: ServiceKey
        /// The host's name on the link without `.local` (`printer` for `printer.local`).
        var host: String
        var port: UInt16
        /// The TXT record's strings.
        var txt: [[UInt8]]
        /// IPv4 (4 bytes) and IPv6 (16 bytes) addresses, sorted.
        var addresses: [[UInt8]]
    }

    /// One change to the zone.
    enum ZoneOperation: Sendable, Hashable {
        /// Writes `service` (replacing what the zone had of it), and removes `droppingHost`'s
        /// address records (a host no service is on any more).
        case write(MirroredService, replacing: MirroredService?, droppingHost: String?)
        /// Removes a service, and `droppingHost`'s address records.
        case remove(ServiceKey, droppingHost: String?)
        /// Lists these types under the label (and no longer those), and the label as a
        /// browsing domain of the zone.
        case enumerate(adding: [String], removing: [String], browseDomain: Bool)
    }

    private let configuration: Configuration
    private let reports: @Sendable (Report) -> Void
    /// The running gateway's status board (nil until ``run()`` found the zone).
    private let board = Locked<StatusBoard?>(nil)

    /// Where the gateway stands now: nil until ``run()`` found the zone, then as fresh as
    /// every change (``Report/status(_:)`` may wait up to a second to say it). After ``run()``
    /// returned, where it stood when it stopped.
    public var status: Status? { board.value?.status }

    /// A gateway; `reports` hears what it does (on any thread, one report at a time).
    public init(configuration: Configuration, reports: @escaping @Sendable (Report) -> Void = { _ in }) {
        self.configuration = configuration
        self.reports = reports
    }

    /// Finds the zone and its primary, then mirrors the link (and announces the other links'
    /// services, with ``Configuration/announceRemote``) until the calling task is cancelled;
    /// what it announced is withdrawn before it returns.
    /// - Throws: ``DiscoveryError``: ``DiscoveryError/Code-swift.struct/invalidDomain`` for a
    ///   label, domain or type that DNS cannot carry;
    ///   ``DiscoveryError/Code-swift.struct/serverUnreachable`` when no server for the zone is
    ///   found; ``DiscoveryError/Code-swift.struct/signatureRejected``,
    ///   ``DiscoveryError/Code-swift.struct/notAuthorized`` or
    ///   ``DiscoveryError/Code-swift.struct/updateRefused`` when the server refuses the updates.
    public func run() async throws {
        try Self.check(configuration)
        let zone = try await GatewayZone.open(configuration)
        let labelDomain = zone.updates.labelDomain.text
        reports(
            .started(
                zone: zone.updates.zone.text, labelDomain: labelDomain,
                server: zone.primaries.first.map { "\($0)" } ?? "?"))
        let (events, sink) = AsyncStream<StateMachine.Event>.makeStream()
        let work = Work()
        defer { work.cancelAll() }
        // The parts report from tasks of their own: one report at a time, as `init` promises.
        let oneAtATime = Locked(())
        let serialReports: @Sendable (Report) -> Void = { [reports] report in
            oneAtATime.withLock { _ in reports(report) }
        }
        let board = StatusBoard(labelDomain: labelDomain, reports: serialReports)
        self.board.exchange(board)
        defer { board.finish() }
        // Every report goes by the status board too (a retry is its last error, an
        // announcement counts for its label).
        let told: @Sendable (Report) -> Void = { report in
            serialReports(report)
            board.observe(report)
        }
        // The services announced here from the zone: never taken for the link's own.
        // (Counted: two announcements from two links may meet under one name for a moment.)
        let announced = Locked<[ServiceKey: Int]>([:])
        let announcer: Task<Void, Never>? =
            configuration.announceRemote
            ? Task { [configuration] in
                await RemoteAnnouncer(
                    zone: zone, configuration: configuration, reports: told,
                    announcing: { key, change in
                        announced.withLock { counts in
                            switch change {
                            case .publishing: counts[key, default: 0] += 1
                            case .withdrawn: counts[key] = (counts[key] ?? 1) > 1 ? counts[key]! - 1 : nil
                            case .published: break
                            }
                        }
                        // Seen on the link before it was known as ours: its place is freed.
                        if case .published = change { sink.yield(.lost(key)) }
                    }
                ).run()
            } : nil
        do {
            try await mirror(
                zone: zone, events: events, sink: sink, work: work, announced: announced, board: board, reports: told)
        } catch {
            // What was announced is withdrawn before the gateway says it stopped.
            announcer?.cancel()
            await announcer?.value
            throw error
        }
        announcer?.cancel()
        await announcer?.value
    }

    /// The link mirrored into the zone: the state machine's events, its actions performed,
    /// until the calling task is cancelled or the zone refuses the updates for good.
    private func mirror(
        zone: GatewayZone, events: AsyncStream<StateMachine.Event>,
        sink: AsyncStream<StateMachine.Event>.Continuation, work: Work, announced: Locked<[ServiceKey: Int]>,
        board: StatusBoard, reports: @escaping @Sendable (Report) -> Void
    ) async throws {
        // The error that ends the gateway, once the zone refused an update for good.
        let refusal = Locked<DiscoveryError?>(nil)
        var machine = StateMachine(
            maximumServices: configuration.maximumServices, operationsPerUpdate: Self.operationsPerUpdate)
        // Resolutions spread over connections to avahi-daemon of their own, the least loaded
        // first: the daemon gives each client 1,024 objects, and a followed service holds one
        // resolver per interface and protocol it is seen on (two on a dual-stack link), so one
        // connection ran out near 500.
        var resolving = ResolvingPool(share: LinkWatcher.servicesPerContext, maximumContexts: 32) {
            DiscoveryContext(label: "gateway-resolve-\($0)")
        }
        work.start { [reports] in
            let listed = await zone.listWithRetries(reports: reports)
            reports(.listed(count: listed.count))
            sink.yield(.zoneListed(listed))
        }
        work.start { [configuration] in
            try? await Task.sleep(for: configuration.settleTime)
            sink.yield(.linkSettled)
        }
        work.start { [configuration] in
            await LinkWatcher(configuration: configuration).watch { sink.yield($0) }
        }
        // The update in flight, said once the machine counted it (so that the status is never
        // behind a "mirrored" or "removed" it follows).
        var sending: [ZoneOperation] = []
        for await event in events {
            if case .seen(let key) = event, announced.withLock({ $0[key] != nil }) { continue }
            let actions = machine.handle(event)
            board.observe(
                mirrored: machine.mirroredCount, waiting: machine.waitingCount, behind: machine.isBehind,
                listed: machine.isListed)
            switch event {
            case .updateSucceeded:
                for operation in sending { Self.report(operation, to: reports) }
                sending = []
            case .updateFailed: sending = []
            default: break
            }
            for action in actions {
                switch action {
                case .resolve(let key):
                    let context = resolving.assign(key)
                    work.start(for: key) {
                        await LinkWatcher.follow(
                            key, in: context, { sink.yield(.found($0)) }, unresolved: { sink.yield(.unresolved(key)) })
                    }
                case .stopResolving(let key):
                    resolving.release(key)
                    work.stop(key)
                case .send(let operations):
                    sending = operations
                    work.start { [configuration, reports] in
                        let (outcome, error) = await zone.apply(
                            operations, dryRun: configuration.dryRun, reports: reports)
                        if let error { refusal.withLock { $0 = error } }
                        sink.yield(outcome)
                    }
                case .retry(let delay, let reason):
                    reports(.retrying(reason: reason, seconds: Double(delay.components.seconds)))
                    work.start {
                        try? await Task.sleep(for: delay)
                        sink.yield(.retryDue)
                    }
                case .skip(let key, let reason):
                    reports(.skipped(key, reason: reason))
                case .stop(let reason):
                    throw refusal.value ?? DiscoveryError.dnsFailure(reason)
                }
            }
        }
    }

    /// At most this many services are written or removed by one update (a few hundred bytes
    /// each, well under an update's 65,000): one update per service, a burst of 100 took 1.42 s
    /// to be all in the zone; 32 to an update, 0.34 s (docs/wide-area.md).
    static let operationsPerUpdate = 32

    /// The most services ``Configuration/announceRemote`` announces on the link (400): each
    /// takes up to two of the objects avahi-daemon allows one client (1,024 by default), on a
    /// connection of their own.
    public static let maximumAnnouncedServices = 400

    /// Whether services of `type` may be mirrored: a service type (`_name._tcp`, `_name._udp`)
    /// other than DNS-SD's own `_dns-sd._udp`, whose names the gateway writes itself.
    public static func mayMirror(type: String) -> Bool {
        guard (try? ServiceNames.parseType(type, domain: "local")) != nil else { return false }
        return !type.lowercased().hasSuffix("_dns-sd._udp")
    }

    /// Whether `label` can be a link's label (one DNS label under the zone): 1 to 63 bytes, no
    /// dots, spaces or control characters.
    public static func isLinkLabel(_ label: String) -> Bool {
        !label.isEmpty && label.utf8.count <= 63 && !label.contains(".")
            && label.unicodeScalars.allSatisfy { $0.value > 0x20 && $0.value != 0x7f }
    }

    /// Checks what the configuration names before anything is asked of the network.
    private static func check(_ configuration: Configuration) throws {
        let label = configuration.label
        guard isLinkLabel(label) else {
            throw DiscoveryError.invalidDomain(
                "\(label.debugDescription) is not a DNS label (1 to 63 bytes, no dots, spaces or control characters)")
        }
        for type in configuration.types + configuration.excludedTypes {
            _ = try ServiceNames.parseType(type, domain: "local")
        }
        _ = try ServiceNames.normaliseDomain(configuration.domain)
        if configuration.announceRemote && configuration.announceInterval < .milliseconds(250) {
            throw DiscoveryError.invalidDomain(
                "an announce interval under a quarter of a second would ask the zone's server without a pause")
        }
    }

    private static func report(_ operation: ZoneOperation, to reports: @Sendable (Report) -> Void) {
        switch operation {
        case .write(let service, _, _): reports(.mirrored(service.key))
        case .remove(let key, _): reports(.removed(key))
        case .enumerate: break
        }
    }

    /// The tasks a running gateway started, cancelled when it ends: the watchers, the update in
    /// flight, the timers, and one resolution per service mirrored (by its key).
    private final class Work: Sendable {
        // (Locked: started from the gateway's loop, ended from there and from its end.)
        private let tasks = Locked<(loose: [UUID: Task<Void, Never>], byKey: [ServiceKey: Task<Void, Never>])>(
            ([:], [:]))

        func start(_ body: @escaping @Sendable () async -> Void) {
            let id = UUID()
            // Made under the lock that its own end takes: it cannot end before it is recorded.
            tasks.withLock { state in
                state.loose[id] = Task { [tasks] in
                    await body()
                    _ = tasks.withLock { $0.loose.removeValue(forKey: id) }
                }
            }
        }

        func start(for key: ServiceKey, _ body: @escaping @Sendable () async -> Void) {
            let task = Task { await body() }
            tasks.withLock { $0.byKey.updateValue(task, forKey: key) }?.cancel()
        }

        func stop(_ key: ServiceKey) {
            tasks.withLock { $0.byKey.removeValue(forKey: key) }?.cancel()
        }

        func cancelAll() {
            let all = tasks.withLock { state -> [Task<Void, Never>] in
                defer { state = ([:], [:]) }
                return Array(state.loose.values) + Array(state.byKey.values)
            }
            all.forEach { $0.cancel() }
        }
    }
}
