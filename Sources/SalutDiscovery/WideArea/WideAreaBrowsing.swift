import Foundation
import SalutStreams

/// How to browse and resolve services in a wide-area domain with Salut's own unicast DNS
/// queries (RFC 6763 over ordinary DNS), rather than through avahi-daemon.
///
/// avahi-daemon browses a wide-area domain only when it is configured for it and the zone's
/// server answers on port 53 of a `/etc/resolv.conf` server; this path needs neither:
///
/// ```swift
/// let dns = WideAreaBrowsing(nameServer: WideAreaBrowsing.nameServerAddress("198.18.2.1"))
/// for try await update in try ServiceBrowser(type: "_ipp._tcp", domain: "home.arpa", wideArea: dns) {
///     for case .added(let printer) in update.changes {
///         let resolved = try await printer.resolve(wideArea: dns)
///         print(printer.name, resolved.hostName, resolved.port)
///     }
/// }
/// ```
///
/// Unicast DNS pushes nothing: a browser asks for the list again when its records' TTL runs
/// out, and a TXT monitor for the TXT record again at its TTL (at least every second, at most
/// every ``longestPollInterval``). A change shows up within one TTL (120 s for what Salut
/// publishes, unless the publisher set another).
public struct WideAreaBrowsing: Sendable {
    /// The name server to ask; nil for the first `nameserver` of `/etc/resolv.conf` (port 53).
    public var nameServer: SocketAddress?
    /// The longest wait between two looks, whatever the records' TTL says.
    public var longestPollInterval: Duration

    /// - Parameters:
    ///   - nameServer: the name server to ask (nil: the first of `/etc/resolv.conf`).
    ///   - longestPollInterval: the longest wait between two looks (at least one second).
    public init(nameServer: SocketAddress? = nil, longestPollInterval: Duration = .seconds(3600)) {
        self.nameServer = nameServer
        self.longestPollInterval = max(.seconds(1), longestPollInterval)
    }

    /// A name server's address as people write it: `ADDRESS` (port 53), `ADDRESS:PORT` or
    /// `[IPv6]:PORT`; nil when `text` is none of these (or names port 0).
    public static func nameServerAddress(_ text: String) -> SocketAddress? {
        if let address = SocketAddress.literal(text, port: 53) { return address }
        guard let colon = text.lastIndex(of: ":"), let port = UInt16(text[text.index(after: colon)...]), port != 0
        else { return nil }
        return SocketAddress.literal(String(text[..<colon]), port: port)
    }

    /// The name server to ask.
    /// - Throws: ``DiscoveryError/Code-swift.struct/serverUnreachable`` when none is given and
    ///   `/etc/resolv.conf` names none.
    func server() throws -> SocketAddress {
        try nameServer ?? WideAreaPublisher.systemNameServer()
    }

    /// How long to wait before looking again at records that live `ttl` seconds (at least a
    /// second, whatever ``longestPollInterval`` was set to).
    func pollInterval(ttl: UInt32) -> Duration {
        max(.seconds(1), min(UnicastBrowser.pollInterval(ttl: ttl), longestPollInterval))
    }

    /// How long to wait after `failures` looks in a row found no answer: 2, 4, 8 … 60 s.
    package static func backOff(afterFailures failures: Int) -> Duration {
        .seconds(min(60, 1 << min(max(failures, 1), 6)))
    }

    /// A unicast browser for `type` in `domain`, which must not be on the link.
    /// - Throws: ``DiscoveryError/invalidDomain(_:)`` for `local` or a malformed domain; what
    ///   ``server()`` throws.
    func browser(type: String, domain: String) throws -> UnicastBrowser {
        try UnicastBrowser(type: type, domain: Self.wideAreaDomain(domain), nameServer: server())
    }

    /// `domain` normalised, which must not be on the link.
    /// - Throws: ``DiscoveryError/invalidDomain(_:)`` for `local`, a name under it, or a
    ///   malformed domain.
    static func wideAreaDomain(_ domain: String) throws -> String {
        let normalised = try ServiceNames.normaliseDomain(domain)
        guard !ServiceNames.isOnTheLink(normalised) else {
            throw DiscoveryError.invalidDomain(
                "\(domain) (a link-local domain is browsed through avahi-daemon, without wideArea:)")
        }
        return normalised
    }
}

extension ServiceBrowser {
    /// Browses for instances of `type` in the wide-area `domain` with unicast DNS queries to
    /// `wideArea`'s name server: the first update lists what is there now (``BrowseUpdate/isComplete``
    /// is true in every update), each later one what changed since the look before. Updates
    /// carry no sightings (no interface saw them).
    ///
    /// A first look that fails ends the sequence with its error
    /// (``DiscoveryError/Code-swift.struct/serverUnreachable`` when the name server does not
    /// answer, ``DiscoveryError/Code-swift.struct/dnsFailure`` for an error answer); a later one
    /// is tried again, less and less often (up to once a minute), the list staying as it was.
    /// - Throws: ``DiscoveryError/invalidServiceType(_:reason:)`` or
    ///   ``DiscoveryError/invalidDomain(_:)`` (also for `local`) for malformed input.
    public init(type: String, domain: String, wideArea: WideAreaBrowsing, context: DiscoveryContext = .shared) throws {
        let parsed = try ServiceNames.parseType(type, domain: domain)
        self.init(
            context: context,
            target: .services(type: parsed.browseType, domain: try WideAreaBrowsing.wideAreaDomain(domain)))
        unicast = wideArea
    }

