import CAvahi
import Dispatch
import Glibc

/// Browses with one Avahi browser (services of a type, service types, or domains) and turns its
/// per-interface, per-protocol events into one add/remove per service.
///
/// A service is added when first seen on any (interface, protocol) and removed when gone from
/// the last. Changes are batched: events from Avahi's cache are held until CACHE_EXHAUSTED and
/// delivered together; later events are delivered at the end of the queue turn that brought
/// them. Each batch is one `BrowseUpdate`, which is what gives `moreComing` its meaning in the
/// Apple API. When the daemon goes away every known service is reported removed; when it comes
/// back the browser restarts by itself.
final class BrowseOperation: QueueOperation, @unchecked Sendable {
    // @unchecked: every mutable property is used only on `context.queue`.

    enum Target: Sendable {
        /// Instances of a type (`_http._tcp` or `_printer._sub._http._tcp`) in a domain.
        case services(type: String, domain: String)
        /// Service types (`_services._dns-sd._udp`); each is reported with `name` = the type.
        case serviceTypes(domain: String)
        /// Browsing or registration domains; each is reported with `name` = the domain.
        case domains(registration: Bool)
    }

    enum Event: Sendable {
        case update(BrowseUpdate)
        case failed(DiscoveryError)
    }

    /// Which answers to take: one interface and/or protocol, and whether services published
    /// by this host count.
    struct Filter: Sendable {
        var interface: Int32 = -1  // AVAHI_IF_UNSPEC
        var proto: Int32 = -1  // AVAHI_PROTO_UNSPEC
        var includeLocal = true
    }

    private struct Path: Hashable { var interface: AvahiIfIndex; var proto: AvahiProtocol }

    let target: Target
    let filter: Filter
    private let deliver: @Sendable (Event) -> Void
    private var browser: OpaquePointer?
    private var seen: [DiscoveredService: Set<Path>] = [:]
    /// Where services that went away were last seen, for the update that reports it.
    private var lastSeen: [DiscoveredService: Set<Path>] = [:]
    private var pending: [BrowseChange] = []
    /// Services still listed whose interfaces or protocols changed since the last update.
    private var moved: Set<DiscoveredService> = []
    private var cacheExhausted = false
    private var complete = false
    private var flushScheduled = false

    init(
        context: DiscoveryContext, target: Target, filter: Filter = Filter(),
        deliver: @escaping @Sendable (Event) -> Void
    ) {
        self.target = target
        self.filter = filter
        self.deliver = deliver
        super.init(context: context)
    }

    // MARK: AvahiOperation

    override func clientIsRunning(_ client: OpaquePointer) {
        guard browser == nil, !stopped else { return }
        let me = userdata
        let any = AvahiIfIndex(filter.interface), anyProto = AvahiProtocol(filter.proto)
        switch target {
        case .services(let type, let domain):
            browser = avahi_service_browser_new(
                client, any, anyProto, type, domain, AvahiLookupFlags(rawValue: 0),
                { _, interface, proto, event, name, type, domain, flags, userdata in
                    BrowseOperation.from(userdata).handle(
                        event, interface, proto,
                        DiscoveredService(
                            name: AvahiValues.string(name), type: AvahiValues.string(type),
                            domain: AvahiValues.string(domain)), flags: flags)
                }, me)
        case .serviceTypes(let domain):
            browser = avahi_service_type_browser_new(
                client, any, anyProto, domain, AvahiLookupFlags(rawValue: 0),
                { _, interface, proto, event, type, domain, flags, userdata in
                    BrowseOperation.from(userdata).handle(
                        event, interface, proto,
                        DiscoveredService(
                            name: AvahiValues.string(type), type: "_services._dns-sd._udp",
                            domain: AvahiValues.string(domain)), flags: flags)
                }, me)
        case .domains(let registration):
            browser = avahi_domain_browser_new(
                client, any, anyProto, nil,
                registration ? AVAHI_DOMAIN_BROWSER_REGISTER : AVAHI_DOMAIN_BROWSER_BROWSE,
                AvahiLookupFlags(rawValue: 0),
                { _, interface, proto, event, domain, _, userdata in
                    let name = AvahiValues.string(domain)
                    BrowseOperation.from(userdata).handle(
                        event, interface, proto, DiscoveredService(name: name, type: "", domain: name))
                }, me)
        }
        if browser == nil {
            halt()
            deliver(.failed(DiscoveryError(avahiCode: avahi_client_errno(client))))
        }
    }

