import Foundation
import SalutStreams

/// Apple's `NetServiceBrowser` on Linux: searches for services or domains through the
/// avahi-daemon and reports them to its delegate on the scheduled run loop.
///
/// Each service is reported once however many interfaces and protocols it is seen on, and
/// removed when it is gone from the last. A search of the link also hears of failed contacts
/// with what it lists (a `NetService` resolution that found no address in time, a connection
/// that found no route: see ``DiscoveryContext/reportFailedContact(with:)``), as
/// ``ServiceBrowser`` does: it asks the service's responder directly and reports `didRemove`
/// when nothing answers (within about 3 s), though avahi-daemon may list it for an hour more,
/// and `didFind` again if it answers later. Browsing `_services._dns-sd._udp.` lists service types
/// the way Apple does: each as a `NetService` named like `_http` with type `_tcp.local.`.
/// `includesPeerToPeer` is accepted and ignored on Linux.
///
/// Sendable, as Apple code expects: all of the class's own state is behind a lock. A subclass
/// inherits that promise unchecked, so a subclass that adds mutable stored properties must
/// guard them itself.
open class NetServiceBrowser: NSObject, @unchecked Sendable {
    // @unchecked: every mutable property lives in `state`, a lock-protected box; delegate calls
    // are made on the scheduled run loop by `scheduler`.

    private struct State {
        weak var delegate: (any NetServiceBrowserDelegate)?
        var operation: BrowseOperation?
        /// The failed contacts' watch of a search for services on the link.
        var watch: ServiceBrowser.FailedContactWatch?
        /// Counts the searches: an update of an earlier search, on its way when it stopped, is
        /// not taken for the current one's.
        var search = 0
        var services: [DiscoveredService: NetService] = [:]
        var includesPeerToPeer = false
    }

    private let state = Locked(State())
    private let scheduler = DelegateScheduler()
    let context: DiscoveryContext = .shared

    /// Makes a browser; start it with one of the `search…` methods.
    public override init() {
        super.init()
    }

    deinit {
        // A browser let go without `stop()`: its search and its failed contacts' watch (with
        // its rechecks every 30 s) end with it.
        let (operation, watch) = state.withLock { ($0.operation, $0.watch) }
        operation?.stop()
        watch?.finish()
    }

    /// The delegate, held weakly as on Apple platforms.
    open var delegate: (any NetServiceBrowserDelegate)? {
        get { state.value.delegate }
        set { state.withLock { $0.delegate = newValue } }
    }

    /// Accepted for source compatibility; changes nothing on Linux.
    open var includesPeerToPeer: Bool {
        get { state.value.includesPeerToPeer }
        set { state.withLock { $0.includesPeerToPeer = newValue } }
    }

    /// Delivers delegate calls on `aRunLoop` in `mode` (the main run loop by default).
    open func schedule(in aRunLoop: RunLoop, forMode mode: RunLoop.Mode) {
        scheduler.schedule(in: aRunLoop, forMode: mode)
    }

    /// Stops delivering delegate calls on `aRunLoop` in `mode`.
    open func remove(from aRunLoop: RunLoop, forMode mode: RunLoop.Mode) {
        scheduler.remove(from: aRunLoop, forMode: mode)
    }

    /// Searches for services of `type` (`_http._tcp.`, a subtype `_printer._sub._http._tcp.`,
    /// or `_services._dns-sd._udp.` for the list of types) in `domainString` (`""` or `local.`).
    /// A malformed type or domain is reported as `didNotSearch` with `badArgumentError`; a
    /// second search while one runs as `activityInProgress`.
    open func searchForServices(ofType type: String, inDomain domainString: String) {
        let target: BrowseOperation.Target
        do {
            let domain = try ServiceNames.normaliseDomain(domainString)
            let bare = type.hasSuffix(".") ? String(type.dropLast()) : type
            if bare.lowercased() == "_services._dns-sd._udp" {
                target = .serviceTypes(domain: domain)
            } else {
                let parsed = try ServiceNames.parseType(type, domain: domain)
                ServiceNames.noteIfLong(parsed)
                target = .services(type: parsed.browseType, domain: domain)
            }
        } catch {
            return notSearch(error as? DiscoveryError ?? .invalidServiceType(type, reason: "\(error)"))
        }
        start(target)
    }

    /// Searches for domains to browse; `local.` is always reported first.
    open func searchForBrowsableDomains() {
        start(.domains(registration: false))
    }

    /// Searches for domains to register in; `local.` is always reported first.
    open func searchForRegistrationDomains() {
        start(.domains(registration: true))
    }

