import Foundation
import SalutStreams

/// A service published on the network for as long as this handle lives.
///
/// ```swift
/// let ad = try await ServiceAdvertisement.publish(name: "Kitchen", type: "_demo._tcp", port: 8080,
///                                                 txtRecord: try TXTRecord(["v": "1"]))
/// print("published as", ad.name)   // "Kitchen #2" after a collision
/// ```
///
/// The service is withdrawn by ``cancel()`` or when the handle is released. It is registered
/// again by itself after the daemon restarts.
public final class ServiceAdvertisement: Sendable {
    /// Who keeps the service published: the avahi-daemon (on the link), or Salut's own signed
    /// DNS updates (a wide-area domain).
    private enum Backend: Sendable {
        case link(RegisterOperation)
        case wideArea(WideAreaPublisher)
    }
    private let backend: Backend
    private let currentName: Locked<String>
    /// The listening socket of an auto-listening service (see ``listen(name:type:domain:port:txtRecord:subtypes:tls:trustEvaluator:limits:bufferSize:allowRename:timeout:context:)``).
    public let listener: StreamListener?
    /// The service type it was published with.
    public let type: String
    /// The domain it was published in.
    public let domain: String

    /// The name the service is published under now (the final one after any rename).
    public var name: String { currentName.value }

    private init(backend: Backend, name: Locked<String>, type: String, domain: String, listener: StreamListener?) {
        self.backend = backend
        self.listener = listener
        self.currentName = name
        self.type = type
        self.domain = domain
    }

    deinit {
        stopBackend()
        listener?.stop()
    }

    private func stopBackend() {
        switch backend {
        case .link(let operation): operation.stop()
        case .wideArea(let publisher): Task { try? await publisher.stop() }
        }
    }

    /// Publishes a service and returns once it is established on the network.
    /// - Parameters:
    ///   - name: the instance name; empty for this host's name.
    ///   - type: `_name._tcp`/`_name._udp`, or `_sub._sub._name._tcp` to add a subtype.
    ///   - domain: the domain to publish in (`local` for the link).
    ///   - port: the port the service listens on.
    ///   - txtRecord: the service's TXT record (at most ``TXTRecord/maximumPublishedSize`` bytes).
    ///   - subtypes: subtypes to publish the service under too (`_printer`, for example).
    ///   - allowRename: pick an alternative name on collision (true) or fail (false).
    ///   - timeout: how long to wait for the daemon to establish the service, in seconds. NaN,
    ///     zero or a negative value takes the default (10 s); at most a billion seconds are waited.
    ///   - context: the connection to the avahi-daemon to publish through.
    ///   - host: the host the service is on, when it is not this one: a host name whose
    ///     addresses are published on the link (``HostAdvertisement``); nil for this host.
    /// - Throws: ``DiscoveryError/collision(name:)`` when the name is taken and renaming is not
    ///   allowed; ``DiscoveryError/timedOut`` when it is not established in time (for example
    ///   because no daemon runs); validation errors for bad input, as
    ///   ``validate(name:type:domain:port:txtRecord:subtypes:)`` (a TXT record over
    ///   ``TXTRecord/maximumPublishedSize`` included), and
    ///   ``DiscoveryError/Code-swift.struct/invalidDomain`` for a `host` that is no host name.
    public static func publish(
        name: String, type: String, domain: String = "local", port: Int,
        txtRecord: TXTRecord = TXTRecord(), subtypes: [String] = [], allowRename: Bool = true,
        timeout: TimeInterval = 10, context: DiscoveryContext = .shared, host: String? = nil
    ) async throws -> ServiceAdvertisement {
        if let host, !AvahiValues.isValidDomain(host) || host.isEmpty {
            throw DiscoveryError.invalidDomain("\(host.debugDescription) is not a host name")
        }
        return try await publish(
            name: name, type: type, domain: domain, port: port, txtRecord: txtRecord, subtypes: subtypes,
            allowRename: allowRename, timeout: timeout, context: context, listener: nil, host: host)
    }

