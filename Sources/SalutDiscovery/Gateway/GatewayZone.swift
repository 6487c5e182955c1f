import Foundation
import SalutStreams

extension DiscoveryGateway {
    /// The zone side of a gateway: the zone its domain is in, that zone's primary, and the signed
    /// updates and queries the gateway sends there.
    struct GatewayZone: Sendable {
        let updates: GatewayUpdates
        /// The primary's addresses, tried in turn.
        let primaries: [SocketAddress]
        let signer: TSIG

        /// Finds the zone `LABEL.DOMAIN` is in and its primary, asking the configured name server.
        /// - Throws: ``DiscoveryError`` (see ``DiscoveryGateway/run()``).
        static func open(_ configuration: Configuration) async throws -> GatewayZone {
            let domain: DNSName
            let labelDomain: DNSName
            do {
                domain = try DNSName(parsing: try ServiceNames.normaliseDomain(configuration.domain))
                labelDomain = try domain.prepending(Array(configuration.label.utf8))
            } catch let error as DiscoveryError {
                throw error
            } catch {
                throw DiscoveryError.invalidDomain("\(configuration.label).\(configuration.domain) (\(error))")
            }
            let finder = WideAreaServerFinder(
                nameServer: try configuration.nameServer ?? WideAreaPublisher.systemNameServer())
            let zone = try await finder.zone(containing: labelDomain)
            let primaries = try await finder.primaries(of: zone)
            do {
                return GatewayZone(
                    updates: try GatewayUpdates(zone: zone, domain: domain, label: configuration.label),
                    primaries: primaries, signer: TSIG(key: configuration.key))
            } catch {
                throw DiscoveryError.invalidDomain("\(labelDomain) (\(error))")
            }
        }

        // MARK: Reading the zone

        /// What the zone holds under the label, read from the primary; asked again, waiting
        /// twice as long each time (at most a minute), while the primary does not answer.
        func listWithRetries(reports: @Sendable (Report) -> Void) async -> [ServiceKey: MirroredService] {
            var delay = Duration.seconds(1)
            while !Task.isCancelled {
                do {
                    return try await list()
                } catch {
                    reports(.retrying(reason: "reading the zone: \(error)", seconds: Double(delay.components.seconds)))
                    try? await Task.sleep(for: delay)
                    delay = min(delay * 2, .seconds(60))
                }
            }
            return [:]
        }

        /// What the zone holds under the label: the types listed there, their instances, and
        /// each one's records. An instance listed and unreadable (no SRV, or no answer for it)
        /// has no host and port 0 (see ``MirroredService/isUnreadable``).
        /// - Throws: ``DiscoveryError`` when the primary does not answer or fails.
        func list() async throws -> [ServiceKey: MirroredService] {
            try await list(under: updates.labelDomain, admitting: { _ in true }, limit: .max, maximumTypes: .max)
        }

        /// What the zone holds under another link's `labelDomain`, as ``list()`` reads it: only
        /// the types `admitting` takes (and DNS-SD's own never), at most `maximumTypes` of them
        /// and `limit` services (reading stops there).
        func list(
            under labelDomain: DNSName, admitting: (String) -> Bool, limit: Int, maximumTypes: Int
        ) async throws -> [ServiceKey: MirroredService] {
            guard let primary = primaries.first else { return [:] }
            let list = try DNSName(parsing: "_services._dns-sd._udp").appending(labelDomain)
            var found: [ServiceKey: MirroredService] = [:]
            var types = 0
            for pointer in try await UnicastBrowser.records(list, DNSType.pointer, from: primary) {
                guard let target = pointer.target, target.isWithin(labelDomain),
                    target.labels.count == labelDomain.labels.count + 2
                else { continue }
                let type = target.labels.prefix(2).map { String(decoding: $0, as: UTF8.self) }.joined(separator: ".")
                guard admitting(type), types < maximumTypes, found.count < limit else { continue }
                types += 1
                let browser = try UnicastBrowser(
                    type: type, domain: labelDomain.description, nameServer: primary)
                let names = try await browser.instances().names.sorted().prefix(limit - found.count).map(\.text)
                // A few at a time: one after another, 400 services took most of a second to read.
                let resolved = await DiscoveryGateway.inTurns(Array(names), atOnce: Self.resolvingAtOnce) { name in
                    try? await browser.resolve(name)
                }
                for (name, instance) in resolved {
                    let key = ServiceKey(name: name, type: type)
                    guard let instance else {
                        // Listed and unreadable (no SRV): kept as known, so that it is removed
                        // unless the link has it.
                        found[key] = MirroredService(key: key, host: "", port: 0, txt: [[]], addresses: [])
                        continue
                    }
                    found[key] = MirroredService(
                        key: key, host: Self.linkHost(of: instance.host, under: labelDomain),
                        port: instance.port,
                        txt: instance.txt,
                        addresses: MirroredService.ordered(instance.addresses.map(\.rawBytes)))
                }
            }
            return found
        }

        /// At most this many instances are resolved at once when the zone is read (16 at once
        /// took about a quarter of a second more to read 400, on a path where each one counts:
        /// another link's services showing on this one).
        static let resolvingAtOnce = 64

