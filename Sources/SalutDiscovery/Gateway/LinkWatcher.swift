import Foundation
import SalutStreams

extension DiscoveryGateway {
    /// The link side of a gateway: browses the types it mirrors through avahi-daemon and
    /// reports each service seen and lost, and follows each admitted service's records.
    struct LinkWatcher: Sendable {
        let configuration: Configuration

        /// Reports every service of the mirrored types seen or lost on the link until the
        /// calling task is cancelled; a browse that fails (avahi-daemon restarting) starts again
        /// a second later.
        func watch(_ report: @escaping @Sendable (StateMachine.Event) -> Void) async {
            let excluded = Set(configuration.excludedTypes.map { $0.lowercased() })
            await withTaskGroup(of: Void.self) { group in
                if !configuration.types.isEmpty {
                    for type in configuration.types
                    where !excluded.contains(type.lowercased()) && DiscoveryGateway.mayMirror(type: type) {
                        group.addTask { await Self.browse(type, report) }
                    }
                    return
                }
                // Every type on the link, as it appears (at most `maximumTypes` at a time).
                await Self.watchEveryType(configuration, excluded: excluded, report)
            }
        }

        /// Browses every type the link has, as types appear and go: a type that leaves the link
        /// frees its place (its browse stops, its services are reported lost), and the next type
        /// that waited for a place takes it. At most `maximumTypes` are browsed at a time, and
        /// four times as many wait, in the order they appeared.
        private static func watchEveryType(
            _ configuration: Configuration, excluded: Set<String>,
            _ report: @escaping @Sendable (StateMachine.Event) -> Void
        ) async {
            var browsed: [String: Task<Void, Never>] = [:]
            var waiting: [String] = []
            var isWaiting = Set<String>()
            var toldFull = false
            func start(_ type: String) {
                browsed[type] = Task { await Self.browse(type, report) }
            }
            /// Stops browsing `type` and waits until its services are reported lost (so that a
            /// type back at once is seen again after, never before, its old services are lost).
            func stop(_ type: String) async {
                guard let browse = browsed.removeValue(forKey: type) else { return }
                browse.cancel()
                await browse.value
            }
            while !Task.isCancelled {
                do {
                    for try await update in try ServiceBrowser.serviceTypes() {
                        for change in update.changes {
                            switch change {
                            case .added(let found):
                                let type = found.name.lowercased()
                                guard !excluded.contains(type), DiscoveryGateway.mayMirror(type: type),
                                    browsed[type] == nil, !isWaiting.contains(type)
                                else { continue }
                                if browsed.count < configuration.maximumTypes {
                                    start(type)
                                    continue
                                }
                                if waiting.count < 4 * configuration.maximumTypes {
                                    waiting.append(type)
                                    isWaiting.insert(type)
                                }
                                if !toldFull {
                                    toldFull = true
                                    SalutLogging.logger.warning(
                                        "more than \(configuration.maximumTypes) service types on the link: \(type) and later ones wait until types leave the link"
                                    )
                                }
                            case .removed(let found):
                                let type = found.name.lowercased()
                                if isWaiting.remove(type) != nil { waiting.removeAll { $0 == type } }
                                guard browsed[type] != nil else { continue }
                                await stop(type)
                                if let next = waiting.first {
                                    waiting.removeFirst()
                                    isWaiting.remove(next)
                                    start(next)
                                }
                                if waiting.isEmpty { toldFull = false }
                            }
                        }
                    }
                } catch {
                    SalutLogging.logger.warning("browsing the link's service types failed: \(error)")
                }
                // The listing ended (avahi-daemon went away): types that left meanwhile would
                // hold their places, so every browse stops (its services reported lost) and the
                // next listing starts afresh.
                for type in Array(browsed.keys) { await stop(type) }
                waiting = []
                isWaiting = []
                toldFull = false
                try? await Task.sleep(for: .seconds(1))
            }
            for type in Array(browsed.keys) { await stop(type) }
        }

        /// Reports the services of `type` seen and lost, until cancelled.
        private static func browse(_ type: String, _ report: @escaping @Sendable (StateMachine.Event) -> Void) async {
            var known = Set<ServiceKey>()
            while !Task.isCancelled {
                do {
                    for try await update in try ServiceBrowser(type: type) {
                        for change in update.changes {
                            switch change {
                            case .added(let service):
                                let key = ServiceKey(name: service.name, type: type)
                                if known.insert(key).inserted { report(.seen(key)) }
                            case .removed(let service):
                                let key = ServiceKey(name: service.name, type: type)
                                if known.remove(key) != nil { report(.lost(key)) }
                            }
                        }
                    }
                } catch {
                    SalutLogging.logger.warning("browsing \(type) on the link failed: \(error)")
                }
                // The browse ended (the daemon went away): what it showed is gone with it, and
                // comes back when it is seen again.
                for key in known { report(.lost(key)) }
                known = []
                try? await Task.sleep(for: .seconds(1))
            }
        }

        /// How many services one connection to avahi-daemon follows at most: each holds a
        /// resolver per interface and protocol (two on a dual-stack link, four on two), and the
        /// daemon gives a client 1,024 objects.
        static let servicesPerContext = 200

