import Foundation
import SalutStreams

/// How a ``PeerSession`` makes its connections: timeouts, TLS, trust, limits and socket
/// options. A session copies its configuration when it is created; changing the value
/// afterwards changes nothing in the session.
///
/// ```swift
/// var configuration = PeerSessionConfiguration.default
/// configuration.timeoutIntervalForRequest = 10
/// configuration.trustPolicy = .pinned(["3f1c…e9"])
/// let session = PeerSession(configuration: configuration, delegate: self, delegateQueue: nil)
/// ```
public struct PeerSessionConfiguration: Sendable {
    /// A session that keeps what it learns on disk: trust-on-first-use decisions are stored in
    /// ``trustStoreURL``.
    public static var `default`: PeerSessionConfiguration { PeerSessionConfiguration(isEphemeral: false) }

    /// A session that keeps nothing on disk: trust-on-first-use decisions live in memory and
    /// are forgotten with the session.
    public static var ephemeral: PeerSessionConfiguration { PeerSessionConfiguration(isEphemeral: true) }

    /// True for ``ephemeral``.
    public let isEphemeral: Bool

    /// A background session: its upload tasks are kept on disk (in ``backgroundStateDirectory``),
    /// survive a crash or a restart of the process, wait for their service to be visible,
    /// retry after a lost connection and resume. Re-creating a session with the same
    /// identifier lists its tasks again (``PeerSession/allTasks``) and delivers the events
    /// that no delegate heard, and once the tasks it carried on have ended too,
    /// ``PeerSessionUploadDelegate/peerSessionDidFinishEvents(forBackgroundSession:)`` (not
    /// called when nothing was pending).
    ///
    /// One process at a time runs a background session's tasks (it holds a lock in the state
    /// folder); a session made with the same identifier in another process, or with
    /// ``runsBackgroundTasks`` false, only queues tasks for it.
    public static func background(withIdentifier identifier: String) -> PeerSessionConfiguration {
        var configuration = PeerSessionConfiguration(isEphemeral: false)
        configuration.identifier = identifier
        configuration.backgroundStateDirectory = defaultBackgroundDirectory(identifier)
        return configuration
    }

    /// The background session's identifier (nil for other sessions).
    public private(set) var identifier: String?
    /// Where a background session keeps its tasks. Defaults to
    /// `$XDG_STATE_HOME/salut/background/IDENTIFIER` (or `~/.local/state/salut/background/…`).
    public var backgroundStateDirectory: URL?
    /// False: this process only queues background tasks for the process that runs them (a
    /// command that hands work to a daemon). Default true.
    public var runsBackgroundTasks = true
    /// How a background session's upload tasks deliver their body (required for them).
    public var uploadProtocol: (any PeerUploadProtocol)?
    /// How many attempts a background upload makes before it fails (the first included).
    /// Default 10.
    public var maximumAttempts = 10
    /// Seconds before the first retry; each later one waits twice as long, up to a minute.
    /// Default 1.
    public var retryDelay: TimeInterval = 1

    /// Seconds a task may sit idle (nothing read or written while an operation waits) before
    /// it fails with ``PeerSessionError/timedOut(_:)``. Default 60.
    public var timeoutIntervalForRequest: TimeInterval = 60
    /// Seconds a task may run in all before it fails. Default 7 days, as Apple's.
    public var timeoutIntervalForResource: TimeInterval = 604_800
    /// Seconds to wait for a connection to be made. Default 30.
    public var timeoutIntervalForConnect: TimeInterval = 30
    /// Seconds the peer has for its part of a TLS handshake (`startSecureConnection()`),
    /// counted from the call; the trust decision that follows is not counted. A peer that
    /// accepts the connection and then never answers fails the task with a
    /// ``PeerSessionError/connection(_:)`` error (`SocketStreamError.limitExceeded(_:)`).
    /// Default 10; NaN, zero or a negative value take the default.
    public var timeoutIntervalForTLSHandshake: TimeInterval = 10

    /// The oldest TLS version to negotiate (TLS 1.2 by default).
    public var tlsMinimumSupportedProtocolVersion: TLSConfiguration.Version = .v1_2
    /// The newest TLS version to negotiate (nil: the newest available).
    public var tlsMaximumSupportedProtocolVersion: TLSConfiguration.Version?
    /// Which peers to trust when a task starts TLS.
    public var trustPolicy: PeerTrustPolicy = .systemRoots
    /// Where trust-on-first-use decisions are kept (nil for an ephemeral session, which keeps
    /// them in memory). Defaults to `$XDG_DATA_HOME/salut/known-peers.json` (or
    /// `~/.local/share/salut/known-peers.json`). The file is a `TrustedKeys` book (SalutStreams): shared by
    /// sessions and processes, read again when it changes, refused when others could write it.
    public var trustStoreURL: URL?
    /// This end's certificate and key, presented when a peer asks for one.
    public var tlsIdentity: PeerTLSIdentity?