        /// The labels of the other links written into the zone (the browsing domains
        /// `LABEL.DOMAIN` listed under `b._dns-sd._udp.DOMAIN`), this gateway's own left out,
        /// lowercased, at most `limit` of them (in order); only those that can name a host
        /// label (letters, digits, hyphens).
        /// - Throws: ``DiscoveryError`` when the primary does not answer or fails.
        func otherLabels(limit: Int) async throws -> [String: DNSName] {
            guard let primary = primaries.first else { return [:] }
            let browsing = try DNSName(parsing: "b._dns-sd._udp").appending(updates.domain)
            let own = updates.labelDomain.description.lowercased()
            var labels: [String: DNSName] = [:]
            for pointer in try await UnicastBrowser.records(browsing, DNSType.pointer, from: primary) {
                guard let target = pointer.target, target.isWithin(updates.domain),
                    target.labels.count == updates.domain.labels.count + 1, target.description.lowercased() != own,
                    let first = target.labels.first
                else { continue }
                // Judged as bytes before any folding: Unicode's lower case turns a Kelvin sign into
                // a `k`, and a look-alike label would take the place of a real one.
                guard first.allSatisfy({ $0 < 0x80 }) else { continue }
                let label = String(decoding: first, as: UTF8.self).lowercased()
                guard MirroredService.isHostLabel(Substring(label)) else { continue }
                labels[label] = target
            }
            return Dictionary(
                uniqueKeysWithValues: labels.sorted { $0.key < $1.key }.prefix(limit).map { ($0.key, $0.value) })
        }

        /// The zone's serial, as the primary gives it: it changes with every change to the zone.
        /// - Throws: ``DiscoveryError`` when the primary does not answer or fails.
        func serial() async throws -> UInt32? {
            guard let primary = primaries.first else { return nil }
            return try await UnicastBrowser.records(updates.zone, DNSType.startOfAuthority, from: primary).first?.serial
        }

        /// The link's host name (`box.sub`) of a host written as `box.sub.LABEL.ZONE`; empty for
        /// any other.
        static func linkHost(of host: String, under labelDomain: DNSName) -> String {
            let suffix = "." + labelDomain.text
            guard host.lowercased().hasSuffix(suffix.lowercased()) else { return "" }
            return String(host.dropLast(suffix.count))
        }

        // MARK: Writing the zone

        /// Sends one update making `operations` (or, `dryRun`, reports it) and says how it went,
        /// with the error that ends the gateway when the server refuses it for good.
        func apply(
            _ operations: [ZoneOperation], dryRun: Bool, reports: @Sendable (Report) -> Void
        ) async -> (StateMachine.Event, DiscoveryError?) {
            let message: DNSMessage
            do {
                message = try updates.message(for: operations, id: .random(in: 0 ... .max))
            } catch {
                return (.updateFailed(reason: "\(error)", retryable: false, unwritable: true), nil)
            }
            let (bytes, mac) = signer.sign(message, at: Self.now())
            guard bytes.count <= GatewayUpdates.largestUpdate else {
                return (
                    .updateFailed(reason: "an update of \(bytes.count) bytes", retryable: false, unwritable: true), nil
                )
            }
            if dryRun {
                reports(.wouldSend(GatewayUpdates.nsupdateLines(message)))
                return (.updateSucceeded, nil)
            }
            var lastError: (any Error)?
            for primary in primaries {
                do {
                    let (answer, _) = try await DNSExchange(server: primary).exchange(bytes)
                    let verified: DNSMessage
                    do {
                        verified = try signer.verify(answer: answer, requestMAC: mac, at: Self.now())
                    } catch let failure as TSIGFailure {
                        let error = WideAreaPublisher.describe(failure, zone: updates.zone.description)
                        return (.updateFailed(reason: "\(error)", retryable: false, unwritable: false), error)
                    }
                    switch verified.rcode {
                    case DNSResponseCode.noError:
                        return (.updateSucceeded, nil)
                    case DNSResponseCode.serverFailure:
                        return (
                            .updateFailed(reason: "\(primary) answered SERVFAIL", retryable: true, unwritable: false),
                            nil
                        )
                    case DNSResponseCode.formatError:
                        // This update only (a record the server will not take): the others go on.
                        return (
                            .updateFailed(reason: "\(primary) answered FORMERR", retryable: false, unwritable: true),
                            nil
                        )
                    default:
                        let error = WideAreaPublisher.failure(verified.rcode, zone: updates.zone.description)
                        return (.updateFailed(reason: "\(error)", retryable: false, unwritable: false), error)
                    }
                } catch let error as DiscoveryError where error.code == .serverUnreachable {
                    lastError = error
                } catch {
                    return (.updateFailed(reason: "\(error)", retryable: true, unwritable: false), nil)
                }
            }
            let reason = lastError.map { "\($0)" } ?? "no address for the primary"
            return (.updateFailed(reason: reason, retryable: true, unwritable: false), nil)
        }

        private static func now() -> UInt64 { UInt64(max(0, Date().timeIntervalSince1970)) }
    }
}
