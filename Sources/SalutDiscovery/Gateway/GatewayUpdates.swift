import SalutStreams

/// The DNS updates (RFC 2136) a gateway sends for each of its ``DiscoveryGateway/ZoneOperation``s,
/// under its label's domain (`LABEL.ZONE`): a value with no I/O, so that tests check every
/// record without a server.
///
/// A service `Name._ipp._tcp` on the link becomes the PTR `_ipp._tcp.LABEL.ZONE` →
/// `Name._ipp._tcp.LABEL.ZONE`, that name's SRV (to `HOST.LABEL.ZONE`) and TXT (byte for byte),
/// and the host's A and AAAA records. The label's types are listed under
/// `_services._dns-sd._udp.LABEL.ZONE`, and the label is a browsing domain of the zone's
/// (`b` and `lb` under `_dns-sd._udp.ZONE`, RFC 6763 §11). Every update replaces what it
/// writes (the records of the name are deleted first), so that writing twice, or two gateways
/// writing the same link, leaves one copy.
struct GatewayUpdates: Sendable {
    /// The zone the server holds (the update's zone section).
    let zone: DNSName
    /// The domain the gateway was given (`ZONE`), whose browsing domains list the label.
    let domain: DNSName
    /// `LABEL.ZONE`.
    let labelDomain: DNSName
    /// TTL of every record written (seconds).
    let ttl: UInt32

    /// The largest update a gateway sends (a DNS message over TCP is at most 65,535 bytes; the
    /// signature takes the rest).
    static let largestUpdate = 65_000

    /// - Throws: ``DNSWireError`` when `LABEL.DOMAIN` is not a DNS name within `zone`.
    init(zone: DNSName, domain: DNSName, label: String, ttl: UInt32 = 120) throws(DNSWireError) {
        self.zone = zone
        self.domain = domain
        labelDomain = try domain.prepending(Array(label.utf8))
        guard labelDomain.isWithin(zone) else { throw .invalidName("\(labelDomain) is not within the zone \(zone)") }
        self.ttl = ttl
    }

    /// `_type._tcp.LABEL.ZONE`.
    func typeName(_ type: String) throws(DNSWireError) -> DNSName {
        try DNSName(parsing: type).appending(labelDomain)
    }

    /// `Name._type._tcp.LABEL.ZONE`.
    func instanceName(_ key: DiscoveryGateway.ServiceKey) throws(DNSWireError) -> DNSName {
        try typeName(key.type).prepending(Array(key.name.utf8))
    }

    /// `HOST.LABEL.ZONE` (`printer.LABEL.ZONE` for the link's `printer.local`).
    func hostName(_ host: String) throws(DNSWireError) -> DNSName {
        try DNSName(parsing: host).appending(labelDomain)
    }

    /// `_services._dns-sd._udp.LABEL.ZONE`.
    var typesName: DNSName {
        get throws(DNSWireError) {
            try DNSName(parsing: "_services._dns-sd._udp").appending(labelDomain)
        }
    }

    /// The update for `operation`.
    /// - Throws: ``DNSWireError`` when a name does not fit DNS's limits.
    func message(for operation: DiscoveryGateway.ZoneOperation, id: UInt16) throws(DNSWireError) -> DNSMessage {
        try message(for: [operation], id: id)
    }

    /// One update making each of `operations`, in order (the server applies them together).
    /// - Throws: ``DNSWireError`` when a name does not fit DNS's limits.
    func message(for operations: [DiscoveryGateway.ZoneOperation], id: UInt16) throws(DNSWireError) -> DNSMessage {
        var message = DNSMessage(id: id, opcode: DNSMessage.update)
        message.questions = [DNSQuestion(name: zone, type: DNSType.startOfAuthority)]
        for operation in operations { message.authorities += try records(for: operation) }
        return message
    }

