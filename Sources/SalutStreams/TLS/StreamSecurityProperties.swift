import Foundation

// Apple's SSL-settings property and dictionary keys. On Apple platforms they are CFString
// constants. Here they are NSStrings (CFString is NSString's name here, CoreFoundationNames.swift),
// so that `kCFStreamPropertySSLSettings as Stream.PropertyKey`,
// `Stream.PropertyKey(kCFStreamPropertySSLSettings as String)`, `kCFStreamSSLPeerName as String`
// and `[kCFStreamSSLPeerName: kCFNull] as NSDictionary` all compile unchanged (see
// StreamPropertySpellings.swift).

/// The stream property holding an SSL-settings dictionary (set before opening). Computed: an
/// NSString is not `Sendable`, so a stored global one could not be shared between threads.
public var kCFStreamPropertySSLSettings: NSString { NSString(string: "kCFStreamPropertySSLSettings") }
/// Settings key: the name the peer's certificate must carry (a String), or `NSNull()`
/// (`kCFNull`) to skip the name check. Defaults to the host that was dialled.
public var kCFStreamSSLPeerName: NSString { NSString(string: "kCFStreamSSLPeerName") }
/// Settings key: validate the peer's certificate chain (Bool, default true).
public var kCFStreamSSLValidatesCertificateChain: NSString {
    NSString(string: "kCFStreamSSLValidatesCertificateChain")
}
/// Settings key: act as the TLS server (Bool, default false); needs a certificate and key
/// (``SalutSSLSettingsKey/certificateChainFile`` and ``SalutSSLSettingsKey/privateKeyFile``).
public var kCFStreamSSLIsServer: NSString { NSString(string: "kCFStreamSSLIsServer") }
/// Settings key: the security level, as for the security-level property: a
/// `StreamSocketSecurityLevel`, its raw value, or one of the `kCFStreamSocketSecurityLevel…`
/// constants.
public var kCFStreamSSLLevel: NSString { NSString(string: "kCFStreamSSLLevel") }
// CFNetwork's spellings of the security level, NSStrings as `kCFStreamPropertySSLSettings` is
// (CFStrings on Apple's systems), so `kCFStreamPropertySocketSecurityLevel as Stream.PropertyKey`
// compiles unchanged.

/// The security-level property's key (`Stream.PropertyKey.socketSecurityLevelKey`).
public var kCFStreamPropertySocketSecurityLevel: NSString {
    NSString(string: Stream.PropertyKey.socketSecurityLevelKey.rawValue)
}
/// `StreamSocketSecurityLevel.none`.
public var kCFStreamSocketSecurityLevelNone: NSString { NSString(string: StreamSocketSecurityLevel.none.rawValue) }
/// `StreamSocketSecurityLevel.negotiatedSSL`: the best TLS both ends speak.
public var kCFStreamSocketSecurityLevelNegotiatedSSL: NSString {
    NSString(string: StreamSocketSecurityLevel.negotiatedSSL.rawValue)
}
/// `StreamSocketSecurityLevel.tlSv1`: TLS at Salut's configured minimum (1.2 unless lowered).
public var kCFStreamSocketSecurityLevelTLSv1: NSString { NSString(string: StreamSocketSecurityLevel.tlSv1.rawValue) }
/// `StreamSocketSecurityLevel.ssLv3`: refused, insecure.
public var kCFStreamSocketSecurityLevelSSLv3: NSString { NSString(string: StreamSocketSecurityLevel.ssLv3.rawValue) }
/// `StreamSocketSecurityLevel.ssLv2`: refused, insecure.
public var kCFStreamSocketSecurityLevelSSLv2: NSString { NSString(string: StreamSocketSecurityLevel.ssLv2.rawValue) }

