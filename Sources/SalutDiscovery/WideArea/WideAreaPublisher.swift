import Foundation
import SalutStreams

/// Publishes one service in a wide-area (unicast DNS) domain by signed DNS updates, keeps it
/// there while it runs (a refresh at half the lease), and removes it on ``stop()``.
///
/// The zone's primary server is found the DNS-SD way: the `_dns-update._udp.<zone>` SRV record,
/// else the zone's SOA MNAME, both asked of `nameServer` (default: the first `nameserver` of
/// `/etc/resolv.conf`). A name already in use in the zone is renamed `Name (2)`, `Name (3)`…
/// unless renaming is off, as on the local link.
package actor WideAreaPublisher {
    private var updates: ServiceUpdates
    private let signer: TSIG
    private let nameServer: SocketAddress?
    private let renames: Bool
    private let baseName: String
    /// The primary when given (tests, `server:`); otherwise looked up once into `foundPrimaries`.
    private let server: DNSExchange?
    private var foundPrimaries: [DNSExchange]?
    private var refresher: Task<Void, Never>?
    private var published = false
    /// The last operation asked for (see `serially`).
    private var tail: Task<Void, Never>?
    /// The lease the server granted in its last answer, if it said.
    private var grantedLease: UInt32?
    /// TXT records asked for by `requestText`, newest last.
    private let requestedText = Locked<(version: Int, text: [[UInt8]])>((0, []))

    /// The instance name the service has in the zone (after any rename).
    package var registeredName: String { String(decoding: updates.instance.labels[0], as: UTF8.self) }
    /// The zone's primary server, once found (its first address).
    package var serverAddress: SocketAddress? { (server.map { [$0] } ?? foundPrimaries)?.first?.server }

    /// - Parameters:
    ///   - host: the host name the SRV record names (in the zone unless it ends in it already).
    ///   - addresses: the host's addresses, published as its A and AAAA records.
    ///   - server: the zone's primary, when known (skips looking it up).
    /// - Throws: ``DiscoveryError`` for a name, type, domain or host name that DNS cannot carry.
    package init(
        name: String, type: String, subtypes: [String] = [], domain: String, port: UInt16, txt: [[UInt8]],
        host: String, addresses: [SocketAddress], key: SalutTSIGKey, nameServer: SocketAddress? = nil,
        server: SocketAddress? = nil, renames: Bool = true, ttl: UInt32 = 120, lease: UInt32 = 3600
    ) throws {
        do {
            updates = try ServiceUpdates(
                name: name, type: type, subtypes: subtypes, zone: domain, host: host,
                addresses: addresses.map(\.rawBytes), port: port, txt: txt, ttl: ttl, lease: lease)
        } catch {
            throw DiscoveryError.invalidDomain("\(name).\(type).\(domain) (\(error))")
        }
        signer = TSIG(key: key)
        self.nameServer = nameServer
        self.server = server.map { DNSExchange(server: $0) }
        self.renames = renames
        baseName = name
    }

    /// Adds the service's records to the zone.
    /// - Returns: the instance name it was registered under.
    /// - Throws: ``DiscoveryError``: ``DiscoveryError/Code-swift.struct/collision`` (the name is taken and
    ///   renaming is off), ``DiscoveryError/Code-swift.struct/signatureRejected``,
    ///   ``DiscoveryError/Code-swift.struct/notAuthorized``, ``DiscoveryError/Code-swift.struct/updateRefused``,
    ///   ``DiscoveryError/Code-swift.struct/serverUnreachable``, or ``DiscoveryError/Code-swift.struct/dnsFailure``.
    @discardableResult
    package func publish() async throws -> String {
        try await serially {
            // The zone and its primary first: the updates are made for that zone.
            _ = try await self.primaries()
            return try await self.register()
        }
    }

    /// Replaces the TXT record, after whatever the publisher is already telling the server.
    /// - Throws: as ``publish()``.
    package func updateText(_ txt: [[UInt8]]) async throws {
        try await serially { try await self.changeText(to: txt) }
    }

    /// Asks for the TXT record to become `txt` without waiting (for callers that cannot wait):
    /// requests apply in the order they were made, a later one replacing an earlier one not yet
    /// sent; a failure is logged.
    package nonisolated func requestText(_ txt: [[UInt8]]) {
        let version = requestedText.withLock { state -> Int in
            state.version += 1
            state.text = txt
            return state.version
        }
        Task {
            do { try await self.applyRequestedText(upTo: version) } catch {
                SalutLogging.logger.warning("changing the TXT record failed: \(error)")
            }
        }
    }

    /// Removes the service's records from the zone and stops refreshing them, after whatever the
    /// publisher is already telling the server (so nothing it sends lands after the removal).
    /// - Throws: as ``publish()`` (the refresh is stopped either way).
    package func stop() async throws {
        refresher?.cancel()
        refresher = nil
        try await serially { try await self.remove() }
    }

    // MARK: One operation at a time

    /// Runs `operation` after every operation asked for before it has finished, so that a
    /// refresh, a TXT change and the removal reach the server in the order they were made.
    private func serially<T: Sendable>(_ operation: @escaping @Sendable () async throws -> T) async throws -> T {
        let previous = tail
        let task = Task { () async throws -> T in
            await previous?.value
            return try await operation()
        }
        tail = Task { _ = try? await task.value }
        return try await task.value
    }

    private func register() async throws -> String {
        guard !published else { return registeredName }
        var attempt = 1
        while true {
            let (answer, exchange, retransmitted): (UInt16, DNSExchange, Bool)
            do {
                (answer, exchange, retransmitted) = try await sendToPrimary(
                    updates.registration(id: .random(in: 0 ... .max)))
            } catch let error as DiscoveryError where error.code == .serverUnreachable {
                await removeIfAppliedUnanswered()
                throw error
            }
            switch answer {
            case DNSResponseCode.noError:
                published = true
                startRefreshing()
                return registeredName
            case DNSResponseCode.nameExists:
                // Our own registration, if an earlier answer was lost and the retransmission
                // found the name taken by it: then it is published, not taken.
                if retransmitted, try await holdsOurService(via: exchange) {
                    published = true
                    startRefreshing()
                    return registeredName
                }
                guard renames, attempt < 100 else { throw DiscoveryError.collision(name: registeredName) }
                attempt += 1
                updates = try renamedUpdates("\(baseName) (\(attempt))")
            default:
                throw failure(answer)
            }
        }
    }

    /// After a registration that was sent and never answered: the server may have applied it,
    /// and nobody would remove those records. Removes them, on condition that the instance's SRV
    /// record is the one this service writes (never another publisher's), once; a failure is
    /// logged (the records then stay until their lease ends, where the server honours leases).
    private func removeIfAppliedUnanswered() async {
        guard server != nil || foundPrimaries != nil else { return }  // nothing was sent
        do {
            let (answer, _, _) = try await sendToPrimary(updates.removalIfOurs(id: .random(in: 0 ... .max)))
            if answer == DNSResponseCode.noError {
                SalutLogging.logger.notice("\(updates.instance): removed what an unanswered registration had written")
            }
        } catch {
            SalutLogging.logger.warning(
                "\(updates.instance): a registration went unanswered, and removing what it may have written failed: \(error)"
            )
        }
    }

    private func changeText(to txt: [[UInt8]]) async throws {
        let (message, changed) = updates.changingText(to: txt, id: .random(in: 0 ... .max))
        if published {
            let (answer, _, _) = try await sendToPrimary(message)
            guard answer == DNSResponseCode.noError else { throw failure(answer) }
        }
        updates = changed
    }

    private func applyRequestedText(upTo version: Int) async throws {
        try await serially {
            // a later request replaces it
            guard let text = self.requestedText.withLock({ $0.version == version ? $0.text : nil }) else { return }
            try await self.changeText(to: text)
        }
    }

    private func remove() async throws {
        guard published else { return }
        published = false
        let (answer, _, _) = try await sendToPrimary(updates.removal(id: .random(in: 0 ... .max)))
        guard answer == DNSResponseCode.noError else { throw failure(answer) }
    }

    // MARK: Talking to the server

    /// Signs `message`, sends it to the zone's primary (each of its addresses in turn until one
    /// answers), checks the signed answer; returns its response code, the server that gave it,
    /// and whether the message had to be sent more than once.
    private func sendToPrimary(_ message: DNSMessage) async throws -> (UInt16, DNSExchange, Bool) {
        let candidates = try await primaries()
        var lastError: (any Error)?
        for exchange in candidates {
            do {
                let (rcode, retransmitted) = try await send(message, to: exchange)
                return (rcode, exchange, retransmitted)
            } catch let error as DiscoveryError where error.code == .serverUnreachable {
                lastError = error
            }
        }
        throw lastError ?? DiscoveryError.serverUnreachable("no address for the primary of \(updates.zone)")
    }

    /// Signs `message`, sends it, checks the signed answer; returns its response code. A lease
    /// the server grants (RFC 9664) sets the refresh interval.
    private func send(_ message: DNSMessage, to exchange: DNSExchange) async throws -> (UInt16, Bool) {
        let (bytes, mac) = signer.sign(message, at: Self.now())
        let (answer, retransmitted) = try await exchange.exchange(bytes)
        do {
            let verified = try signer.verify(answer: answer, requestMAC: mac, at: Self.now())
            if let granted = Self.grantedLease(in: verified) { grantedLease = granted }
            return (verified.rcode, retransmitted)
        } catch let failure as TSIGFailure {
            throw Self.describe(failure, zone: updates.zone.description)
        } catch {
            throw DiscoveryError.dnsFailure("\(exchange.server) sent an answer that cannot be read: \(error)")
        }
    }

    /// The lease in an answer's Update Lease option, if it has one.
    static func grantedLease(in answer: DNSMessage) -> UInt32? {
        guard let options = answer.additionals.first(where: { $0.type == DNSType.options })?.data else { return nil }
        var index = 0
        while index + 4 <= options.count {
            let code = UInt16(options[index]) << 8 | UInt16(options[index + 1])
            let length = Int(options[index + 2]) << 8 | Int(options[index + 3])
            guard index + 4 + length <= options.count else { return nil }
            if code == 2, length >= 4 {
                let value = options[index + 4..<index + 8].reduce(UInt32(0)) { $0 << 8 | UInt32($1) }
                return value
            }
            index += 4 + length
        }
        return nil
    }

    /// Whether the instance's SRV at the server is the one this publisher writes (same port and
    /// host): an earlier registration of ours, not another publisher's.
    private func holdsOurService(via exchange: DNSExchange) async throws -> Bool {
        guard let answer = try? await exchange.query(updates.instance, DNSType.service) else { return false }
        let ours = updates.additions().first { $0.type == DNSType.service }
        return answer.answers.contains {
            $0.type == DNSType.service && $0.name == updates.instance && $0.data == ours?.data
        }
    }

    /// The zone's primary server, each of its addresses: given, or looked up once.
    private func primaries() async throws -> [DNSExchange] {
        if let server { return [server] }
        if let found = foundPrimaries { return found }
        // The zone the domain is in: the domain itself, or a zone above it (a name below the
        // apex, as `lab-a.home.arpa` in `home.arpa`, takes updates sent to that zone).
        let finder = WideAreaServerFinder(nameServer: try nameServer ?? Self.systemNameServer())
        let zone = try await finder.zone(containing: updates.zone)
        updates = updates.inZone(zone)
        let addresses = try await finder.primaries(of: zone)
        let exchanges = addresses.map { DNSExchange(server: $0) }
        foundPrimaries = exchanges
        return exchanges
    }

    private func startRefreshing() {
        guard refresher == nil, updates.lease != nil else { return }
        refresher = Task { [weak self] in
            while !Task.isCancelled {
                guard let interval = await self?.refreshInterval else { return }
                try? await Task.sleep(for: interval)
                guard !Task.isCancelled, let self else { return }
                try? await self.serially { await self.refresh() }
            }
        }
    }

    /// Half the lease the server granted (or, if it said nothing, the one asked for), at least
    /// 30 s.
    private var refreshInterval: Duration {
        .seconds(max(30, Int(grantedLease ?? updates.lease ?? 3600) / 2))
    }

    private func refresh() async {
        guard published else { return }
        do {
            let (answer, _, _) = try await sendToPrimary(updates.refresh(id: .random(in: 0 ... .max)))
            if answer != DNSResponseCode.noError {
                SalutLogging.logger.warning(
                    "refreshing \(updates.instance) failed: \(DNSResponseCode.messageName(answer))")
            }
        } catch {
            SalutLogging.logger.warning("refreshing \(updates.instance) failed: \(error)")
        }
    }

    private func renamedUpdates(_ name: String) throws -> ServiceUpdates {
        do { return try updates.renamed(name) } catch { throw DiscoveryError.collision(name: registeredName) }
    }

    private func failure(_ rcode: UInt16) -> DiscoveryError {
        Self.failure(rcode, zone: updates.zone.description)
    }

    /// What an update's response code other than NOERROR means, for `zone`.
    static func failure(_ rcode: UInt16, zone: String) -> DiscoveryError {
        switch rcode {
        case DNSResponseCode.refused:
            return .updateRefused(zone: zone, detail: "REFUSED: the zone's update policy does not allow it")
        case DNSResponseCode.notAuthoritative:
            return .notAuthorized(
                zone: zone, detail: "NOTAUTH: it is not authoritative for the zone, or does not accept this key for it")
        case DNSResponseCode.notZone:
            return .notAuthorized(
                zone: zone, detail: "NOTZONE: the update names records outside the zone it was sent for")
        default: return .dnsFailure("the server answered \(DNSResponseCode.messageName(rcode)) for \(zone)")
        }
    }

    /// What a signature failure means, for `zone`.
    static func describe(_ failure: TSIGFailure, zone: String) -> DiscoveryError {
        switch failure {
        case .refusedByServer(DNSResponseCode.badKey):
            return .signatureRejected("BADKEY: the server does not know this key (its name or algorithm)")
        case .refusedByServer(DNSResponseCode.badSignature):
            return .signatureRejected("BADSIG: the key's secret is not the one the server has")
        case .refusedByServer(DNSResponseCode.badTime):
            return .signatureRejected("BADTIME: this machine's clock and the server's differ by more than 5 minutes")
        case .refusedByServer(let code):
            return .signatureRejected(DNSResponseCode.name(code))
        case .unsigned(let rcode):
            if rcode == DNSResponseCode.refused {
                return .updateRefused(
                    zone: zone,
                    detail: "REFUSED, in an answer not signed with the key (it may not come from the server)")
            }
            if rcode == DNSResponseCode.notAuthoritative {
                return .notAuthorized(
                    zone: zone,
                    detail: "NOTAUTH, in an answer not signed with the key (it may not come from the server)")
            }
            return .signatureRejected("the server's answer (\(DNSResponseCode.messageName(rcode))) is not signed")
        case .otherKey(let what): return .signatureRejected("the answer is signed with another key (\(what))")
        case .badMAC: return .signatureRejected("the answer's signature does not verify")
        case .badTime(let skew):
            return .signatureRejected("the answer was signed \(skew) s away from this machine's clock")
        }
    }

    private static func now() -> UInt64 { UInt64(max(0, Date().timeIntervalSince1970)) }

    /// The first `nameserver` of `/etc/resolv.conf`, port 53.
    static func systemNameServer() throws -> SocketAddress {
        let text = (try? String(contentsOfFile: "/etc/resolv.conf", encoding: .utf8)) ?? ""
        for line in text.split(separator: "\n") {
            let words = line.split(whereSeparator: { $0 == " " || $0 == "\t" })
            if words.count >= 2, words[0] == "nameserver",
                let address = SocketAddress.literal(String(words[1]), port: 53)
            {
                return address
            }
        }
        throw DiscoveryError.serverUnreachable("/etc/resolv.conf names no nameserver")
    }
}