    /// The update section's records for `operation`.
    private func records(for operation: DiscoveryGateway.ZoneOperation) throws(DNSWireError) -> [DNSRecord] {
        switch operation {
        case .write(let service, _, let droppingHost):
            let instance = try instanceName(service.key)
            let host = try hostName(service.host)
            var records = [deleteAll(at: instance)]
            records.append(.pointer(try typeName(service.key.type), to: instance, ttl: ttl))
            records.append(.service(instance, port: service.port, target: host, ttl: ttl))
            records.append(.text(instance, strings: service.txt, ttl: ttl))
            // The type is listed with its first service, in the same update: a gateway killed
            // between the two would leave a service the next start cannot find.
            records.append(.pointer(try typesName, to: try typeName(service.key.type), ttl: ttl))
            records.append(deleteSet(at: host, type: DNSType.ipv4Address))
            records.append(deleteSet(at: host, type: DNSType.ipv6Address))
            records += service.addresses.map { DNSRecord.address(host, bytes: $0, ttl: ttl) }
            if let droppingHost { records.append(deleteAll(at: try hostName(droppingHost))) }
            return records
        case .remove(let key, let droppingHost):
            let instance = try instanceName(key)
            var pointer = DNSRecord.pointer(try typeName(key.type), to: instance, ttl: 0)
            pointer.recordClass = DNSClass.none  // this PTR only: the type's others stay
            var records = [pointer, deleteAll(at: instance)]
            if let droppingHost { records.append(deleteAll(at: try hostName(droppingHost))) }
            return records
        case .enumerate(let adding, let removing, let browseDomain):
            let list = try typesName
            var records: [DNSRecord] = []
            for type in adding { records.append(.pointer(list, to: try typeName(type), ttl: ttl)) }
            for type in removing {
                var pointer = DNSRecord.pointer(list, to: try typeName(type), ttl: 0)
                pointer.recordClass = DNSClass.none
                records.append(pointer)
            }
            if browseDomain {
                for kind in ["b", "lb"] {
                    let name = try DNSName(parsing: "\(kind)._dns-sd._udp").appending(domain)
                    records.append(.pointer(name, to: labelDomain, ttl: ttl))
                }
            }
            return records
        }
    }

    /// `message`'s changes as `nsupdate` would take them (for a dry run, and for a person).
    static func nsupdateLines(_ message: DNSMessage) -> String {
        var lines = ["zone \(message.questions.first?.name.description ?? ".")"]
        for record in message.authorities {
            let name = record.name.description
            switch (record.recordClass, record.type) {
            case (DNSClass.any, DNSType.any): lines.append("update delete \(name)")
            case (DNSClass.any, let type): lines.append("update delete \(name) \(typeName(type))")
            case (DNSClass.none, let type): lines.append("update delete \(name) \(typeName(type)) \(rdata(record))")
            default: lines.append("update add \(name) \(record.ttl) \(typeName(record.type)) \(rdata(record))")
            }
        }
        lines.append("send")
        return lines.joined(separator: "\n")
    }

    private static func typeName(_ type: UInt16) -> String {
        switch type {
        case DNSType.ipv4Address: "A"
        case DNSType.ipv6Address: "AAAA"
        case DNSType.pointer: "PTR"
        case DNSType.service: "SRV"
        case DNSType.text: "TXT"
        default: "TYPE\(type)"
        }
    }

    /// A record's data in master-file form.
    private static func rdata(_ record: DNSRecord) -> String {
        if let target = record.target { return target.description }
        if let srv = record.service { return "\(srv.priority) \(srv.weight) \(srv.port) \(srv.target)" }
        if let strings = record.strings {
            return strings.map { string in
                "\""
                    + string.map { byte -> String in
                        switch byte {
                        case UInt8(ascii: "\""), UInt8(ascii: "\\"): return "\\" + String(UnicodeScalar(byte))
                        case 0x20...0x7E: return String(UnicodeScalar(byte))
                        default:
                            let digits = String(byte)
                            return "\\" + String(repeating: "0", count: 3 - digits.count) + digits
                        }
                    }.joined() + "\""
            }.joined(separator: " ")
        }
        if record.data.count == 4 { return record.data.map(String.init).joined(separator: ".") }
        if record.data.count == 16 {
            return SocketAddress(ipv6: record.data, port: 0).host
        }
        return record.data.map { String(format: "%02x", $0) }.joined()
    }

    /// Deletes every record at `name` (RFC 2136 §2.5.3).
    private func deleteAll(at name: DNSName) -> DNSRecord {
        DNSRecord(name: name, type: DNSType.any, recordClass: DNSClass.any, ttl: 0, data: [])
    }

    /// Deletes the record set of `type` at `name` (RFC 2136 §2.5.2).
    private func deleteSet(at name: DNSName, type: UInt16) -> DNSRecord {
        DNSRecord(name: name, type: type, recordClass: DNSClass.any, ttl: 0, data: [])
    }
}