/// Salut's own SSL-settings keys, for what Apple expresses with Security framework objects.
public enum SalutSSLSettingsKey {
    /// SHA-256 fingerprints to pin (a String or an array of Strings; see
    /// ``TLSConfiguration/pinnedSHA256``).
    public static let pinnedSHA256 = "SalutSSLPinnedSHA256"
    /// PEM file with this end's certificate chain.
    public static let certificateChainFile = "SalutSSLCertificateChainFile"
    /// PEM file with this end's private key.
    public static let privateKeyFile = "SalutSSLPrivateKeyFile"
    /// PEM file of trusted roots to use instead of the system trust store.
    public static let trustedRootsFile = "SalutSSLTrustedRootsFile"
    /// Oldest TLS version, as `"1.2"` or `"TLSv1.3"`.
    public static let minimumVersion = "SalutSSLMinimumVersion"
    /// Newest TLS version, as `"1.2"` or `"TLSv1.3"`.
    public static let maximumVersion = "SalutSSLMaximumVersion"
}

/// Read-only properties Salut adds to connected socket streams.
extension Stream.PropertyKey {
    /// The negotiated TLS version (a String such as `TLSv1.3`), once connected with TLS.
    public static let salutTLSProtocolVersion = Stream.PropertyKey(rawValue: "SalutTLSProtocolVersion")
    /// The negotiated cipher suite (a String), once connected with TLS.
    public static let salutTLSCipherSuite = Stream.PropertyKey(rawValue: "SalutTLSCipherSuite")
    /// SHA-256 of the peer's certificate (hex String), once connected with TLS.
    public static let salutTLSPeerCertificateSHA256 = Stream.PropertyKey(rawValue: "SalutTLSPeerCertificateSHA256")
    /// The peer's address and port (a String like `[::1]:8080`), once connected.
    public static let salutRemoteAddress = Stream.PropertyKey(rawValue: "SalutRemoteAddress")
    /// This end's address and port (a String), once connected.
    public static let salutLocalAddress = Stream.PropertyKey(rawValue: "SalutLocalAddress")
}

extension TLSConfiguration {
    /// Reads Apple's SSL-settings dictionary (plus ``SalutSSLSettingsKey`` entries) on top of
    /// `base`.
    /// - Throws: ``TLSError/invalidConfiguration(_:)`` naming the key whose value is wrong.
    public init(sslSettings: [String: Any], base: TLSConfiguration = .client) throws {
        self = base
        func bool(_ key: String) throws -> Bool? {
            guard let value = sslSettings[key] else { return nil }
            if let flag = value as? Bool { return flag }
            if let number = value as? NSNumber { return number.boolValue }
            throw TLSError.invalidConfiguration("\(key) must be a Bool")
        }
        func string(_ key: String) throws -> String? {
            guard let value = sslSettings[key] else { return nil }
            if let text = value as? String { return text }
            throw TLSError.invalidConfiguration("\(key) must be a String")
        }
        func version(_ key: String) throws -> Version? {
            guard let text = try string(key) else { return nil }
            guard let version = Version(string: text) else {
                throw TLSError.invalidConfiguration("\(key): unknown TLS version \"\(text)\"")
            }
            return version
        }
        for key in sslSettings.keys where !Self.knownKeys.contains(key) {
            throw TLSError.invalidConfiguration("unknown SSL settings key \(key)")
        }
        if let isServer = try bool(kCFStreamSSLIsServer as String) { role = isServer ? .server : .client }
        if let name = sslSettings[kCFStreamSSLPeerName as String] {
            if name is NSNull {
                peerName = ""  // no name check
            } else if let text = name as? String {
                peerName = text
            } else {
                throw TLSError.invalidConfiguration("\(kCFStreamSSLPeerName) must be a String or NSNull")
            }
        }
        if let validates = try bool(kCFStreamSSLValidatesCertificateChain as String) {
            validatesCertificateChain = validates
        }
        if let value = sslSettings[kCFStreamSSLLevel as String] {
            guard let level = Self.securityLevel(value) else {
                throw TLSError.invalidConfiguration(
                    "\(kCFStreamSSLLevel) must be a StreamSocketSecurityLevel or its raw value")
            }
            guard level != .none else {
                throw TLSError.invalidConfiguration(
                    "\(kCFStreamSSLLevel) is none in an SSL settings dictionary, which asks for TLS")
            }
            try Self.check(level: level)
        }
        if let pins = sslSettings[SalutSSLSettingsKey.pinnedSHA256] {
            if let one = pins as? String {
                pinnedSHA256 = [one]
            } else if let many = pins as? [String] {
                pinnedSHA256 = many
            } else {
                throw TLSError.invalidConfiguration("\(SalutSSLSettingsKey.pinnedSHA256) must be a String or [String]")
            }
        }
        if let file = try string(SalutSSLSettingsKey.certificateChainFile) { certificateChainFile = file }
        if let file = try string(SalutSSLSettingsKey.privateKeyFile) { privateKeyFile = file }
        if let file = try string(SalutSSLSettingsKey.trustedRootsFile) { trustRoots = .file(file) }
        if let minimum = try version(SalutSSLSettingsKey.minimumVersion) { minimumVersion = minimum }
        if let maximum = try version(SalutSSLSettingsKey.maximumVersion) { maximumVersion = maximum }
        try validate()
    }

