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
    private var server: DNSExchange?
    private var refresher: Task<Void, Never>?
    private var published = false

    /// The instance name the service has in the zone (after any rename).
    package var registeredName: String { String(decoding: updates.instance.labels[0], as: UTF8.self) }
    /// The zone's primary server, once found.
    package var serverAddress: SocketAddress? { server?.server }

    /// - Parameters:
    ///   - host: the host name the SRV record names (in the zone unless it ends in it already).
    ///   - addresses: the host's addresses, published as its A and AAAA records.
    ///   - server: the zone's primary, when known (skips looking it up).
    /// - Throws: ``DiscoveryError`` for a name, type, domain or host name that DNS cannot carry.
    package init(name: String, type: String, subtypes: [String] = [], domain: String, port: UInt16, txt: [[UInt8]],
                 host: String, addresses: [SocketAddress], key: SalutTSIGKey, nameServer: SocketAddress? = nil,
                 server: SocketAddress? = nil, renames: Bool = true, ttl: UInt32 = 120, lease: UInt32 = 3600) throws {
        do {
            updates = try ServiceUpdates(name: name, type: type, subtypes: subtypes, zone: domain, host: host,
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
        let exchange = try await primary()
        var attempt = 1
        while true {
            let answer = try await send(updates.registration(id: .random(in: 0 ... .max)), to: exchange)
            switch answer {
            case DNSResponseCode.noError:
                published = true
                startRefreshing()
                return registeredName
            case DNSResponseCode.nameExists:
                guard renames, attempt < 100 else { throw DiscoveryError.collision(name: registeredName) }
                attempt += 1
                updates = try renamedUpdates("\(baseName) (\(attempt))")
            default:
                throw failure(answer)
            }
        }
    }

    /// Replaces the TXT record.
    /// - Throws: as ``publish()``.
    package func updateText(_ txt: [[UInt8]]) async throws {
        let (message, changed) = updates.changingText(to: txt, id: .random(in: 0 ... .max))
        if published {
            let answer = try await send(message, to: try await primary())
            guard answer == DNSResponseCode.noError else { throw failure(answer) }
        }
        updates = changed
    }

    /// Removes the service's records from the zone and stops refreshing them.
    /// - Throws: as ``publish()`` (the refresh is stopped either way).
    package func stop() async throws {
        refresher?.cancel()
        refresher = nil
        guard published else { return }
        published = false
        let answer = try await send(updates.removal(id: .random(in: 0 ... .max)), to: try await primary())
        guard answer == DNSResponseCode.noError else { throw failure(answer) }
    }

    // MARK: Talking to the server

    /// Signs `message`, sends it, checks the signed answer; returns its response code.
    private func send(_ message: DNSMessage, to exchange: DNSExchange) async throws -> UInt16 {
        let (bytes, mac) = signer.sign(message, at: Self.now())
        let answer = try await exchange.send(bytes)
        do {
            let verified = try signer.verify(answer: answer, requestMAC: mac, at: Self.now())
            return verified.rcode
        } catch let failure as TSIGFailure {
            throw Self.describe(failure, zone: updates.zone.description)
        } catch {
            throw DiscoveryError.dnsFailure("\(exchange.server) sent an answer that cannot be read: \(error)")
        }
    }

    /// The zone's primary server: given, or looked up once.
    private func primary() async throws -> DNSExchange {
        if let server { return server }
        let found = try await WideAreaServerFinder(nameServer: nameServer ?? Self.systemNameServer()).primary(of: updates.zone)
        let exchange = DNSExchange(server: found)
        server = exchange
        return exchange
    }

    private func startRefreshing() {
        guard refresher == nil, let lease = updates.lease else { return }
        refresher = Task { [weak self] in
            while !Task.isCancelled {
                try? await Task.sleep(for: .seconds(max(30, Int(lease) / 2)))
                guard !Task.isCancelled, let self else { return }
                await self.refresh()
            }
        }
    }

    private func refresh() async {
        guard published, let server else { return }
        do {
            let answer = try await send(updates.refresh(id: .random(in: 0 ... .max)), to: server)
            if answer != DNSResponseCode.noError {
                SalutLogging.logger.warning("refreshing \(updates.instance) failed: \(DNSResponseCode.name(answer))")
            }
        } catch {
            SalutLogging.logger.warning("refreshing \(updates.instance) failed: \(error)")
        }
    }

    private func renamedUpdates(_ name: String) throws -> ServiceUpdates {
        do { return try updates.renamed(name) } catch { throw DiscoveryError.collision(name: registeredName) }
    }

    private func failure(_ rcode: UInt16) -> DiscoveryError {
        let zone = updates.zone.description
        switch rcode {
        case DNSResponseCode.refused: return .updateRefused(zone: zone, detail: "REFUSED: the zone's update policy does not allow it")
        case DNSResponseCode.notAuthoritative, DNSResponseCode.notZone:
            return .notAuthorized(zone: zone, detail: DNSResponseCode.name(rcode))
        default: return .dnsFailure("the server answered \(DNSResponseCode.name(rcode)) for \(zone)")
        }
    }

    private static func describe(_ failure: TSIGFailure, zone: String) -> DiscoveryError {
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
            if rcode == DNSResponseCode.refused { return .updateRefused(zone: zone, detail: "REFUSED, unsigned") }
            if rcode == DNSResponseCode.notAuthoritative { return .notAuthorized(zone: zone, detail: "NOTAUTH, unsigned") }
            return .signatureRejected("the server's answer (\(DNSResponseCode.name(rcode))) is not signed")
        case .otherKey(let what): return .signatureRejected("the answer is signed with another key (\(what))")
        case .badMAC: return .signatureRejected("the answer's signature does not verify")
        case .badTime(let skew): return .signatureRejected("the answer was signed \(skew) s away from this machine's clock")
        }
    }

    private static func now() -> UInt64 { UInt64(max(0, Date().timeIntervalSince1970)) }

    /// The first `nameserver` of `/etc/resolv.conf`, port 53.
    static func systemNameServer() throws -> SocketAddress {
        let text = (try? String(contentsOfFile: "/etc/resolv.conf", encoding: .utf8)) ?? ""
        for line in text.split(separator: "\n") {
            let words = line.split(whereSeparator: { $0 == " " || $0 == "\t" })
            if words.count >= 2, words[0] == "nameserver", let address = SocketAddress.literal(String(words[1]), port: 53) {
                return address
            }
        }
        throw DiscoveryError.serverUnreachable("/etc/resolv.conf names no nameserver")
    }
}