    /// Publishes a service in a wide-area domain (a unicast DNS zone) with signed DNS updates,
    /// and returns once the zone's primary server has accepted it. The records are refreshed
    /// while the handle lives and removed by ``withdraw()``, ``cancel()`` or its release.
    /// - Parameters:
    ///   - name: the instance name; empty for this host's name.
    ///   - type: `_name._tcp`/`_name._udp`, or `_sub._sub._name._tcp` to add a subtype.
    ///   - domain: the zone to publish in (not `local`).
    ///   - port: the port the service listens on.
    ///   - txtRecord: the service's TXT record.
    ///   - subtypes: subtypes to publish the service under too.
    ///   - allowRename: on a name taken in the zone, publish as `Name (2)`, `Name (3)`… (true)
    ///     or fail (false).
    ///   - wideArea: the key, and optionally the name server, host name and addresses.
    /// - Throws: ``DiscoveryError``: validation errors for bad input; ``DiscoveryError/Code-swift.struct/collision``;
    ///   ``DiscoveryError/Code-swift.struct/signatureRejected`` (BADSIG, BADKEY, BADTIME),
    ///   ``DiscoveryError/Code-swift.struct/notAuthorized``, ``DiscoveryError/Code-swift.struct/updateRefused``,
    ///   ``DiscoveryError/Code-swift.struct/serverUnreachable`` or ``DiscoveryError/Code-swift.struct/dnsFailure``
    ///   from the server.
    public static func publish(
        name: String, type: String, domain: String, port: Int,
        txtRecord: TXTRecord = TXTRecord(), subtypes: [String] = [], allowRename: Bool = true,
        wideArea: WideAreaPublishing
    ) async throws -> ServiceAdvertisement {
        try await publish(
            name: name, type: type, domain: domain, port: port, txtRecord: txtRecord, subtypes: subtypes,
            allowRename: allowRename, wideArea: wideArea, listener: nil)
    }

    /// Listens on `port` (0: one the system picks) on IPv4 and IPv6 and publishes the service on
    /// that port in a wide-area domain, as ``publish(name:type:domain:port:txtRecord:subtypes:allowRename:wideArea:)``
    /// does; accepted connections arrive in ``connections``.
    /// - Parameters:
    ///   - name: the instance name; empty for this host's name.
    ///   - type: `_name._tcp`/`_name._udp`, or `_sub._sub._name._tcp` to add a subtype.
    ///   - domain: the zone to publish in (not `local`).
    ///   - port: the port to listen on; 0 for one the system picks.
    ///   - txtRecord: the service's TXT record.
    ///   - subtypes: subtypes to publish the service under too.
    ///   - tls: a server configuration to run TLS on each accepted connection.
    ///   - trustEvaluator: judges each client during its TLS handshake, as
    ///     `StreamListener(tls:trustEvaluator:)` does (with `tls` only).
    ///   - limits: bounds on each accepted connection; see `ConnectionLimits`.
    ///   - bufferSize: bytes buffered in each direction of each accepted connection (64 KiB by
    ///     default; a larger buffer lets a bulk reader take more at each wake-up).
    ///   - allowRename: on a name taken in the zone, publish as `Name (2)`… (true) or fail (false).
    ///   - wideArea: the key, and optionally the name server, host name and addresses.
    /// - Throws: ``DiscoveryError/listenFailed(_:)`` when the port cannot be bound or the TLS
    ///   identity cannot be loaded; otherwise as ``publish(name:type:domain:port:txtRecord:subtypes:allowRename:wideArea:)``.
    public static func listen(
        name: String, type: String, domain: String, port: Int = 0,
        txtRecord: TXTRecord = TXTRecord(), subtypes: [String] = [], tls: TLSConfiguration? = nil,
        trustEvaluator: TLSTrustEvaluator? = nil, limits: ConnectionLimits = ConnectionLimits(),
        bufferSize: Int = 64 * 1024, allowRename: Bool = true, wideArea: WideAreaPublishing
    ) async throws -> ServiceAdvertisement {
        try await listening(
            port: port, tls: tls, trustEvaluator: trustEvaluator, limits: limits, bufferSize: bufferSize
        ) { listener in
            try await publish(
                name: name, type: type, domain: domain, port: Int(listener.port), txtRecord: txtRecord,
                subtypes: subtypes, allowRename: allowRename, wideArea: wideArea, listener: listener)
        }
    }

    private static func publish(
        name: String, type: String, domain: String, port: Int, txtRecord: TXTRecord, subtypes: [String],
        allowRename: Bool, wideArea: WideAreaPublishing, listener: StreamListener?
    ) async throws -> ServiceAdvertisement {
        let request = try request(
            name: name, type: type, domain: domain, port: port, txtRecord: txtRecord,
            subtypes: subtypes, allowRename: allowRename)
        guard request.domain.lowercased() != "local" else {
            throw DiscoveryError.invalidDomain("local (publish on the link without wideArea:)")
        }
        let host = wideArea.hostName ?? WideAreaPublishing.localHostName()
        let instance = name.isEmpty ? host : name
        let addresses = wideArea.addresses ?? WideAreaPublishing.localAddresses()
        let publisher = try WideAreaPublisher(
            name: instance, type: request.type.base, subtypes: (request.type.subtype.map { [$0] } ?? []) + subtypes,
            domain: request.domain, port: UInt16(request.port), txt: Self.strings(of: txtRecord), host: host,
            addresses: addresses, key: wideArea.key, nameServer: wideArea.nameServer, renames: allowRename,
            ttl: wideArea.ttl, lease: wideArea.lease)
        let final = try await publisher.publish()
        return ServiceAdvertisement(
            backend: .wideArea(publisher), name: Locked(final), type: request.type.browseType,
            domain: request.domain, listener: listener)
    }