    private static let knownKeys: Set<String> = [
        kCFStreamSSLPeerName as String, kCFStreamSSLValidatesCertificateChain as String,
        kCFStreamSSLIsServer as String, kCFStreamSSLLevel as String,
        SalutSSLSettingsKey.pinnedSHA256, SalutSSLSettingsKey.certificateChainFile, SalutSSLSettingsKey.privateKeyFile,
        SalutSSLSettingsKey.trustedRootsFile, SalutSSLSettingsKey.minimumVersion, SalutSSLSettingsKey.maximumVersion,
    ]

    /// A security level as Apple code gives it: a `StreamSocketSecurityLevel`, its raw value
    /// as a `String` or `NSString` (the `kCFStreamSocketSecurityLevel…` constants are such).
    /// Nil for anything else.
    static func securityLevel(_ value: Any?) -> StreamSocketSecurityLevel? {
        switch value {
        case let level as StreamSocketSecurityLevel: return level
        case let text as String: return StreamSocketSecurityLevel(rawValue: text)
        case let text as NSString: return StreamSocketSecurityLevel(rawValue: String(describing: text))
        default: return nil
        }
    }

    /// SSLv2 and SSLv3 are refused; TLSv1 and negotiated mean "TLS at the configured minimum"
    /// (1.2 unless lowered: Salut never falls back to 1.0/1.1 by itself).
    static func check(level: StreamSocketSecurityLevel) throws {
        switch level {
        case .none, .tlSv1, .negotiatedSSL: return
        default:
            throw TLSError.invalidConfiguration(
                "security level \(level.rawValue) is not supported (SSLv2/SSLv3 are insecure)")
        }
    }
}

extension Stream.PropertyKey {
    /// `kCFStreamPropertySSLSettings` as a key.
    static let sslSettings = Stream.PropertyKey(rawValue: kCFStreamPropertySSLSettings as String)
}

extension SocketConnection {
    /// `Stream.property(forKey:)` for socket streams.
    func property(forKey key: Stream.PropertyKey) -> AnyObject? {
        let current = state.value
        switch key {
        case .socketSecurityLevelKey: return current.securityLevel.rawValue as NSString
        case Stream.PropertyKey.sslSettings:
            return current.sslSettings.map { NSDictionary(dictionary: $0) }
        case .salutTLSProtocolVersion: return current.details?.tls.map { $0.protocolVersion as NSString }
        case .salutTLSCipherSuite: return current.details?.tls.map { $0.cipherSuite as NSString }
        case .salutTLSPeerCertificateSHA256: return current.details?.tls.map { $0.certificateSHA256 as NSString }
        case .salutRemoteAddress: return current.details?.remoteAddress.map { $0.description as NSString }
        case .salutLocalAddress: return current.details?.localAddress.map { $0.description as NSString }
        default: return nil
        }
    }