/// Finds a zone's primary server the DNS-SD way, asking one name server.
struct WideAreaServerFinder: Sendable {
    let nameServer: SocketAddress
    /// A refusal (REFUSED, NOTAUTH) seen while looking: the name server does not serve the zone.
    private let refusals = Locked<UInt16?>(nil)
    private var lastRefusal: UInt16? {
        get { refusals.value }
        nonmutating set { refusals.withLock { $0 = newValue } }
    }

    init(nameServer: SocketAddress) { self.nameServer = nameServer }

    /// The zone `name` is in (RFC 2136 §4, RFC 6763 §11): the owner of the SOA record the name
    /// server gives for the name, in its answer or in the authority section of an answer that
    /// says the name does not exist; failing that, the same asked of each parent in turn.
    /// - Throws: ``DiscoveryError/Code-swift.struct/serverUnreachable`` when the name server
    ///   does not answer, or names no zone for `name` or any parent.
    func zone(containing name: DNSName) async throws -> DNSName {
        let exchange = DNSExchange(server: nameServer)
        var candidate = name
        while !candidate.labels.isEmpty {
            let answer = try await exchange.query(candidate, DNSType.startOfAuthority)
            if answer.rcode == DNSResponseCode.noError || answer.rcode == DNSResponseCode.nameError {
                if let soa = (answer.answers + answer.authorities).first(where: {
                    $0.type == DNSType.startOfAuthority && candidate.isWithin($0.name)
                }) {
                    return soa.name
                }
            } else if answer.rcode == DNSResponseCode.refused || answer.rcode == DNSResponseCode.notAuthoritative {
                lastRefusal = answer.rcode
            }
            guard let parent = try? DNSName(labels: Array(candidate.labels.dropFirst())) else { break }
            candidate = parent
        }
        if let refusal = lastRefusal {
            throw DiscoveryError.notAuthorized(
                zone: name.description,
                detail:
                    "\(nameServer) answered \(DNSResponseCode.messageName(refusal)) when asked for the zone of \(name): it holds no zone for that name, or does not answer this host's queries; check the domain's spelling, or ask the server that holds it"
            )
        }
        throw DiscoveryError.serverUnreachable("\(nameServer) names no zone (no SOA) for \(name) or its parents")
    }