        /// Reports `key`'s records each time they change (its first resolution included),
        /// until cancelled; resolves through `context`.
        static func follow(
            _ key: ServiceKey, in context: DiscoveryContext = .shared,
            _ report: @escaping @Sendable (MirroredService) -> Void,
            unresolved: @escaping @Sendable () -> Void
        ) async {
            let service = DiscoveredService(name: key.name, type: key.type, domain: "local")
            guard let resolutions = try? service.resolutions(context: context) else { return }
            // The first answer often has one address of several (IPv6 link-local before IPv4):
            // what comes within `firstSettle` of it is reported with it, once; later changes
            // at once.
            let state = Locked<(settled: Bool, latest: MirroredService?)>((false, nil))
            let (firstSeen, signal) = AsyncStream<Void>.makeStream()
            let reader = Task {
                for await resolved in resolutions {
                    let mirrored = MirroredService(key: key, resolved: resolved)
                    let now = state.withLock { state -> Bool in
                        if state.settled { return true }
                        if state.latest == nil { signal.yield() }
                        state.latest = mirrored
                        return false
                    }
                    if now { report(mirrored) }
                }
            }
            await withTaskCancellationHandler {
                // A service that does not resolve (a host that does not answer, a record too
                // large for avahi-daemon) is said to, once, and may lose its place to another.
                let resolvedInTime = await withTaskGroup(of: Bool.self) { group in
                    group.addTask {
                        for await _ in firstSeen { return true }
                        return false
                    }
                    group.addTask {
                        try? await Task.sleep(for: resolveBound)
                        return false
                    }
                    let first = await group.next() ?? false
                    group.cancelAll()
                    return first
                }
                if !resolvedInTime && !Task.isCancelled { unresolved() }
                try? await Task.sleep(for: firstSettle)
                let pending = state.withLock { state -> MirroredService? in
                    state.settled = true
                    defer { state.latest = nil }
                    return state.latest
                }
                if let pending, !Task.isCancelled { report(pending) }
                await reader.value
            } onCancel: {
                reader.cancel()
                signal.finish()
            }
        }

        /// How long the first resolution of a service gathers its addresses (avahi-daemon gives
        /// a cached service's records within milliseconds; an address that comes later is one
        /// more update). Half a second was a quarter of the time a service took to show on
        /// another link; 150 ms, a tenth of the 2 s that 500 services took.
        static let firstSettle: Duration = .milliseconds(50)
        /// How long a service has to resolve before it is said not to.
        static let resolveBound: Duration = .seconds(10)
    }
}

extension DiscoveryGateway.MirroredService {
    /// The service as resolved on the link: its host's name without `.local` (empty when the
    /// host is not a `.local` host name, which is then not written), its TXT strings as they are
    /// (no strings read as the one empty string DNS carries), and only its addresses that route
    /// off the link.
    init(key: DiscoveryGateway.ServiceKey, resolved: ResolvedService) {
        self.key = key
        host = Self.hostOnTheLink(resolved.hostName) ?? ""
        port = resolved.port
        let strings = DNSRecord.strings(inTextData: Array(resolved.txtRecord.data)) ?? []
        txt = strings.isEmpty ? [[]] : strings
        addresses = Self.ordered(resolved.addresses.map(\.rawBytes).filter(Self.routesOffTheLink))
    }

    /// `addresses` once each, IPv4 first, in byte order: one service's addresses compare equal
    /// however the link or the zone listed them.
    static func ordered(_ addresses: [[UInt8]]) -> [[UInt8]] {
        Set(addresses).sorted { a, b in a.count != b.count ? a.count < b.count : a.lexicographicallyPrecedes(b) }
    }

    /// `name` without its `.local` ending (`printer`), when it is a host name of the link: one
    /// label of letters, digits and hyphens (so that it can never be written over the
    /// gateway's other names: `_ipp._tcp`, `_services._dns-sd._udp`); nil otherwise. A host
    /// named `HOST.LABEL.local` is another link's, announced here by a gateway
    /// (``Configuration/announceRemote``): never written back into the zone.
    static func hostOnTheLink(_ name: String) -> String? {
        // ASCII only, judged before folding case (Unicode's lower case makes a Kelvin sign a `k`).
        guard name.utf8.allSatisfy({ $0 < 0x80 }) else { return nil }
        var name = name.lowercased()
        if name.hasSuffix(".") { name.removeLast() }
        guard name.hasSuffix(".local") else { return nil }
        let labels = name.dropLast(".local".count).split(separator: ".", omittingEmptySubsequences: false)
        guard labels.count == 1, labels.allSatisfy(isHostLabel) else { return nil }
        return labels.joined(separator: ".")
    }

    /// Whether this is a service listed in the zone whose records could not be read (see
    /// ``DiscoveryGateway/GatewayZone/list()``).
    var isUnreadable: Bool { host.isEmpty && port == 0 }

    /// Letters, digits and hyphens, 1 to 63 of them, not starting with a hyphen.
    static func isHostLabel(_ label: Substring) -> Bool {
        (1...63).contains(label.utf8.count) && !label.hasPrefix("-")
            && label.utf8.allSatisfy { byte in
                (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte)
                    || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) || byte == UInt8(ascii: "-")
            }
    }

    /// False for addresses that mean nothing off this link, or are no host's: IPv4 link-local
    /// (169.254/16), loopback, unspecified, multicast (224/4) and broadcast; IPv6 link-local
    /// (fe80::/10), loopback, unspecified and multicast (ff00::/8).
    static func routesOffTheLink(_ bytes: [UInt8]) -> Bool {
        switch bytes.count {
        case 4:
            return !(bytes[0] == 169 && bytes[1] == 254) && bytes[0] != 127 && bytes != [0, 0, 0, 0]
                && !(224...239).contains(bytes[0]) && bytes != [255, 255, 255, 255]
        case 16:
            let linkLocal = bytes[0] == 0xfe && (bytes[1] & 0xc0) == 0x80
            let special = bytes.dropLast().allSatisfy { $0 == 0 } && (bytes[15] == 0 || bytes[15] == 1)
            return !linkLocal && !special && bytes[0] != 0xff
        default:
            return false
        }
    }
}
