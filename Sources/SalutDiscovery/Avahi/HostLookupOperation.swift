import CAvahi
import Foundation
import SalutStreams

/// Resolves a host name (`name.local`) to its addresses through Avahi, IPv4 and IPv6 at once:
/// one Avahi host-name resolver per address family, each reporting one address.
final class HostLookupOperation: QueueOperation, @unchecked Sendable {
    // @unchecked: every mutable property is used only on `context.queue`.

    enum Family: Sendable { case any, ipv4, ipv6 }

    let hostName: String
    let family: Family
    private let deliver: @Sendable (Result<SocketAddress, DiscoveryError>) -> Void
    private var resolvers: [OpaquePointer] = []
    private var failures = 0

    init(
        context: DiscoveryContext, hostName: String, family: Family,
        deliver: @escaping @Sendable (Result<SocketAddress, DiscoveryError>) -> Void
    ) {
        self.hostName = hostName
        self.family = family
        self.deliver = deliver
        super.init(context: context)
    }

    override func clientIsRunning(_ client: OpaquePointer) {
        guard resolvers.isEmpty, !stopped else { return }
        var protocols: [Int32] = []
        if family != .ipv6 { protocols.append(AvahiProtocol(AVAHI_PROTO_INET)) }
        if family != .ipv4 { protocols.append(AvahiProtocol(AVAHI_PROTO_INET6)) }
        let me = userdata
        for proto in protocols {
            let resolver = avahi_host_name_resolver_new(
                client, AvahiIfIndex(AVAHI_IF_UNSPEC), AvahiProtocol(AVAHI_PROTO_UNSPEC), hostName, proto,
                AvahiLookupFlags(rawValue: 0),
                { _, interface, _, event, _, address, _, userdata in
                    let op = HostLookupOperation.from(userdata)
                    op.answer(event, address.flatMap { AvahiValues.socketAddress($0, port: 0, interface: interface) })
                }, me)
            if let resolver { resolvers.append(resolver) } else { failures += 1 }
        }
        if failures == protocols.count {
            deliver(.failure(DiscoveryError(avahiCode: avahi_client_errno(client)).naming(host: hostName)))
        }
    }

    override func releaseAvahiObjects() {
        for resolver in resolvers { avahi_host_name_resolver_free(resolver) }
        resolvers = []
        failures = 0
    }

    private func answer(_ event: AvahiResolverEvent, _ address: SocketAddress?) {
        guard !stopped else { return }
        if event == AVAHI_RESOLVER_FOUND, let address {
            deliver(.success(address))
        } else {
            failures += 1
            if failures >= resolvers.count { deliver(.failure(.notFound)) }
        }
    }
}