    /// The addresses to send updates to, in the order to try them.
    /// - Throws: ``DiscoveryError/Code-swift.struct/serverUnreachable`` when the name server does not
    ///   answer or names no server.
    func primaries(of zone: DNSName) async throws -> [SocketAddress] {
        let exchange = DNSExchange(server: nameServer)
        if let srvName = try? DNSName(labels: [Array("_dns-update".utf8), Array("_udp".utf8)]).appending(zone) {
            // The SRV records of that very name, lowest priority first.
            let records = try await ask(exchange, srvName, DNSType.service).filter { $0.name == srvName }
            for srv in records.compactMap(\.service).sorted(by: { $0.priority < $1.priority }) {
                let found = try await addresses(of: srv.target, via: exchange, port: srv.port)
                if !found.isEmpty { return found }
            }
        }
        if let soa = try await ask(exchange, zone, DNSType.startOfAuthority).first(where: { $0.name == zone })?
            .primaryServer
        {
            let found = try await addresses(of: soa, via: exchange, port: 53)
            if !found.isEmpty { return found }
        }
        if let refusal = lastRefusal {
            throw DiscoveryError.notAuthorized(
                zone: zone.description,
                detail:
                    "\(nameServer) answered \(DNSResponseCode.messageName(refusal)) when asked for the zone's server: it does not hold \(zone), or does not answer this host's queries; check the domain's spelling, or ask the server that holds it"
            )
        }
        throw DiscoveryError.serverUnreachable(
            "\(nameServer) names no server for \(zone) (no _dns-update._udp SRV, no SOA)")
    }

    /// Every address of `host`, IPv4 first (an IPv6 address may have no route here).
    private func addresses(of host: DNSName, via exchange: DNSExchange, port: UInt16) async throws -> [SocketAddress] {
        var out: [SocketAddress] = []
        for type in [DNSType.ipv4Address, DNSType.ipv6Address] {
            for record in try await ask(exchange, host, type) where record.name == host {
                if record.data.count == 4 { out.append(SocketAddress(ipv4: record.data, port: port)) }
                if record.data.count == 16 { out.append(SocketAddress(ipv6: record.data, port: port)) }
            }
        }
        return out
    }

    private func ask(_ exchange: DNSExchange, _ name: DNSName, _ type: UInt16) async throws -> [DNSRecord] {
        let answer: DNSMessage
        do { answer = try await exchange.query(name, type) } catch let error as DiscoveryError
            where error.code == .dnsFailure
        {
            return []  // an answer that cannot be read names no server
        }
        if answer.rcode == DNSResponseCode.refused || answer.rcode == DNSResponseCode.notAuthoritative {
            lastRefusal = answer.rcode
        }
        guard answer.rcode == DNSResponseCode.noError else { return [] }
        return answer.answers.filter { $0.type == type }
    }
}
