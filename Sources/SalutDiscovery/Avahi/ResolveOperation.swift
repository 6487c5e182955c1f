import CAvahi
import Foundation
import SalutStreams

/// Resolves one service on every interface and protocol it is seen on.
///
/// A single Avahi resolver with unspecified interface and protocol answers with one address.
/// To report all of them (IPv4 and IPv6, every interface) this runs a browser for the service's
/// type and, for each (interface, protocol) the named instance appears on, a resolver asking for
/// that protocol's address. Each answer is merged into one `ResolvedService` and delivered again
/// whenever it gains an address or its TXT record changes.
final class ResolveOperation: QueueOperation, @unchecked Sendable {
    // @unchecked: every mutable property is used only on `context.queue`.

    private struct Path: Hashable { var interface: AvahiIfIndex; var proto: AvahiProtocol }

    let service: DiscoveredService
    private let deliver: @Sendable (ResolvedService) -> Void
    private var browser: OpaquePointer?
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
        guard browser == nil, !stopped else { return }
        let me = userdata
        browser = avahi_service_browser_new(
            client, AvahiIfIndex(AVAHI_IF_UNSPEC), AvahiProtocol(AVAHI_PROTO_UNSPEC), service.type, service.domain,
            AvahiLookupFlags(rawValue: 0),
            { _, interface, proto, event, name, _, _, _, userdata in
                let op = ResolveOperation.from(userdata)
                guard let name, String(cString: name) == op.service.name else { return }
                op.instance(event, Path(interface: interface, proto: proto))
            }, me)
    }

    // MARK: Private

    private func instance(_ event: AvahiBrowserEvent, _ path: Path) {
        switch event {
        case AVAHI_BROWSER_NEW:
            guard resolvers[path] == nil, let client = context.runningClient else { return }
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
            if let resolver { resolvers[path] = resolver }
        case AVAHI_BROWSER_REMOVE:
            if let resolver = resolvers.removeValue(forKey: path) { avahi_service_resolver_free(resolver) }
        default:
            break
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
        if let browser { avahi_service_browser_free(browser) }
        browser = nil
    }
}
