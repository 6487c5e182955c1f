import Foundation

/// Asks the link directly whether a service still has a responder, whatever avahi-daemon's
/// cache says.
///
/// A service that left without its goodbye reaching you (a host switched off, a lossy link)
/// stays in every cache until its records expire, which for the browse record is 75 minutes.
/// A check sends a one-shot multicast DNS query for the service's SRV record on each interface
/// and protocol it was seen on (RFC 6762 §5.1: answered by the responders themselves, never
/// from a cache) and waits for an answer.
///
/// ```swift
/// let check = LivenessCheck()
/// // `sightings`: where it was seen, kept from the update that listed it.
/// if try await !check.isAnswering(service, on: sightings) {
///     print("\(service.name) is listed but gone")
/// }
/// ```
///
/// What a check cannot tell: a host that is asleep or briefly off the link does not answer
/// and may come back; on a lossy link every attempt can be lost (raise ``attempts``); and any
/// host on the link can answer for any name, as with mDNS itself. The answer comes back by
/// unicast from port 5353 to the query's own port: a host firewall that lets in only mDNS to
/// the multicast group (firewalld's and ufw's mDNS rules) drops it, and then every service
/// looks silent. Only services on the link (`local`) can be checked this way.
///
/// The sightings are where the service was seen when it was listed: ask again with the
/// sightings of a later ``BrowseUpdate`` that names it, if it has moved.
public struct LivenessCheck: Sendable {
    /// How many times the query is sent (1…10) before the service is called silent.
    public var attempts: Int {
        didSet { attempts = min(10, max(1, attempts)) }
    }
    /// How long each attempt waits for an answer (0.1…10 s).
    public var interval: Duration {
        didSet { interval = min(.seconds(10), max(.milliseconds(100), interval)) }
    }

    /// A check that asks `attempts` times, `interval` apart (values outside their ranges are
    /// brought to the nearest end). The default, 3 tries 1 s apart, answers within 3 s.
    public init(attempts: Int = 3, interval: Duration = .seconds(1)) {
        self.attempts = min(10, max(1, attempts))
        self.interval = min(.seconds(10), max(.milliseconds(100), interval))
    }

    /// True as soon as a responder answers for `service` on one of `sightings` (asked on all
    /// of them at once); false when every query was made and none was answered after every
    /// attempt, or `sightings` is empty.
    /// - Parameters:
    ///   - service: a service found by a browser, in the `local` domain.
    ///   - sightings: where it was seen (``BrowseUpdate/sightings``).
    /// - Throws: ``DiscoveryError`` (``DiscoveryError/Code-swift.struct/invalidDomain``) for a
    ///   service outside `local`, (``DiscoveryError/Code-swift.struct/invalidServiceName``) for
    ///   a name that is no DNS name, (``DiscoveryError/Code-swift.struct/dnsFailure``) when a
    ///   query could not be made on one of the sightings and none answered (the answer is then
    ///   unknown).
    public func isAnswering(_ service: DiscoveredService, on sightings: [ServiceSighting]) async throws -> Bool {
        guard let domain = try? ServiceNames.normaliseDomain(service.domain), ServiceNames.isOnTheLink(domain) else {
            throw DiscoveryError.invalidDomain(service.domain)
        }
        // A subtype's instances have their SRV record under the base type.
        let baseType =
            service.type.range(of: "._sub.", options: .caseInsensitive).map { String(service.type[$0.upperBound...]) }
            ?? service.type
        let name: DNSName
        do {
            name = try DNSName(parsing: "\(baseType).\(domain)").prepending(Array(service.name.utf8))
        } catch {
            throw DiscoveryError.invalidServiceName(service.name, reason: "it makes no DNS name: \(error)")
        }
        let queries = sightings.map {
            OneShotQuery(
                question: DNSQuestion(name: name, type: DNSType.service), interfaceIndex: $0.interfaceIndex,
                overIPv6: $0.isIPv6, attempts: attempts, interval: interval)
        }
        let outcome = await withTaskGroup(of: Result<Bool, any Error>.self) { group -> Result<Bool, any Error> in
            for query in queries {
                group.addTask {
                    do { return .success(try await query.isAnswered()) } catch { return .failure(error) }
                }
            }
            var failures: [any Error] = []
            for await result in group {
                switch result {
                case .success(true):
                    group.cancelAll()
                    return .success(true)
                case .success(false): continue
                case .failure(let error): failures.append(error)
                }
            }
            // A query that could not be made (on the interface that would have answered, maybe)
            // leaves the answer unknown: an error, not silence.
            if let failure = failures.first { return .failure(failure) }
            return .success(false)
        }
        return try outcome.get()
    }
}
