import Foundation
import SalutStreams

/// A service instance seen on the network: its name, type and domain, in Avahi's form without
/// trailing dots (`My Printer`, `_ipp._tcp`, `local`).
///
/// Equal services are the same instance however many interfaces and protocols it was seen on.
/// Names compare byte for byte, as DNS compares them (not as Swift compares strings): two
/// names that Unicode takes for the same text but are written with other code points (a
/// Kelvin sign for a `K`, an accent composed or not) are two services, as they are to every
/// mDNS responder, so a service can never be taken for, or removed as, another.
public struct DiscoveredService: Sendable, Hashable, CustomStringConvertible {
    /// The instance name, for example `Living Room`.
    public var name: String
    /// The service type, for example `_http._tcp` (or `_printer._sub._http._tcp` when browsing
    /// a subtype).
    public var type: String
    /// The domain, normally `local`.
    public var domain: String

    /// Names a service to resolve or monitor.
    public init(name: String, type: String, domain: String = "local") {
        self.name = name
        self.type = type
        self.domain = domain
    }

    public var description: String { "\(name).\(type).\(domain)" }

    /// Whether the two are the same service: name, type and domain equal byte for byte.
    public static func == (lhs: DiscoveredService, rhs: DiscoveredService) -> Bool {
        ExactText(lhs.name) == ExactText(rhs.name) && ExactText(lhs.type) == ExactText(rhs.type)
            && ExactText(lhs.domain) == ExactText(rhs.domain)
    }

    /// Hashes the name, type and domain by their bytes (as `==` compares them).
    public func hash(into hasher: inout Hasher) {
        for part in [name, type, domain] { hasher.combine(ExactText(part)) }
    }
}

/// What resolving a service found on one interface and protocol.
public struct ResolvedService: Sendable, Hashable {
    /// The service that was resolved.
    public var service: DiscoveredService
    /// The target host, for example `printer.local`.
    public var hostName: String
    /// The port, in host byte order.
    public var port: UInt16
    /// The TXT record.
    public var txtRecord: TXTRecord
    /// Every address found so far: IPv4 and IPv6, IPv6 link-local ones with their scope id.
    public var addresses: [SocketAddress]

    /// A resolved service made of its parts: what a resolve returns, made by hand (to test
    /// code that acts on resolved services without a network, for example).
    public init(
        service: DiscoveredService, hostName: String, port: UInt16, txtRecord: TXTRecord,
        addresses: [SocketAddress] = []
    ) {
        self.service = service
        self.hostName = hostName
        self.port = port
        self.txtRecord = txtRecord
        self.addresses = addresses
    }
}

/// One change reported by a browser.
public enum BrowseChange: Sendable, Hashable {
    /// The service was seen for the first time (on any interface or protocol).
    case added(DiscoveredService)
    /// The service is gone from the last interface and protocol it was seen on.
    case removed(DiscoveredService)
}

/// Where a service was seen: a network interface and the IP protocol mDNS carried it over.
public struct ServiceSighting: Sendable, Hashable {
    /// The interface name, for example `eth0` (the index as text if it has no name).
    public var interface: String
    /// The interface index.
    public var interfaceIndex: Int32
    /// True when seen over IPv6 mDNS, false for IPv4.
    public var isIPv6: Bool
}

/// A batch of browse changes, delivered together.
public struct BrowseUpdate: Sendable, Hashable {
    /// What changed, in order.
    public var changes: [BrowseChange]
    /// For each service in ``changes``, and for each listed service seen on an interface or
    /// protocol more or fewer since the last update (such an update may have no changes):
    /// where it is seen (for a removal: where it was last seen), ordered by interface index,
    /// IPv4 first.
    public var sightings: [DiscoveredService: [ServiceSighting]] = [:]
    /// Every service known after these changes.
    public var services: Set<DiscoveredService>
    /// True once Avahi has delivered everything from its cache and the first network answers
    /// (ALL_FOR_NOW); updates after that are live changes.
    public var isComplete: Bool
    /// The TXT record of each listed service whose record is known, from a browser made with
    /// ``ServiceBrowser/includingTXTRecords(waitingUpTo:maximumWatched:)``; empty otherwise.
    public var txtRecords: [DiscoveredService: TXTRecord] = [:]
}