    /// Stops the search; the delegate hears `netServiceBrowserDidStopSearch`.
    open func stop() {
        let (operation, watch) = state.withLock { state -> (BrowseOperation?, ServiceBrowser.FailedContactWatch?) in
            defer { state.operation = nil; state.watch = nil; state.services = [:] }
            return (state.operation, state.watch)
        }
        guard let operation else { return }
        operation.stop()
        watch?.finish()
        call { $1.netServiceBrowserDidStopSearch($0) }
    }

    // MARK: Private

    private func start(_ target: BrowseOperation.Target) {
        let search = state.withLock { state -> Int? in
            guard state.operation == nil else { return nil }
            state.search += 1
            return state.search
        }
        guard let search else { return notSearch(.activityInProgress) }
        // A search of the link hears of failed contacts with what it lists, as ServiceBrowser does.
        var watch: ServiceBrowser.FailedContactWatch?
        if case .services(_, let domain) = target, ServiceNames.isOnTheLink(domain) {
            watch = ServiceBrowser.FailedContactWatch(context: context, listening: true) { [weak self] update in
                self?.handle(.update(update), target: target, search: search)
            }
        }
        let operation = BrowseOperation(context: context, target: target) { [weak self, watch] event in
            if case .update(let update) = event, let watch { return watch.browsed(update) }
            self?.handle(event, target: target, search: search)
        }
        state.withLock {
            $0.operation = operation
            $0.watch = watch
        }
        call { $1.netServiceBrowserWillSearch($0) }
        if case .domains = target {
            call { $1.netServiceBrowser($0, didFindDomain: "local.", moreComing: false) }
        }
        operation.start()
    }

    private func handle(_ event: BrowseOperation.Event, target: BrowseOperation.Target, search: Int) {
        switch event {
        case .failed(let error):
            let (current, watch) = state.withLock { state -> (Bool, ServiceBrowser.FailedContactWatch?) in
                guard state.search == search, state.operation != nil else { return (false, nil) }
                defer { state.operation = nil; state.watch = nil; state.services = [:] }
                return (true, state.watch)
            }
            guard current else { return }
            watch?.finish()
            notSearch(error)
        case .update(let update):
            if case .domains = target { return reportDomains(update.changes) }
            // Map each change to the NetService object it concerns, keeping one object per
            // service so `didRemove` hands back what `didFind` gave.
            let calls = state.withLock { state -> [(found: Bool, service: NetService)] in
                guard state.search == search, state.operation != nil else { return [] }
                return update.changes.map { change in
                    switch change {
                    case .added(let found):
                        let service = Self.makeService(found, target: target)
                        state.services[found] = service
                        return (true, service)
                    case .removed(let gone):
                        return (
                            false, state.services.removeValue(forKey: gone) ?? Self.makeService(gone, target: target)
                        )
                    }
                }
            }
            for (index, entry) in calls.enumerated() {
                let more = index < calls.count - 1
                if entry.found {
                    call { $1.netServiceBrowser($0, didFind: entry.service, moreComing: more) }
                } else {
                    call { $1.netServiceBrowser($0, didRemove: entry.service, moreComing: more) }
                }
            }
        }
    }

    private func reportDomains(_ changes: [BrowseChange]) {
        let names: [(Bool, String)] = changes.compactMap { change in
            switch change {
            case .added(let d): return d.name == "local" ? nil : (true, d.name + ".")
            case .removed(let d): return d.name == "local" ? nil : (false, d.name + ".")
            }
        }
        for (index, (found, name)) in names.enumerated() {
            let more = index < names.count - 1
            if found {
                call { $1.netServiceBrowser($0, didFindDomain: name, moreComing: more) }
            } else {
                call { $1.netServiceBrowser($0, didRemoveDomain: name, moreComing: more) }
            }
        }
    }

    private static func makeService(_ found: DiscoveredService, target: BrowseOperation.Target) -> NetService {
        if case .serviceTypes = target {
            // Apple's form for type enumeration: name "_http", type "_tcp.local.", domain ".".
            let labels = found.name.split(separator: ".", maxSplits: 1)
            let first = labels.first.map(String.init) ?? found.name
            let rest = labels.count > 1 ? String(labels[1]) : ""
            return NetService(domain: ".", type: "\(rest).\(found.domain).", name: first)
        }
        return NetService(domain: found.domain + ".", type: found.type + ".", name: found.name)
    }

    private func notSearch(_ error: DiscoveryError) {
        let info = error.errorDictionary
        call { $1.netServiceBrowser($0, didNotSearch: info) }
    }

    /// Calls the delegate on the scheduled run loop; the call waiting holds the browser weakly
    /// and hands it to `body` with the delegate.
    private func call(_ body: @escaping @Sendable (NetServiceBrowser, any NetServiceBrowserDelegate) -> Void) {
        scheduler.deliver { [weak self] in
            guard let self, let delegate = self.delegate else { return }
            body(self, delegate)
        }
    }
}