    /// A TXT record's strings, as DNS carries them.
    private static func strings(of record: TXTRecord) -> [[UInt8]] {
        (DNSRecord.strings(inTextData: [UInt8](record.data)) ?? []).filter { !$0.isEmpty }
    }

    /// Listens on `port` (0: one the system picks) on IPv4 and IPv6, publishes the service on
    /// that port, and returns once it is established; accepted connections arrive in
    /// ``connections``. Withdrawing the service closes the listener.
    /// - Parameters:
    ///   - name: the instance name; empty for this host's name.
    ///   - type: `_name._tcp`/`_name._udp`, or `_sub._sub._name._tcp` to add a subtype.
    ///   - domain: the domain to publish in (`local` for the link).
    ///   - port: the port to listen on; 0 for one the system picks.
    ///   - txtRecord: the service's TXT record (at most ``TXTRecord/maximumPublishedSize`` bytes).
    ///   - subtypes: subtypes to publish the service under too.
    ///   - tls: a server configuration to run TLS on each accepted connection.
    ///   - trustEvaluator: judges each client during its TLS handshake, as
    ///     `StreamListener(tls:trustEvaluator:)` does (with `tls` only).
    ///   - limits: bounds on each accepted connection (handshake, first byte, idle) and on how
    ///     many may be setting up at once; see `ConnectionLimits`.
    ///   - bufferSize: bytes buffered in each direction of each accepted connection (64 KiB by
    ///     default; a larger buffer lets a bulk reader take more at each wake-up).
    ///   - allowRename: pick an alternative name on collision (true) or fail (false).
    ///   - timeout: how long to wait for the daemon to establish the service, in seconds, taken
    ///     as by ``publish(name:type:domain:port:txtRecord:subtypes:allowRename:timeout:context:host:)``.
    ///   - context: the connection to the avahi-daemon to publish through.
    /// - Throws: ``DiscoveryError/listenFailed(_:)`` when the port cannot be bound or the TLS
    ///   identity cannot be loaded; otherwise as ``publish(name:type:domain:port:txtRecord:subtypes:allowRename:timeout:context:host:)``.
    public static func listen(
        name: String, type: String, domain: String = "local", port: Int = 0,
        txtRecord: TXTRecord = TXTRecord(), subtypes: [String] = [], tls: TLSConfiguration? = nil,
        trustEvaluator: TLSTrustEvaluator? = nil, limits: ConnectionLimits = ConnectionLimits(),
        bufferSize: Int = 64 * 1024, allowRename: Bool = true, timeout: TimeInterval = 10,
        context: DiscoveryContext = .shared
    ) async throws -> ServiceAdvertisement {
        try await listening(
            port: port, tls: tls, trustEvaluator: trustEvaluator, limits: limits, bufferSize: bufferSize
        ) { listener in
            try await publish(
                name: name, type: type, domain: domain, port: Int(listener.port), txtRecord: txtRecord,
                subtypes: subtypes, allowRename: allowRename, timeout: timeout, context: context,
                listener: listener)
        }
    }

    /// Makes the listener, then publishes with it; the listener stops if publishing fails.
    /// - Throws: ``DiscoveryError/listenFailed(_:)`` when the listener cannot be made, or what
    ///   `publish` throws.
    private static func listening(
        port: Int, tls: TLSConfiguration?, trustEvaluator: TLSTrustEvaluator?, limits: ConnectionLimits,
        bufferSize: Int, _ publish: (StreamListener) async throws -> ServiceAdvertisement
    ) async throws -> ServiceAdvertisement {
        let listener: StreamListener
        do {
            listener = try StreamListener(
                port: port, tls: tls, bufferSize: bufferSize, limits: limits, trustEvaluator: trustEvaluator)
        } catch {
            throw DiscoveryError.listenFailed("\(error)")
        }
        do {
            return try await publish(listener)
        } catch {
            listener.stop()
            throw error
        }
    }

    /// Connections accepted by an auto-listening service, unopened (an empty sequence for a
    /// service published without listening). Read it once.
    public var connections: AsyncStream<AcceptedConnection> {
        guard let listener else { return AsyncStream { $0.finish() } }
        return listener.connections
    }

    /// Checks what ``publish(name:type:domain:port:txtRecord:subtypes:allowRename:timeout:context:host:)``
    /// checks before it asks the daemon, without asking it: the name (empty for the host's name,
    /// at most 63 bytes), the type and each subtype, the domain, the port, and the TXT record's
    /// size (``TXTRecord/validateForPublishing()``). For validating input early, as a form or a
    /// command line does.
    /// - Throws: the ``DiscoveryError`` validation case for the first problem found.
    public static func validate(
        name: String, type: String, domain: String = "local", port: Int,
        txtRecord: TXTRecord = TXTRecord(), subtypes: [String] = []
    ) throws {
        _ = try request(
            name: name, type: type, domain: domain, port: port, txtRecord: txtRecord, subtypes: subtypes,
            allowRename: true)
    }