    /// How many connections to one host (or one service) may be open at once; further tasks
    /// wait, highest ``PeerSessionTask/priority`` first. Default 6.
    public var maximumConnectionsPerHost: Int = 6
    /// The kind of traffic, mapped to `IP_TOS`/`IPV6_TCLASS` and `SO_PRIORITY` on each socket.
    public var networkServiceType: PeerNetworkServiceType = .default
    /// Which address families connections may use.
    public var allowedAddressFamilies: PeerAddressFamilies = .any
    /// Keep connections on this interface (`SO_BINDTODEVICE`; needs `CAP_NET_RAW`). Nil: any.
    public var boundInterfaceName: String?

    init(isEphemeral: Bool) {
        self.isEphemeral = isEphemeral
        trustStoreURL = isEphemeral ? nil : Self.defaultTrustStore
    }

    static func defaultBackgroundDirectory(_ identifier: String) -> URL {
        let environment = ProcessInfo.processInfo.environment
        let base =
            environment["XDG_STATE_HOME"].map { URL(fileURLWithPath: $0) }
            ?? FileManager.default.homeDirectoryForCurrentUser.appendingPathComponent(".local/state")
        let safe = identifier.map { $0.isLetter || $0.isNumber || $0 == "." || $0 == "-" || $0 == "_" ? $0 : "_" }
        return base.appendingPathComponent("salut/background").appendingPathComponent(String(safe))
    }

    static var defaultTrustStore: URL {
        let environment = ProcessInfo.processInfo.environment
        let base =
            environment["XDG_DATA_HOME"].map { URL(fileURLWithPath: $0) }
            ?? FileManager.default.homeDirectoryForCurrentUser.appendingPathComponent(".local/share")
        return base.appendingPathComponent("salut/known-peers.json")
    }

    /// The TLS configuration a task's `startSecureConnection()` uses.
    func tlsConfiguration() -> TLSConfiguration {
        var tls = TLSConfiguration.client
        tls.minimumVersion = tlsMinimumSupportedProtocolVersion
        tls.maximumVersion = tlsMaximumSupportedProtocolVersion
        tls.certificateChainFile = tlsIdentity?.certificateChainFile
        tls.privateKeyFile = tlsIdentity?.privateKeyFile
        switch trustPolicy {
        case .systemRoots: break
        case .roots(let file): tls.trustRoots = .file(file)
        case .pinned(let pins): tls.pinnedSHA256 = pins
        case .trustOnFirstUse, .acceptAny: tls.validatesCertificateChain = false
        }
        return tls
    }

    /// The socket options for each connection.
    var socketOptions: SocketOptions {
        let (trafficClass, priority) = networkServiceType.socketValues
        let families: SocketOptions.Families =
            switch allowedAddressFamilies {
            case .any: .any
            case .ipv4: .ipv4Only
            case .ipv6: .ipv6Only
            }
        return SocketOptions(
            trafficClass: trafficClass, priority: priority, interface: boundInterfaceName, families: families)
    }
}

/// Which TLS peers a session trusts.
public enum PeerTrustPolicy: Sendable, Hashable {
    /// A chain ending in the system trust store, naming the host that was dialled.
    case systemRoots
    /// A chain ending in one of the PEM certificates in this file, naming the host.
    case roots(file: String)
    /// A peer whose certificate or public key has one of these SHA-256 fingerprints.
    case pinned([String])
    /// The first public key seen for a host (or service) is remembered; later connections must
    /// present the same one (like SSH's known_hosts).
    case trustOnFirstUse
    /// Any peer (encryption without authentication). Use only with a delegate that decides.
    case acceptAny
}

/// A certificate chain and private key in PEM files.
public struct PeerTLSIdentity: Sendable, Hashable {
    /// PEM file with the certificate and any intermediates.
    public var certificateChainFile: String
    /// PEM file with the certificate's private key.
    public var privateKeyFile: String
    /// Names the two files (they are read when a task first starts TLS).
    public init(certificateChainFile: String, privateKeyFile: String) {
        self.certificateChainFile = certificateChainFile
        self.privateKeyFile = privateKeyFile
    }
}

/// Address families a session may connect over.
public enum PeerAddressFamilies: Sendable, Hashable {
    /// IPv4 and IPv6 (Happy Eyeballs between them).
    case any
    /// IPv4 addresses only.
    case ipv4
    /// IPv6 addresses only.
    case ipv6
}

/// Apple's network service types, mapped to DSCP code points (RFC 4594) and Linux socket
/// priorities.
public enum PeerNetworkServiceType: Sendable, Hashable, CaseIterable {
    case `default`, background, video, voice, responsiveData, avStreaming, responsiveAV, callSignaling

    /// (`IP_TOS`/`IPV6_TCLASS` value, `SO_PRIORITY`); nil leaves the system default.
    var socketValues: (Int32?, Int32?) {
        switch self {
        case .default: return (nil, nil)
        case .background: return (0x20, 1)  // CS1, low-priority data
        case .responsiveData: return (0x48, 4)  // AF21, low-latency data
        case .avStreaming: return (0x88, 5)  // AF41, multimedia streaming
        case .responsiveAV: return (0x88, 5)  // AF41, interactive multimedia
        case .video: return (0x80, 5)  // CS4, real-time interactive
        case .voice: return (0xB8, 6)  // EF, telephony
        case .callSignaling: return (0x60, 6)  // CS3, signalling
        }
    }
}
