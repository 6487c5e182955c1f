/// The DNS updates (RFC 2136) that publish one service in a unicast zone the DNS-SD way
/// (RFC 6763): the type's PTR to the instance, the instance's SRV and TXT, a PTR per subtype,
/// and the host's addresses. A value with no I/O: each method returns the message to sign and
/// send, so tests check every record without a server.
struct ServiceUpdates: Sendable, Equatable {
    let zone: DNSName
    /// `Name._type._tcp.zone`.
    let instance: DNSName
    /// `_type._tcp.zone`.
    let serviceType: DNSName
    /// `_sub._sub._type._tcp.zone`, one per subtype.
    let subtypes: [DNSName]
    /// The host the SRV names (`host.zone`), and its addresses (4 or 16 bytes each).
    let host: DNSName
    let addresses: [[UInt8]]
    let port: UInt16
    let txt: [[UInt8]]
    /// TTL of every record (seconds).
    let ttl: UInt32
    /// The lease asked for (RFC 9664), in seconds; nil sends none.
    let lease: UInt32?
    /// The zone the server holds (the update's zone section): ``zone`` itself, unless the
    /// records go below the zone's apex (see ``inZone(_:)``).
    private(set) var updateZone: DNSName

    /// - Throws: ``DNSWireError`` when a name does not fit DNS's limits.
    init(
        name: String, type: String, subtypes: [String] = [], zone: String, host: String, addresses: [[UInt8]],
        port: UInt16,
        txt: [[UInt8]], ttl: UInt32 = 120, lease: UInt32? = 3600
    ) throws(DNSWireError) {
        let zoneName = try DNSName(parsing: zone)
        let typeName = try DNSName(parsing: type).appending(zoneName)
        var subtypeNames: [DNSName] = []
        for subtype in subtypes {
            subtypeNames.append(try DNSName(labels: [Array(subtype.utf8), Array("_sub".utf8)]).appending(typeName))
        }
        let hostName = try DNSName(parsing: host)
        self.zone = zoneName
        serviceType = typeName
        instance = try typeName.prepending(Array(name.utf8))
        self.subtypes = subtypeNames
        self.host = hostName.isWithin(zoneName) ? hostName : try hostName.appending(zoneName)
        self.addresses = addresses
        self.port = port
        self.txt = txt
        self.ttl = ttl
        self.lease = lease
        updateZone = zoneName
    }

    /// The same records, sent as updates of `zone`, the zone the server holds that ``zone``
    /// (a name below its apex, such as `lab-a.home.arpa` in `home.arpa`) is in.
    func inZone(_ zone: DNSName) -> ServiceUpdates {
        var copy = self
        copy.updateZone = zone
        return copy
    }

    /// Adds every record, on condition that the instance name is not in use (RFC 2136 §2.4.5):
    /// the server answers YXDOMAIN when it is, and changes nothing.
    func registration(id: UInt16) -> DNSMessage {
        var message = header(id: id)
        message.answers = [DNSRecord(name: instance, type: DNSType.any, recordClass: DNSClass.none, ttl: 0, data: [])]
        message.authorities = additions()
        return message
    }

    /// Adds every record again (a refresh, and a new lease), with no condition: adding a record
    /// that is there changes nothing but its lease.
    func refresh(id: UInt16) -> DNSMessage {
        var message = header(id: id)
        message.authorities = additions()
        return message
    }

    /// Replaces the TXT record with `txt`.
    func changingText(to txt: [[UInt8]], id: UInt16) -> (DNSMessage, ServiceUpdates) {
        let changed = ServiceUpdates(copying: self, txt: txt)
        var message = header(id: id)
        message.authorities = [
            DNSRecord(name: instance, type: DNSType.text, recordClass: DNSClass.any, ttl: 0, data: []),
            .text(instance, strings: txt, ttl: ttl),
        ]
        return (message, changed)
    }

    /// Removes what ``registration(id:)`` added, except the host's addresses: the PTRs (this
    /// instance's only: other services of the type stay) and every record at the instance's
    /// name. The host's A and AAAA records are the host's, shared by every service it
    /// publishes, so they stay (each registration adds them again).
    func removal(id: UInt16) -> DNSMessage {
        var message = header(id: id, withLease: false)
        var deletions = [DNSRecord.pointer(serviceType, to: instance, ttl: 0)]
        deletions += subtypes.map { DNSRecord.pointer($0, to: instance, ttl: 0) }
        for index in deletions.indices { deletions[index].recordClass = DNSClass.none }
        deletions.insert(
            DNSRecord(name: instance, type: DNSType.any, recordClass: DNSClass.any, ttl: 0, data: []), at: 0)
        message.authorities = deletions
        return message
    }

    /// ``removal(id:)`` on condition that the instance's SRV record is exactly the one this
    /// service writes (RFC 2136 §2.4.2, "RRset exists, value dependent"): the server answers
    /// NXRRSET and changes nothing when it is another's, or absent. For a registration whose
    /// answer was lost: it removes what that registration wrote, if it was applied, and never
    /// another publisher's records under the name.
    func removalIfOurs(id: UInt16) -> DNSMessage {
        var message = removal(id: id)
        message.answers = [.service(instance, port: port, target: host, ttl: 0)]
        return message
    }

    /// The same service under another instance name (after a collision).
    func renamed(_ name: String) throws(DNSWireError) -> ServiceUpdates {
        try ServiceUpdates(copying: self, instance: serviceType.prepending(Array(name.utf8)))
    }

    /// Every record the service is made of, as added.
    func additions() -> [DNSRecord] {
        var records = [DNSRecord.pointer(serviceType, to: instance, ttl: ttl)]
        records += subtypes.map { DNSRecord.pointer($0, to: instance, ttl: ttl) }
        records.append(.service(instance, port: port, target: host, ttl: ttl))
        records.append(.text(instance, strings: txt, ttl: ttl))
        records += addresses.map { DNSRecord.address(host, bytes: $0, ttl: ttl) }
        return records
    }

    private func header(id: UInt16, withLease: Bool = true) -> DNSMessage {
        var message = DNSMessage(id: id, opcode: DNSMessage.update)
        message.questions = [DNSQuestion(name: updateZone, type: DNSType.startOfAuthority)]
        if withLease, let lease {
            // EDNS(0) OPT with the Update Lease option (code 2): the lease and the key lease.
            var option: [UInt8] = []
            option.appendUInt16(2)
            option.appendUInt16(8)
            option.appendUInt32(lease)
            option.appendUInt32(lease)
            message.additionals = [
                DNSRecord(name: .root, type: DNSType.options, recordClass: 1232, ttl: 0, data: option)
            ]
        }
        return message
    }

    private init(copying other: ServiceUpdates, instance: DNSName? = nil, txt: [[UInt8]]? = nil) {
        zone = other.zone
        self.instance = instance ?? other.instance
        serviceType = other.serviceType
        subtypes = other.subtypes
        host = other.host
        addresses = other.addresses
        port = other.port
        self.txt = txt ?? other.txt
        ttl = other.ttl
        lease = other.lease
        updateZone = other.updateZone
    }
}