/// Finds a zone's primary server the DNS-SD way, asking one name server.
struct WideAreaServerFinder: Sendable {
    let nameServer: SocketAddress

    /// The address to send updates to.
    /// - Throws: ``DiscoveryError/Code-swift.struct/serverUnreachable`` when the name server does not
    ///   answer or names no server.
    func primary(of zone: DNSName) async throws -> SocketAddress {
        let exchange = DNSExchange(server: nameServer)
        if let srvName = try? DNSName(labels: [Array("_dns-update".utf8), Array("_udp".utf8)]).appending(zone),
           let srv = try await ask(exchange, srvName, DNSType.service).compactMap(\.service).first,
           let address = try await address(of: srv.target, via: exchange, port: srv.port) {
            return address
        }
        if let soa = try await ask(exchange, zone, DNSType.startOfAuthority).compactMap(\.primaryServer).first,
           let address = try await address(of: soa, via: exchange, port: 53) {
            return address
        }
        throw DiscoveryError.serverUnreachable("\(nameServer) names no server for \(zone) (no _dns-update._udp SRV, no SOA)")
    }

    private func address(of host: DNSName, via exchange: DNSExchange, port: UInt16) async throws -> SocketAddress? {
        for type in [DNSType.ipv6Address, DNSType.ipv4Address] {
            for record in try await ask(exchange, host, type) where record.type == type && record.name == host {
                if record.data.count == 4 { return SocketAddress(ipv4: record.data, port: port) }
                if record.data.count == 16 { return SocketAddress(ipv6: record.data, port: port) }
            }
        }
        return nil
    }

    private func ask(_ exchange: DNSExchange, _ name: DNSName, _ type: UInt16) async throws -> [DNSRecord] {
        var query = DNSMessage(id: .random(in: 0 ... .max), opcode: DNSMessage.query, recursionDesired: true)
        query.questions = [DNSQuestion(name: name, type: type)]
        let bytes = try await exchange.send(query.encoded())
        guard let answer = try? DNSMessage(decoding: bytes), answer.rcode == DNSResponseCode.noError else { return [] }
        return answer.answers.filter { $0.type == type }
    }
}
