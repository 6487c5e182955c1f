import Foundation
import Glibc
import SalutStreams

/// How to publish a service in a wide-area domain: a unicast DNS zone (`home.arpa`,
/// `office.example.com`) that Salut updates itself with DNS UPDATE messages (RFC 2136) signed
/// with a TSIG key, so that peers on other subnets find it by ordinary DNS queries (DNS-SD,
/// RFC 6763). avahi-daemon cannot publish outside `.local`; Salut can.
///
/// ```swift
/// let key = try SalutTSIGKey(contentsOfFile: "/etc/salut/publisher.key")
/// let ad = try await ServiceAdvertisement.publish(name: "Lab Printer", type: "_ipp._tcp",
///                                                 domain: "home.arpa", port: 631,
///                                                 wideArea: WideAreaPublishing(key: key))
/// ```
///
/// The zone's primary server is found the DNS-SD way: the zone's `_dns-update._udp` SRV record,
/// else its SOA record's primary name, both asked of ``nameServer``.
public struct WideAreaPublishing: Sendable {
    /// The key that signs the updates; the zone's `update-policy` must allow it.
    public var key: SalutTSIGKey
    /// The name server to ask for the zone's primary; nil for the first `nameserver` of
    /// `/etc/resolv.conf`.
    public var nameServer: SocketAddress?
    /// The host name the service's SRV record names (in the zone unless it already ends in
    /// it); nil for this machine's host name.
    public var hostName: String?
    /// The addresses published for that host; nil for this machine's addresses (IPv4 other
    /// than loopback, IPv6 other than loopback and link-local: peers on other links must reach
    /// them).
    public var addresses: [SocketAddress]?
    /// How long peers may keep the records (seconds).
    public var ttl: UInt32
    /// The lease asked for (RFC 9664 Update Lease, seconds): a server that honours it removes the
    /// records of a publisher that died; Salut refreshes them at half the lease while it runs.
    public var lease: UInt32

    /// - Parameters:
    ///   - key: the key that signs the updates.
    ///   - nameServer: where to look for the zone's primary (nil: `/etc/resolv.conf`).
    ///   - hostName: the host name to publish (nil: this machine's).
    ///   - addresses: the host's addresses to publish (nil: this machine's).
    ///   - ttl: the records' TTL in seconds (at least 1).
    ///   - lease: the Update Lease in seconds (at least 60).
    public init(
        key: SalutTSIGKey, nameServer: SocketAddress? = nil, hostName: String? = nil,
        addresses: [SocketAddress]? = nil, ttl: UInt32 = 120, lease: UInt32 = 3600
    ) {
        self.key = key
        self.nameServer = nameServer
        self.hostName = hostName
        self.addresses = addresses
        self.ttl = max(1, ttl)
        self.lease = max(60, lease)
    }

    /// This machine's short host name.
    static func localHostName() -> String {
        var buffer = [UInt8](repeating: 0, count: 256)
        guard gethostname(&buffer, buffer.count - 1) == 0 else { return "localhost" }
        let name = String(decoding: buffer.prefix { $0 != 0 }, as: UTF8.self)
        return name.split(separator: ".").first.map(String.init) ?? "localhost"
    }

    /// This machine's addresses that a peer on another link can reach.
    static func localAddresses() -> [SocketAddress] {
        var list: UnsafeMutablePointer<ifaddrs>?
        guard getifaddrs(&list) == 0, let first = list else { return [] }
        defer { freeifaddrs(list) }
        var out: [SocketAddress] = []
        var node: UnsafeMutablePointer<ifaddrs>? = first
        while let current = node {
            defer { node = current.pointee.ifa_next }
            let flags = Int32(current.pointee.ifa_flags)
            guard flags & Int32(IFF_UP) != 0, flags & Int32(IFF_RUNNING) != 0, flags & Int32(IFF_LOOPBACK) == 0,
                let raw = current.pointee.ifa_addr
            else { continue }
            let family = Int32(raw.pointee.sa_family)
            let length =
                family == AF_INET
                ? MemoryLayout<sockaddr_in>.size : family == AF_INET6 ? MemoryLayout<sockaddr_in6>.size : 0
            guard length > 0, let address = SocketAddress(Data(bytes: raw, count: length)) else { continue }
            // Link-local addresses (fe80::/10, 169.254/16) mean nothing on another link.
            if address.isIPv6LinkLocal { continue }
            if !address.isIPv6, address.rawBytes[0] == 169, address.rawBytes[1] == 254 { continue }
            if !out.contains(address) { out.append(address) }
        }
        return out
    }
}
