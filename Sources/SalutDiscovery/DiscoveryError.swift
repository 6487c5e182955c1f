import Foundation
import CAvahi

/// An error from Salut's discovery layer: bad input caught before reaching Avahi, or a failure
/// reported by the avahi-daemon.
///
/// Every error prints a useful one-line message (`description`). To act on the kind of failure,
/// compare its ``code``; the name, host or domain it is about is in ``subject``:
///
/// ```swift
/// do {
///     try await advertisement.publish()
/// } catch let error as DiscoveryError where error.code == .collision {
///     print("\(error.subject ?? "the name") is taken")
/// }
/// ```
///
/// `DiscoveryError` is a struct, not an enum, so that new kinds of failure can be added in a minor
/// release without breaking code that switches over ``code`` (such a `switch` needs a `default`).
/// The Apple-style API maps each error to a `NetService.ErrorCode` (see ``netServiceErrorCode``).
public struct DiscoveryError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The kind of a ``DiscoveryError``. Compare it with the static members; new kinds may be
    /// added in minor releases.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private let name: String
        private init(_ name: String) { self.name = name }
        /// The code's name, as written in Swift (for example `collision`).
        public var description: String { name }

        /// No avahi-daemon answers on the D-Bus system bus.
        public static let daemonUnavailable = Code("daemonUnavailable")
        /// The name is already taken on the network and renaming was not allowed.
        public static let collision = Code("collision")
        /// Nothing answered before the timeout.
        public static let timedOut = Code("timedOut")
        /// The service or host could not be found.
        public static let notFound = Code("notFound")
        /// The operation was cancelled.
        public static let cancelled = Code("cancelled")
        /// The object is busy with another operation.
        public static let activityInProgress = Code("activityInProgress")
        /// A malformed service type.
        public static let invalidServiceType = Code("invalidServiceType")
        /// A service instance name that is empty where it must not be, or too long.
        public static let invalidServiceName = Code("invalidServiceName")
        /// A domain that is not a valid DNS domain name.
        public static let invalidDomain = Code("invalidDomain")
        /// A host name that cannot be looked up.
        public static let invalidHostName = Code("invalidHostName")
        /// A port outside 0...65535, or 0 where a real port is required.
        public static let invalidPort = Code("invalidPort")
        /// A TXT record that cannot be encoded or decoded.
        public static let invalidTXTRecord = Code("invalidTXTRecord")
        /// Another failure the daemon reported (see ``DiscoveryError/avahiErrorNumber``).
        public static let avahi = Code("avahi")
        /// The listening socket of an auto-listening service could not be set up.
        public static let listenFailed = Code("listenFailed")
        /// No network interface has the given name.
        public static let unknownInterface = Code("unknownInterface")
        /// A TSIG key that cannot be used: unreadable file, no key, an unsupported algorithm.
        public static let invalidKey = Code("invalidKey")
        /// The DNS server refused the update (`REFUSED`: the zone does not allow it).
        public static let updateRefused = Code("updateRefused")
        /// The DNS server is not authoritative for the zone, or did not accept the key
        /// (`NOTAUTH`, `NOTZONE`).
        public static let notAuthorized = Code("notAuthorized")
        /// The DNS server refused the signature: `BADSIG` (wrong secret), `BADKEY` (unknown
        /// key) or `BADTIME` (clocks too far apart); or its answer's signature was wrong.
        public static let signatureRejected = Code("signatureRejected")
        /// No DNS server answered (none found, unreachable, or silent until the timeout).
        public static let serverUnreachable = Code("serverUnreachable")
        /// The DNS server answered with another failure (see ``DiscoveryError/reason``), or an
        /// answer that could not be read.
        public static let dnsFailure = Code("dnsFailure")
    }

    /// What happened, with what it is about: the readable message is made from it.
    private enum Details: Hashable, Sendable {
        case daemonUnavailable(String)
        case collision(name: String)
        case timedOut
        case notFound
        case cancelled
        case activityInProgress
        case invalidServiceType(String, reason: String)
        case invalidServiceName(String, reason: String)
        case invalidDomain(String)
        case invalidHostName(String, reason: String)
        case invalidPort(Int)
        case invalidTXTRecord(reason: String)
        case avahi(code: Int32, message: String)
        case listenFailed(String)
        case unknownInterface(String)
        case invalidKey(String)
        case updateRefused(zone: String, detail: String)
        case notAuthorized(zone: String, detail: String)
        case signatureRejected(String)
        case serverUnreachable(String)
        case dnsFailure(String)
    }

    private let details: Details
    private init(_ details: Details) { self.details = details }

    // MARK: Making errors

    /// No avahi-daemon answers on the D-Bus system bus; `detail` says what was tried.
    public static func daemonUnavailable(_ detail: String) -> DiscoveryError { .init(.daemonUnavailable(detail)) }
    /// The name is already taken on the network and renaming was not allowed.
    public static func collision(name: String) -> DiscoveryError { .init(.collision(name: name)) }
    /// Nothing answered before the timeout.
    public static let timedOut = DiscoveryError(.timedOut)
    /// The service or host could not be found.
    public static let notFound = DiscoveryError(.notFound)
    /// The operation was cancelled (by `stop()`, a cancelled task, or a released handle).
    public static let cancelled = DiscoveryError(.cancelled)
    /// The object is busy with another operation (for example publishing while resolving).
    public static let activityInProgress = DiscoveryError(.activityInProgress)
    /// A service type not of the form `_name._tcp` / `_name._udp` (with optional subtype).
    public static func invalidServiceType(_ type: String, reason: String) -> DiscoveryError {
        .init(.invalidServiceType(type, reason: reason))
    }
    /// A service instance name that is empty where it must not be, or longer than 63 bytes.
    public static func invalidServiceName(_ name: String, reason: String) -> DiscoveryError {
        .init(.invalidServiceName(name, reason: reason))
    }
    /// A domain that is not a valid DNS domain name.
    public static func invalidDomain(_ domain: String) -> DiscoveryError { .init(.invalidDomain(domain)) }
    /// A host name that cannot be looked up (an IP address, a name without a domain, an empty
    /// or overlong label); the reason says which.
    public static func invalidHostName(_ host: String, reason: String) -> DiscoveryError {
        .init(.invalidHostName(host, reason: reason))
    }
    /// A port outside 0...65535 (or 0 where a real port is required).
    public static func invalidPort(_ port: Int) -> DiscoveryError { .init(.invalidPort(port)) }
    /// A TXT record that cannot be encoded or decoded; the reason says which part.
    public static func invalidTXTRecord(reason: String) -> DiscoveryError { .init(.invalidTXTRecord(reason: reason)) }
    /// Any other failure the daemon reported, with Avahi's error number and text.
    public static func avahi(code: Int32, message: String) -> DiscoveryError {
        .init(.avahi(code: code, message: message))
    }
    /// The listening socket of an auto-listening service could not be set up (the port is in
    /// use, or the TLS identity cannot be loaded), with the streams layer's reason.
    public static func listenFailed(_ reason: String) -> DiscoveryError { .init(.listenFailed(reason)) }
    /// No network interface has this name.
    public static func unknownInterface(_ name: String) -> DiscoveryError { .init(.unknownInterface(name)) }
    /// A TSIG key that cannot be used; the reason says why (and which file).
    public static func invalidKey(_ reason: String) -> DiscoveryError { .init(.invalidKey(reason)) }
    /// The server for `zone` answered `REFUSED`.
    public static func updateRefused(zone: String, detail: String) -> DiscoveryError {
        .init(.updateRefused(zone: zone, detail: detail))
    }
    /// The server for `zone` answered `NOTAUTH` or `NOTZONE`.
    public static func notAuthorized(zone: String, detail: String) -> DiscoveryError {
        .init(.notAuthorized(zone: zone, detail: detail))
    }
    /// The server refused the signature (`BADSIG`, `BADKEY`, `BADTIME`), or its own did not verify.
    public static func signatureRejected(_ reason: String) -> DiscoveryError { .init(.signatureRejected(reason)) }
    /// No DNS server answered; the reason says which server and what was tried.
    public static func serverUnreachable(_ reason: String) -> DiscoveryError { .init(.serverUnreachable(reason)) }
    /// Another DNS failure, or an answer that could not be read.
    public static func dnsFailure(_ reason: String) -> DiscoveryError { .init(.dnsFailure(reason)) }

    // MARK: Reading errors

    /// The kind of failure.
    public var code: Code {
        switch details {
        case .daemonUnavailable: .daemonUnavailable
        case .collision: .collision
        case .timedOut: .timedOut
        case .notFound: .notFound
        case .cancelled: .cancelled
        case .activityInProgress: .activityInProgress
        case .invalidServiceType: .invalidServiceType
        case .invalidServiceName: .invalidServiceName
        case .invalidDomain: .invalidDomain
        case .invalidHostName: .invalidHostName
        case .invalidPort: .invalidPort
        case .invalidTXTRecord: .invalidTXTRecord
        case .avahi: .avahi
        case .listenFailed: .listenFailed
        case .unknownInterface: .unknownInterface
        case .invalidKey: .invalidKey
        case .updateRefused: .updateRefused
        case .notAuthorized: .notAuthorized
        case .signatureRejected: .signatureRejected
        case .serverUnreachable: .serverUnreachable
        case .dnsFailure: .dnsFailure
        }
    }

    /// What the error is about, when it names something: the taken or invalid service name, the
    /// invalid service type, host name, domain or port, or the unknown interface. Nil when the
    /// daemon refused without saying which name.
    public var subject: String? {
        let text: String
        switch details {
        case .collision(let name): text = name
        case .invalidServiceType(let type, _): text = type
        case .invalidServiceName(let name, _): text = name
        case .invalidDomain(let domain): text = domain
        case .invalidHostName(let host, _): text = host
        case .invalidPort(let port): text = String(port)
        case .unknownInterface(let name): text = name
        case .updateRefused(let zone, _), .notAuthorized(let zone, _): text = zone
        default: return nil
        }
        return text.isEmpty ? nil : text
    }

    /// Why the input was refused or the operation failed, when more is known than the kind:
    /// the rule an invalid name or type breaks, the daemon's or the streams layer's text.
    public var reason: String? {
        switch details {
        case .daemonUnavailable(let detail): detail
        case .invalidServiceType(_, let reason), .invalidServiceName(_, let reason), .invalidHostName(_, let reason),
            .invalidTXTRecord(let reason):
            reason
        case .avahi(_, let message): message
        case .listenFailed(let reason): reason
        case .invalidKey(let reason), .signatureRejected(let reason), .serverUnreachable(let reason),
            .dnsFailure(let reason):
            reason
        case .updateRefused(_, let detail), .notAuthorized(_, let detail): detail
        default: nil
        }
    }

    /// The port that is out of range (``Code-swift.struct/invalidPort``).
    public var port: Int? {
        if case .invalidPort(let port) = details { return port }
        return nil
    }

    /// Avahi's error number (`AVAHI_ERR_*`) for a failure the daemon reported that has no code of
    /// its own (``Code-swift.struct/avahi``).
    public var avahiErrorNumber: Int32? {
        if case .avahi(let code, _) = details { return code }
        return nil
    }

    /// Maps an Avahi error number (`AVAHI_ERR_*`) to a discovery error.
    init(avahiCode code: Int32) {
        switch code {
        case Int32(AVAHI_ERR_COLLISION): self = .collision(name: "")
        case Int32(AVAHI_ERR_TIMEOUT): self = .timedOut
        case Int32(AVAHI_ERR_NOT_FOUND), Int32(AVAHI_ERR_DNS_NXDOMAIN): self = .notFound
        case Int32(AVAHI_ERR_NO_DAEMON), Int32(AVAHI_ERR_DISCONNECTED):
            self = .daemonUnavailable(Self.avahiMessage(code))
        case Int32(AVAHI_ERR_INVALID_SERVICE_TYPE), Int32(AVAHI_ERR_INVALID_SERVICE_SUBTYPE):
            self = .invalidServiceType("", reason: Self.refused(code))
        case Int32(AVAHI_ERR_INVALID_SERVICE_NAME): self = .invalidServiceName("", reason: Self.refused(code))
        case Int32(AVAHI_ERR_INVALID_HOST_NAME): self = .invalidHostName("", reason: Self.refused(code))
        case Int32(AVAHI_ERR_INVALID_DOMAIN_NAME): self = .invalidDomain("")
        default: self = .avahi(code: code, message: Self.avahiMessage(code))
        }
    }

    /// The same error with the name, host or domain it is about filled in where Avahi's bare
    /// error number left it empty.
    func naming(service: String? = nil, host: String? = nil, domain: String? = nil) -> DiscoveryError {
        switch details {
        case .invalidServiceName("", let reason) where service != nil:
            return .invalidServiceName(service!, reason: reason)
        case .invalidHostName("", let reason) where host != nil: return .invalidHostName(host!, reason: reason)
        case .invalidDomain("") where domain != nil: return .invalidDomain(domain!)
        default: return self
        }
    }

    private static func refused(_ code: Int32) -> String {
        "avahi-daemon refused it (\(avahiMessage(code)), Avahi error \(code))"
    }

    static func avahiMessage(_ code: Int32) -> String {
        guard let text = avahi_strerror(code) else { return "Avahi error \(code)" }
        return String(cString: text)
    }

    /// A one-line message for people: what failed, about what, and why.
    public var description: String {
        switch details {
        case .daemonUnavailable(let detail):
            return "avahi-daemon is not available (\(detail)); start it with your system's service manager "
                + "(for example: sudo systemctl start avahi-daemon)"
        case .collision(let name):
            return name.isEmpty ? "name collision" : "the name \"\(name)\" is already in use"
        case .timedOut: return "timed out"
        case .notFound: return "not found"
        case .cancelled: return "cancelled"
        case .activityInProgress: return "another operation is in progress on this object"
        case .invalidServiceType(let type, let reason): return "invalid service type\(Self.quoted(type)): \(reason)"
        case .invalidServiceName(let name, let reason): return "invalid service name\(Self.quoted(name)): \(reason)"
        case .invalidDomain(let domain):
            return domain.isEmpty ? "invalid domain (refused by avahi-daemon)" : "invalid domain \"\(domain)\""
        case .invalidHostName(let host, let reason): return "invalid host name\(Self.quoted(host)): \(reason)"
        case .invalidPort(let port): return "invalid port \(port): must be 0...65535"
        case .invalidTXTRecord(let reason): return "invalid TXT record: \(reason)"
        case .avahi(let code, let message): return "\(message) (Avahi error \(code))"
        case .listenFailed(let reason): return "cannot listen for connections: \(reason)"
        case .unknownInterface(let name): return "no network interface named \"\(name)\""
        case .invalidKey(let reason): return "cannot use the TSIG key: \(reason)"
        case .updateRefused(let zone, let detail): return "the DNS server refused the update of \(zone) (\(detail))"
        case .notAuthorized(let zone, let detail):
            return "the DNS server does not take updates of \(zone) (\(detail))"
        case .signatureRejected(let reason): return "the DNS server rejected the signature: \(reason)"
        case .serverUnreachable(let reason): return "no DNS server answered: \(reason)"
        case .dnsFailure(let reason): return "DNS failure: \(reason)"
        }
    }

    /// ` "text"`, or nothing for empty text (Avahi's errors do not say which name they refused).
    private static func quoted(_ text: String) -> String { text.isEmpty ? "" : " \"\(text)\"" }
}

/// `localizedDescription` (and so `CFReadStreamCopyError(_:)`'s text, Foundation's alerts and
/// logs) reads as `description`, not as "The operation could not be completed".
extension DiscoveryError: LocalizedError {
    public var errorDescription: String? { description }
}
