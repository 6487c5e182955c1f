import Foundation
import SalutStreams

/// Browses a service type in a wide-area domain with ordinary unicast DNS queries (RFC 6763
/// §4): the PTR records of `_type._tcp.<domain>` name the instances, each resolved through its
/// SRV, TXT and address records. Unicast DNS pushes nothing, so the list is asked for again when
/// its records' TTL runs out (at least every second, at most every hour).
package struct UnicastBrowser: Sendable {
    /// A service found, resolved.
    package struct Instance: Sendable, Hashable {
        package var name: String
        package var host: String
        package var port: UInt16
        package var txt: [[UInt8]]
        package var addresses: [SocketAddress]
    }

    /// An instance's name as the zone holds it, compared, hashed and ordered by its bytes, as
    /// DNS compares names (Swift's string comparison takes a look-alike written with other
    /// code points, a Kelvin sign for a `K`, for the name, and a set of strings lists the two
    /// once).
    package typealias InstanceName = ExactText

    /// What changed between two looks at the list (pure: tested without a server).
    package struct Changes: Sendable, Equatable {
        package var added: [String] = []
        package var removed: [String] = []

        package init(from old: Set<InstanceName>, to new: Set<InstanceName>) {
            added = new.subtracting(old).sorted().map(\.text)
            removed = old.subtracting(new).sorted().map(\.text)
        }
    }

    let nameServer: SocketAddress
    /// The name whose PTRs are listed (`_printer._sub._http._tcp.zone` for a subtype).
    let serviceType: DNSName
    /// The type the instances are under (`_http._tcp.zone`, also for a subtype).
    let baseType: DNSName

    /// - Throws: ``DiscoveryError`` when the type and domain do not make a DNS name.
    package init(type: String, domain: String, nameServer: SocketAddress) throws {
        self.nameServer = nameServer
        do {
            serviceType = try DNSName(parsing: type).appending(try DNSName(parsing: domain))
            // `_sub._sub._name._tcp`: instances are `Name._name._tcp`.
            let labels = serviceType.labels
            let isSubtype = labels.count > 2 && labels[1].elementsEqual("_sub".utf8)
            baseType = isSubtype ? try DNSName(labels: Array(labels.dropFirst(2))) : serviceType
        } catch {
            throw DiscoveryError.invalidDomain("\(type).\(domain) (\(error))")
        }
    }

    /// The instance names listed now, and how long the answer may be kept (seconds).
    /// - Throws: ``DiscoveryError/Code-swift.struct/serverUnreachable`` when the name server
    ///   does not answer; ``DiscoveryError/Code-swift.struct/dnsFailure`` for an error answer
    ///   other than "no such name".
    package func instances() async throws -> (names: Set<InstanceName>, ttl: UInt32) {
        let records = try await ask(serviceType, DNSType.pointer)
        var names: Set<InstanceName> = []
        for record in records {
            // Only instances of this type: a PTR pointing elsewhere is ignored.
            guard let target = record.target, target.labels.count == baseType.labels.count + 1,
                target.isWithin(baseType)
            else { continue }
            names.insert(InstanceName(String(decoding: target.labels[0], as: UTF8.self)))
        }
        return (names, records.map(\.ttl).min() ?? 60)
    }

    /// Resolves one instance: its SRV (host and port), TXT and the host's addresses.
    /// - Throws: ``DiscoveryError/Code-swift.struct/notFound`` when it has no SRV record;
    ///   otherwise as ``instances()``.
    package func resolve(_ name: String) async throws -> Instance {
        let instance: DNSName
        do { instance = try baseType.prepending(Array(name.utf8)) } catch { throw DiscoveryError.notFound }
        guard let srv = try await ask(instance, DNSType.service).compactMap(\.service).first else {
            throw DiscoveryError.notFound
        }
        let txt = try await ask(instance, DNSType.text).compactMap(\.strings).first ?? []
        var addresses: [SocketAddress] = []
        for type in [DNSType.ipv4Address, DNSType.ipv6Address] {
            for record in try await ask(srv.target, type) {
                if record.data.count == 4 { addresses.append(SocketAddress(ipv4: record.data, port: srv.port)) }
                if record.data.count == 16 { addresses.append(SocketAddress(ipv6: record.data, port: srv.port)) }
            }
        }
        var host = srv.target.description
        if host.hasSuffix(".") { host.removeLast() }
        return Instance(name: name, host: host, port: srv.port, txt: txt, addresses: addresses)
    }

    /// The TXT record's strings of one instance (empty when it has none), and how long they
    /// may be kept (seconds).
    /// - Throws: as ``instances()``.
    package func text(of name: String) async throws -> (strings: [[UInt8]], ttl: UInt32) {
        let instance: DNSName
        do { instance = try baseType.prepending(Array(name.utf8)) } catch { throw DiscoveryError.notFound }
        let records = try await ask(instance, DNSType.text)
        return (records.compactMap(\.strings).first ?? [], records.map(\.ttl).min() ?? 60)
    }

    /// How long to wait before looking again at a list whose records live `ttl` seconds.
    package static func pollInterval(ttl: UInt32) -> Duration {
        .seconds(Int(min(max(ttl, 1), 3600)))
    }

    private func ask(_ name: DNSName, _ type: UInt16) async throws -> [DNSRecord] {
        try await Self.records(name, type, from: nameServer)
    }

    /// The `type` records of `name` as `server` answers (none for "no such name").
    /// - Throws: ``DiscoveryError/Code-swift.struct/serverUnreachable`` when it does not
    ///   answer; ``DiscoveryError/Code-swift.struct/dnsFailure`` for another error answer.
    static func records(_ name: DNSName, _ type: UInt16, from server: SocketAddress) async throws -> [DNSRecord] {
        let answer = try await DNSExchange(server: server).query(name, type)
        switch answer.rcode {
        case DNSResponseCode.noError: return answer.answers.filter { $0.type == type && $0.name == name }
        case DNSResponseCode.nameError: return []
        default:
            throw DiscoveryError.dnsFailure(
                "\(server) answered \(DNSResponseCode.messageName(answer.rcode)) for \(name)")
        }
    }
}