    override func clientIsLost() {
        releaseAvahiObjects()
        for service in seen.keys.sorted(by: { $0.name < $1.name }) { pending.append(.removed(service)) }
        lastSeen.merge(seen) { $1 }
        seen = [:]
        cacheExhausted = false
        complete = false
        flush()
    }

    // MARK: Private

    override func releaseAvahiObjects() {
        guard let browser else { return }
        switch target {
        case .services: avahi_service_browser_free(browser)
        case .serviceTypes: avahi_service_type_browser_free(browser)
        case .domains: avahi_domain_browser_free(browser)
        }
        self.browser = nil
    }

    private func handle(
        _ event: AvahiBrowserEvent, _ interface: AvahiIfIndex, _ proto: AvahiProtocol, _ service: DiscoveredService,
        flags: AvahiLookupResultFlags = AvahiLookupResultFlags(rawValue: 0)
    ) {
        let path = Path(interface: interface, proto: proto)
        switch event {
        case AVAHI_BROWSER_NEW where !filter.includeLocal && flags.rawValue & AVAHI_LOOKUP_RESULT_LOCAL.rawValue != 0:
            return  // published by this host, and the caller asked to ignore those
        case AVAHI_BROWSER_NEW:
            if seen[service] == nil {
                pending.append(.added(service))
            } else if !seen[service]!.contains(path) {
                moved.insert(service)
            }
            seen[service, default: []].insert(path)
            scheduleFlush()
        case AVAHI_BROWSER_REMOVE:
            guard var paths = seen[service] else { return }
            paths.remove(path)
            if paths.isEmpty {
                lastSeen[service] = seen[service]
                seen[service] = nil
                pending.append(.removed(service))
                scheduleFlush()
            } else {
                seen[service] = paths
                moved.insert(service)
                scheduleFlush()
            }
        case AVAHI_BROWSER_CACHE_EXHAUSTED:
            cacheExhausted = true
            flush()
        case AVAHI_BROWSER_ALL_FOR_NOW:
            cacheExhausted = true
            complete = true
            flush(evenIfEmpty: true)
        case AVAHI_BROWSER_FAILURE:
            let code = context.runningClient.map { avahi_client_errno($0) } ?? Int32(AVAHI_ERR_FAILURE)
            flush()
            releaseAvahiObjects()
            deliver(.failed(DiscoveryError(avahiCode: code)))
        default:
            break
        }
    }

    private static func sighting(_ path: Path) -> ServiceSighting {
        var name = [CChar](repeating: 0, count: Int(IF_NAMESIZE) + 1)
        let text =
            if_indextoname(UInt32(bitPattern: path.interface), &name) != nil
            ? String(decoding: name.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
            : String(path.interface)
        return ServiceSighting(
            interface: text, interfaceIndex: path.interface, isIPv6: path.proto == AvahiProtocol(AVAHI_PROTO_INET6))
    }

    private func scheduleFlush() {
        guard !flushScheduled else { return }
        flushScheduled = true
        // Before CACHE_EXHAUSTED more cached results are on their way: hold the batch (at most
        // a quarter second, should the event never come).
        let delay: DispatchTimeInterval = cacheExhausted ? .nanoseconds(0) : .milliseconds(250)
        context.queue.asyncAfter(deadline: .now() + delay) { [weak self] in
            guard let self, self.flushScheduled else { return }
            self.flush()
        }
    }

    private func flush(evenIfEmpty: Bool = false) {
        flushScheduled = false
        guard !stopped, !pending.isEmpty || !moved.isEmpty || evenIfEmpty else { return }
        var update = BrowseUpdate(changes: pending, services: Set(seen.keys), isComplete: complete)
        let changed = pending.map { change -> DiscoveredService in
            switch change {
            case .added(let s), .removed(let s): s
            }
        }
        for service in changed + moved.filter({ seen[$0] != nil }) {
            let paths = seen[service] ?? lastSeen[service] ?? []
            update.sightings[service] = paths.sorted { ($0.interface, $0.proto) < ($1.interface, $1.proto) }.map(
                Self.sighting)
        }
        lastSeen = [:]
        pending = []
        moved = []
        deliver(.update(update))
    }
}