    /// `Stream.setProperty(_:forKey:)` for socket streams: the security level and the SSL
    /// settings. Before opening they configure the connection; after it, asking for TLS starts
    /// it on the open connection if no byte has gone either way yet, and fails the streams
    /// otherwise (see ``requestTLSAfterOpening(_:level:sslSettings:)``). False (nothing changed)
    /// for a bad value, an unknown key, turning TLS off or changing its settings after opening.
    func setProperty(_ property: AnyObject?, forKey key: Stream.PropertyKey) -> Bool {
        switch gate.current {
        case .idle: return setPropertyBeforeOpening(property, forKey: key)
        case .failed: return false
        case .connecting, .connected: break
        }
        // TLS asked for with a value that cannot be honoured fails the streams: never a
        // connection that goes on in the clear because a request was not understood.
        switch key {
        case .socketSecurityLevelKey:
            guard let level = TLSConfiguration.securityLevel(property) else {
                refuseTLSAfterOpening(
                    .invalidConfiguration("the security level must be a StreamSocketSecurityLevel or its raw value"))
                return false
            }
            guard level != .none else { return false }  // TLS cannot be turned off once open
            do {
                try TLSConfiguration.check(level: level)
                let configuration =
                    try state.value.sslSettings.map { try TLSConfiguration(sslSettings: $0) } ?? TLSConfiguration.client
                return requestTLSAfterOpening(configuration, level: level, sslSettings: nil)
            } catch {
                refuseTLSAfterOpening(error as? TLSError ?? .invalidConfiguration("\(error)"))
                return false
            }
        case Stream.PropertyKey.sslSettings:
            do {
                guard let settings = Self.dictionary(property) else {
                    throw TLSError.invalidConfiguration("the SSL settings must be a dictionary with String keys")
                }
                return requestTLSAfterOpening(
                    try TLSConfiguration(sslSettings: settings), level: .negotiatedSSL, sslSettings: settings)
            } catch {
                refuseTLSAfterOpening(error as? TLSError ?? .invalidConfiguration("\(error)"))
                return false
            }
        default:
            return false
        }
    }

    private func setPropertyBeforeOpening(_ property: AnyObject?, forKey key: Stream.PropertyKey) -> Bool {
        // A TLS request that cannot be honoured returns false and is remembered: `open()` then
        // fails both streams with it, before any byte moves (code that ignores the result must
        // not end up talking in the clear).
        switch key {
        case .socketSecurityLevelKey:
            guard let level = TLSConfiguration.securityLevel(property) else {
                state.withLock {
                    $0.refusedTLS = .invalidConfiguration(
                        "the security level must be a StreamSocketSecurityLevel or its raw value")
                }
                return false
            }
            do {
                try TLSConfiguration.check(level: level)
            } catch {
                state.withLock { $0.refusedTLS = error as? TLSError ?? .invalidConfiguration("\(error)") }
                return false
            }
            return state.withLock { state in
                state.securityLevel = level
                // A request that can be honoured replaces one that could not (a level alone
                // means TLS with the defaults: the chain and name validated); none turns it
                // off on purpose.
                state.refusedTLS = nil
                if level == .none {
                    state.tls = nil
                } else if state.tls == nil {
                    state.tls = (try? state.sslSettings.map { try TLSConfiguration(sslSettings: $0) }) ?? .client
                }
                return true
            }
        case Stream.PropertyKey.sslSettings:
            do {
                guard let settings = Self.dictionary(property) else {
                    throw TLSError.invalidConfiguration("the SSL settings must be a dictionary with String keys")
                }
                let configuration = try TLSConfiguration(sslSettings: settings)
                state.withLock { state in
                    state.sslSettings = settings
                    state.tls = configuration
                    state.refusedTLS = nil
                    if state.securityLevel == .none { state.securityLevel = .negotiatedSSL }
                }
                return true
            } catch {
                state.withLock { $0.refusedTLS = error as? TLSError ?? .invalidConfiguration("\(error)") }
                return false
            }
        default:
            return false
        }
    }

    private static func dictionary(_ property: AnyObject?) -> [String: Any]? {
        if let swift = property as? [String: Any] { return swift }
        guard let ns = property as? NSDictionary else { return nil }
        var out: [String: Any] = [:]
        for (key, value) in ns {
            guard let name = key as? String ?? (key as? NSString).map({ String(describing: $0) }) else { return nil }
            out[name] = value
        }
        return out
    }
}
