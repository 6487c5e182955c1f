import CAvahi
import Foundation
import SalutStreams

/// Resolves one service on every interface and protocol it is seen on.
///
/// A single Avahi resolver with unspecified interface and protocol answers with one address.
/// To report all of them (IPv4 and IPv6, every interface) this watches where the named instance
/// appears (``InstancePaths``: one browser of the type, shared by the context's resolutions of
/// that type) and, for each (interface, protocol), runs a resolver asking for that protocol's
/// address. Each answer is merged into one `ResolvedService` and delivered again whenever it
/// gains an address or its TXT record changes.
final class ResolveOperation: QueueOperation, @unchecked Sendable {
    // @unchecked: every mutable property is used only on `context.queue`.

    private typealias Path = InstancePaths.Path

    let service: DiscoveredService
    private let deliver: @Sendable (ResolvedService) -> Void
    /// Where the instance is seen, while this watches it.
    private var instancePaths: InstancePaths?
    private var resolvers: [Path: OpaquePointer] = [:]
    private var result: ResolvedService?

    /// - Parameter service: name, base type (`_http._tcp`) and domain, as Avahi spells them.
    init(context: DiscoveryContext, service: DiscoveredService, deliver: @escaping @Sendable (ResolvedService) -> Void)
    {
        self.service = service
        self.deliver = deliver
        super.init(context: context)
    }

    // MARK: AvahiOperation

    override func clientIsRunning(_ client: OpaquePointer) {
        guard instancePaths == nil, !stopped else { return }
        let paths = InstancePaths.of(type: service.type, domain: service.domain, in: context)
        instancePaths = paths
        // (The handler holds this operation until `releaseAvahiObjects` stops the watch.)
        paths.watch(service.name, by: ObjectIdentifier(self)) { _, seen, path in self.instance(seen, path) }
        // Not heard of, and the shared browser may not know every name (a crowded type, or no
        // browser): one resolver on any interface and protocol finds it all the same (with one
        // address; others come as the browser reports the instance's paths).
        if resolvers.isEmpty, paths.mayMissNames {
            instance(true, Path(interface: AvahiIfIndex(AVAHI_IF_UNSPEC), proto: AvahiProtocol(AVAHI_PROTO_UNSPEC)))
        }
    }

    // MARK: Private

    private func instance(_ seen: Bool, _ path: Path) {
        if !seen {
            if let resolver = resolvers.removeValue(forKey: path) { avahi_service_resolver_free(resolver) }
            return
        }
        guard resolvers[path] == nil, let client = context.runningClient, !stopped else { return }
        let me = userdata
        let resolver = avahi_service_resolver_new(
            client, path.interface, path.proto, service.name, service.type, service.domain, path.proto,
            AvahiLookupFlags(rawValue: 0),
            { _, interface, _, event, _, _, _, host, address, port, txt, _, userdata in
                let op = ResolveOperation.from(userdata)
                guard event == AVAHI_RESOLVER_FOUND else { return }
                op.found(
                    host: AvahiValues.string(host),
                    address: address.flatMap { AvahiValues.socketAddress($0, port: port, interface: interface) },
                    port: port, txt: AvahiValues.txtRecord(txt))
            }, me)
        if let resolver {
            resolvers[path] = resolver
        } else {
            // (Most often the daemon's limit of objects per client.) Tried again when the
            // instance is seen anew; said at debug level, as a flood would say it many times.
            SalutLogging.logger.debug(
                "cannot resolve \"\(service.name)\" \(service.type): \(DiscoveryError.avahiMessage(avahi_client_errno(client)))"
            )
        }
    }

    private func found(host: String, address: SocketAddress?, port: UInt16, txt: TXTRecord) {
        guard !stopped else { return }
        var next =
            result ?? ResolvedService(service: service, hostName: host, port: port, txtRecord: txt, addresses: [])
        next.hostName = host
        next.port = port
        next.txtRecord = txt
        if let address, !next.addresses.contains(address) { next.addresses.append(address) }
        guard next != result else { return }
        SalutLogging.logger.debug(
            "resolved \"\(service.name)\" \(service.type): \(host) port \(port), \(next.addresses.count) address(es)\(address.map { ", new: \($0)" } ?? "")"
        )
        result = next
        deliver(next)
    }

    override func releaseAvahiObjects() {
        for resolver in resolvers.values { avahi_service_resolver_free(resolver) }
        resolvers = [:]
        instancePaths?.unwatch(service.name, by: ObjectIdentifier(self))
        instancePaths = nil
    }
}
