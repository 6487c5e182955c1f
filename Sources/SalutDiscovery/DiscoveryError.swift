import CAvahi

/// An error from Salut's discovery layer: bad input caught before reaching Avahi, or a failure
/// reported by the avahi-daemon.
///
/// Every case carries enough to print a useful one-line message (`description`). The Apple-style
/// API maps each case to a `NetService.ErrorCode` (see ``netServiceErrorCode``).
public enum DiscoveryError: Error, Sendable, Equatable, CustomStringConvertible {
    /// No avahi-daemon answers on the D-Bus system bus.
    case daemonUnavailable(String)
    /// The name is already taken on the network and renaming was not allowed.
    case collision(name: String)
    /// Nothing answered before the timeout.
    case timedOut
    /// The service or host could not be found.
    case notFound
    /// The operation was cancelled (by `stop()`, a cancelled task, or a released handle).
    case cancelled
    /// The object is busy with another operation (for example publishing while resolving).
    case activityInProgress
    /// A service type not of the form `_name._tcp` / `_name._udp` (with optional subtype).
    case invalidServiceType(String, reason: String)
    /// A service instance name that is empty where it must not be, or longer than 63 bytes.
    case invalidServiceName(String, reason: String)
    /// A domain that is not a valid DNS domain name.
    case invalidDomain(String)
    /// A host name that cannot be looked up (an IP address, a name without a domain, an empty
    /// or overlong label); the reason says which.
    case invalidHostName(String, reason: String)
    /// A port outside 0...65535 (or 0 where a real port is required).
    case invalidPort(Int)
    /// A TXT record that cannot be encoded or decoded; the reason says which part.
    case invalidTXTRecord(reason: String)
    /// Any other failure the daemon reported, with Avahi's error number and text.
    case avahi(code: Int32, message: String)
    /// The listening socket of an auto-listening service could not be set up (the port is in
    /// use, or the TLS identity cannot be loaded), with the streams layer's reason.
    case listenFailed(String)
    /// No network interface has this name.
    case unknownInterface(String)

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
        switch self {
        case .invalidServiceName("", let reason) where service != nil: return .invalidServiceName(service!, reason: reason)
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

    public var description: String {
        switch self {
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
        }
    }
}

extension DiscoveryError {
    /// ` "text"`, or nothing for empty text (Avahi's errors do not say which name they refused).
    fileprivate static func quoted(_ text: String) -> String { text.isEmpty ? "" : " \"\(text)\"" }
}