    /// The unicast browse: a task that looks at the list at each TTL and yields the changes.
    func unicastUpdates(
        _ wideArea: WideAreaBrowsing, type: String, domain: String
    ) -> AsyncThrowingStream<BrowseUpdate, any Error> {
        AsyncThrowingStream { continuation in
            let looking = Task {
                do {
                    let browser = try wideArea.browser(type: type, domain: domain)
                    var state = WideAreaBrowsing.StateMachine(type: type, domain: domain)
                    while true {
                        let look: Result<(names: Set<UnicastBrowser.InstanceName>, ttl: UInt32), any Error>
                        do { look = .success(try await browser.instances()) } catch { look = .failure(error) }
                        switch state.looked(look) {
                        case .report(let update, let ttl):
                            continuation.yield(update)
                            try await Task.sleep(for: wideArea.pollInterval(ttl: ttl))
                        case .wait(let ttl):
                            try await Task.sleep(for: wideArea.pollInterval(ttl: ttl))
                        case .retry(let after):
                            try await Task.sleep(for: after)
                        case .fail(let error):
                            throw error
                        }
                    }
                } catch is CancellationError {
                    continuation.finish()
                } catch {
                    continuation.finish(throwing: error)
                }
            }
            continuation.onTermination = { _ in looking.cancel() }
        }
    }
}

extension TXTRecord {
    /// The record made of a TXT resource record's strings, as unicast DNS carries them.
    init(dnsStrings strings: [[UInt8]]) {
        self.init(parsingLeniently: Data(strings.flatMap { [UInt8(min($0.count, 255))] + $0.prefix(255) }))
    }
}

extension DiscoveredService {
    /// Resolves the service in its wide-area domain with unicast DNS queries to `wideArea`'s
    /// name server: its SRV (host and port), TXT, and the host's A and AAAA records.
    /// - Throws: ``DiscoveryError/notFound`` when it has no SRV record;
    ///   ``DiscoveryError/timedOut`` when the answers take longer than `timeout` seconds;
    ///   ``DiscoveryError/Code-swift.struct/serverUnreachable`` or
    ///   ``DiscoveryError/Code-swift.struct/dnsFailure`` when the server does not answer or
    ///   answers with an error; a validation error for a malformed name, type or domain
    ///   (`local` among them).
    public func resolve(wideArea: WideAreaBrowsing, timeout: TimeInterval = 10) async throws -> ResolvedService {
        let target = try validatedForLookup()
        let browser = try wideArea.browser(type: target.type, domain: target.domain)
        let instance = try await Self.withTimeout(OperationLimit.clampedSeconds(timeout, default: 10)) {
            try await browser.resolve(target.name)
        }
        return ResolvedService(
            service: target, hostName: instance.host, port: instance.port,
            txtRecord: TXTRecord(dnsStrings: instance.txt),
            addresses: instance.addresses)
    }

    /// The service's TXT record in its wide-area domain now, and again each time it changes, as
    /// seen by asking `wideArea`'s name server at the record's TTL, until the consuming task stops
    /// iterating. A record that is gone yields an empty TXT record. A first look that fails ends
    /// the sequence with its error; a later one is tried again, less and less often (up to
    /// once a minute).
    /// - Throws: a validation error for a malformed name, type or domain (`local` among them).
    public func txtRecordUpdates(wideArea: WideAreaBrowsing) throws -> AsyncThrowingStream<TXTRecord, any Error> {
        let target = try validatedForLookup()
        let browser = try wideArea.browser(type: target.type, domain: target.domain)
        return AsyncThrowingStream { continuation in
            let watching = Task {
                var last: [[UInt8]]?
                var failures = 0
                do {
                    while true {
                        let wait: Duration
                        do {
                            let (strings, ttl) = try await browser.text(of: target.name)
                            failures = 0
                            if strings != last {
                                last = strings
                                continuation.yield(TXTRecord(dnsStrings: strings))
                            }
                            wait = wideArea.pollInterval(ttl: ttl)
                        } catch  where last != nil && !(error is CancellationError) {
                            failures += 1
                            wait = WideAreaBrowsing.backOff(afterFailures: failures)
                        }
                        try await Task.sleep(for: wait)
                    }
                } catch is CancellationError {
                    continuation.finish()
                } catch {
                    continuation.finish(throwing: error)
                }
            }
            continuation.onTermination = { _ in watching.cancel() }
        }
    }

    /// `body`'s result, or ``DiscoveryError/timedOut`` after `seconds`.
    private static func withTimeout<T: Sendable>(
        _ seconds: TimeInterval, _ body: @escaping @Sendable () async throws -> T
    ) async throws -> T {
        try await withThrowingTaskGroup(of: T?.self) { group in
            group.addTask { try await body() }
            group.addTask {
                try await Task.sleep(for: .milliseconds(Int(seconds * 1000)))
                return nil
            }
            defer { group.cancelAll() }
            guard let first = try await group.next(), let value = first else { throw DiscoveryError.timedOut }
            return value
        }
    }
}