    /// The checked registration request.
    static func request(
        name: String, type: String, domain: String, port: Int, txtRecord: TXTRecord,
        subtypes: [String], allowRename: Bool
    ) throws -> RegisterOperation.Request {
        try ServiceNames.checkName(name, allowEmpty: true)
        let parsed = try ServiceNames.parseType(type, domain: domain)
        ServiceNames.noteIfLong(parsed)
        for subtype in subtypes {  // each must make a valid `_sub._sub._name._tcp`
            _ = try ServiceNames.parseType("\(subtype)._sub.\(parsed.base)", domain: domain)
        }
        let domain = try ServiceNames.normaliseDomain(domain)
        let port = try ServiceNames.checkPort(port)
        try txtRecord.validateForPublishing()
        return RegisterOperation.Request(
            name: name, type: parsed, domain: domain, port: port, txt: txtRecord,
            allowRename: allowRename, extraSubtypes: subtypes)
    }

    private static func publish(
        name: String, type: String, domain: String, port: Int, txtRecord: TXTRecord, subtypes: [String],
        allowRename: Bool, timeout: TimeInterval, context: DiscoveryContext, listener: StreamListener?,
        host: String? = nil
    ) async throws -> ServiceAdvertisement {
        var request = try request(
            name: name, type: type, domain: domain, port: port, txtRecord: txtRecord,
            subtypes: subtypes, allowRename: allowRename)
        request.host = host
        let current = Locked(name)
        let operation = try await RegisterOperation.established(
            [request], context: context, within: OperationLimit.clampedSeconds(timeout, default: 10)
        ) { event in
            if case .published(let final) = event { current.exchange(final) }
        }
        return ServiceAdvertisement(
            backend: .link(operation), name: current, type: request.type.browseType,
            domain: request.domain, listener: listener)
    }

    /// Replaces the published TXT record; peers monitoring it see the change.
    /// - Throws: ``DiscoveryError/invalidTXTRecord(reason:)`` for a record over
    ///   ``TXTRecord/maximumPublishedSize``; the published record is then unchanged.
    public func updateTXTRecord(_ txtRecord: TXTRecord) throws {
        try txtRecord.validateForPublishing()
        switch backend {
        case .link(let operation): operation.updateTXT(txtRecord)
        case .wideArea(let publisher):
            // In the order asked for, after whatever the publisher is already sending.
            publisher.requestText(Self.strings(of: txtRecord))
        }
    }

    /// Replaces the published TXT record, like ``updateTXTRecord(_:)``, and returns once the
    /// change is made: handed to the daemon on the link, or accepted by the zone's server (after
    /// whatever the publisher was already telling it).
    /// - Throws: ``DiscoveryError/invalidTXTRecord(reason:)`` for a record over
    ///   ``TXTRecord/maximumPublishedSize``; for a wide-area service, the server's refusal or
    ///   ``DiscoveryError/Code-swift.struct/serverUnreachable``. The published record is then
    ///   unchanged.
    public func changeTXTRecord(to txtRecord: TXTRecord) async throws {
        try txtRecord.validateForPublishing()
        switch backend {
        case .link(let operation): operation.updateTXT(txtRecord)
        case .wideArea(let publisher): try await publisher.updateText(Self.strings(of: txtRecord))
        }
    }

    /// Withdraws the service now (the daemon, or the zone's server, is told shortly after this
    /// returns).
    public func cancel() {
        stopBackend()
        listener?.stop()
    }

    /// Withdraws the service and returns once the daemon (or the zone's server) has been told, so
    /// that peers see it go even if the process exits right after. A wide-area removal the
    /// server refuses is logged (``withdrawReportingFailure()`` throws it instead).
    public func withdraw() async {
        do { try await withdrawReportingFailure() } catch {
            SalutLogging.logger.warning("removing \(self.name) from \(self.domain) failed: \(error)")
        }
    }

    /// Withdraws the service like ``withdraw()``, and throws when a wide-area removal was not
    /// confirmed: the records may then stay in the zone until their update lease runs out.
    /// - Throws: ``DiscoveryError`` from the zone's server (refused, not authorized, a
    ///   rejected signature) or ``DiscoveryError/Code-swift.struct/serverUnreachable``.
    public func withdrawReportingFailure() async throws {
        listener?.stop()
        switch backend {
        case .link(let operation): await operation.stopAndWait()
        case .wideArea(let publisher): try await publisher.stop()
        }
    }
}
