import Foundation

/// How a socket stream secures its connection with TLS (through the system OpenSSL).
///
/// The defaults are the safe ones: TLS 1.2 or newer, the peer's certificate chain validated
/// against the system trust store and matched against the host name that was dialled.
///
/// ```swift
/// var tls = TLSConfiguration.client
/// tls.pinnedSHA256 = ["9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"]
/// ```
public struct TLSConfiguration: Sendable, Hashable {
    /// A TLS protocol version.
    public enum Version: Int, Sendable, Hashable, Comparable, CustomStringConvertible {
        case v1_0 = 0x0301, v1_1 = 0x0302, v1_2 = 0x0303, v1_3 = 0x0304

        public static func < (a: Version, b: Version) -> Bool { a.rawValue < b.rawValue }
        public var description: String {
            switch self {
            case .v1_0: return "TLSv1"
            case .v1_1: return "TLSv1.1"
            case .v1_2: return "TLSv1.2"
            case .v1_3: return "TLSv1.3"
            }
        }

        /// Parses `1.2`, `TLSv1.2`, `tls1.3` and the like; nil for anything else.
        public init?(string: String) {
            let digits = string.lowercased().replacingOccurrences(of: "tlsv", with: "")
                .replacingOccurrences(of: "tls", with: "").replacingOccurrences(of: "_", with: ".")
            switch digits {
            case "1", "1.0": self = .v1_0
            case "1.1": self = .v1_1
            case "1.2": self = .v1_2
            case "1.3": self = .v1_3
            default: return nil
            }
        }
    }

    /// Which certificate authorities a validated chain may end in.
    public enum TrustRoots: Sendable, Hashable {
        /// The system trust store (`/etc/ssl/certs` on Debian).
        case system
        /// Only the PEM certificates in this file.
        case file(String)
    }

    /// Which side of the handshake this end plays.
    public enum Role: Sendable, Hashable {
        case client, server
    }

    /// Client or server. A server needs ``certificateChainFile`` and ``privateKeyFile``.
    public var role: Role
    /// The name the peer's certificate must carry (and the SNI sent by a client). Nil means the
    /// host that was dialled; ignored by servers.
    public var peerName: String?
    /// Validate the peer's certificate chain and name against ``trustRoots``. Ignored when
    /// ``pinnedSHA256`` is not empty (the pin replaces chain validation).
    public var validatesCertificateChain: Bool
    /// The roots a validated chain must end in.
    public var trustRoots: TrustRoots
    /// SHA-256 fingerprints (hex, with or without colons, or base64) of certificates or of
    /// public keys (SubjectPublicKeyInfo) to accept instead of a validated chain. The peer's
    /// leaf certificate must match one of them.
    public var pinnedSHA256: [String]
    /// PEM file with this end's certificate (and any intermediates): the server's identity, or
    /// a client certificate.
    public var certificateChainFile: String?
    /// PEM file with the private key of ``certificateChainFile``.
    public var privateKeyFile: String?
    /// For servers: ask the client for a certificate and evaluate it like a client evaluates a
    /// server's (pins, or a chain ending in ``trustRoots``); connections without one fail.
    public var requiresClientCertificate: Bool
    /// The oldest version to negotiate (TLS 1.2 unless lowered).
    public var minimumVersion: Version
    /// The newest version to negotiate (nil: the newest OpenSSL supports).
    public var maximumVersion: Version?
    /// The TLS 1.3 cipher suites to offer, most wanted first, in OpenSSL's colon-separated
    /// spelling (`"TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384"`); nil keeps OpenSSL's
    /// list, which puts AES-256-GCM first. A server chooses by its own order rather than the
    /// client's (for TLS 1.2 too: see ``tls12CipherSuites``). Names are the five of RFC 8446
    /// (`TLS_AES_128_GCM_SHA256`, `TLS_AES_256_GCM_SHA384`, `TLS_CHACHA20_POLY1305_SHA256`,
    /// `TLS_AES_128_CCM_SHA256`, `TLS_AES_128_CCM_8_SHA256`); any other name is refused by
    /// ``validate()`` with ``TLSError/invalidConfiguration(_:)``, and so fails the connection.
    public var tls13CipherSuites: String?

    /// The TLS 1.2 cipher suites Salut offers and accepts, both as client and server, in
    /// OpenSSL's spelling: ECDHE key exchange (forward secrecy) with AES-GCM or
    /// ChaCha20-Poly1305 only; no CBC suites, no RSA key exchange. A server picks by this
    /// order. (TLS 1.3's suites are all AEAD with forward secrecy.)
    public static let tls12CipherSuites =
        "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:"
        + "ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384:"
        + "ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305"

    /// The TLS 1.3 cipher suites of RFC 8446, as OpenSSL names them.
    static let knownTLS13CipherSuites: Set<String> = [
        "TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256",
        "TLS_AES_128_CCM_SHA256", "TLS_AES_128_CCM_8_SHA256",
    ]

    /// Makes a configuration; see each property for what it means.
    public init(
        role: Role = .client, peerName: String? = nil, validatesCertificateChain: Bool = true,
        trustRoots: TrustRoots = .system, pinnedSHA256: [String] = [],
        certificateChainFile: String? = nil, privateKeyFile: String? = nil,
        requiresClientCertificate: Bool = false,
        minimumVersion: Version = .v1_2, maximumVersion: Version? = nil
    ) {
        self.role = role
        self.peerName = peerName
        self.validatesCertificateChain = validatesCertificateChain
        self.trustRoots = trustRoots
        self.pinnedSHA256 = pinnedSHA256
        self.certificateChainFile = certificateChainFile
        self.privateKeyFile = privateKeyFile
        self.requiresClientCertificate = requiresClientCertificate
        self.minimumVersion = minimumVersion
        self.maximumVersion = maximumVersion
    }

    /// A client that validates the server against the system trust store.
    public static var client: TLSConfiguration { TLSConfiguration() }

    /// A server presenting the certificate chain and key in these PEM files.
    public static func server(certificateChainFile: String, privateKeyFile: String) -> TLSConfiguration {
        TLSConfiguration(role: .server, certificateChainFile: certificateChainFile, privateKeyFile: privateKeyFile)
    }

    /// Checks what can be checked without OpenSSL: versions in order, a server identity present,
    /// pins well-formed.
    /// - Throws: ``TLSError/invalidConfiguration(_:)`` saying what is wrong.
    public func validate() throws {
        if let maximumVersion, maximumVersion < minimumVersion {
            throw TLSError.invalidConfiguration("maximum version \(maximumVersion) is below minimum \(minimumVersion)")
        }
        if role == .server && (certificateChainFile == nil || privateKeyFile == nil) {
            throw TLSError.invalidConfiguration("a TLS server needs a certificate chain file and a private key file")
        }
        if (certificateChainFile == nil) != (privateKeyFile == nil) {
            throw TLSError.invalidConfiguration("a certificate needs its private key, and a key its certificate")
        }
        if let suites = tls13CipherSuites {
            let names = suites.split(separator: ":", omittingEmptySubsequences: false).map(String.init)
            if let unknown = names.first(where: { !Self.knownTLS13CipherSuites.contains($0) }) {
                throw TLSError.invalidConfiguration(
                    "\"\(unknown)\" in the TLS 1.3 cipher suites \"\(suites)\" is not one of \(Self.knownTLS13CipherSuites.sorted().joined(separator: ", ")) (names separated by single colons)"
                )
            }
        }
        for pin in pinnedSHA256 where Fingerprint.decode(pin) == nil {
            throw TLSError.invalidConfiguration(
                "pin \"\(pin)\" is not a SHA-256 fingerprint (64 hex digits or 44 base64 characters)")
        }
    }
}

/// SHA-256 fingerprints as users write them.
enum Fingerprint {
    /// The 32 bytes of a fingerprint written as hex (colons and spaces allowed, any case), as
    /// base64, or as `sha256/<base64>`; nil when it is neither.
    static func decode(_ text: String) -> [UInt8]? {
        var body = text.trimmingCharacters(in: .whitespaces)
        if body.lowercased().hasPrefix("sha256/") { body = String(body.dropFirst(7)) }
        let hex = body.filter { $0 != ":" && $0 != " " }
        // ASCII digits only: `Character.isHexDigit` also takes full-width digits, which no
        // fingerprint holds.
        if let digest = SHA256Digest(hex: hex) { return digest.bytes }
        if let data = Data(base64Encoded: body), data.count == 32 { return [UInt8](data) }
        return nil
    }

    /// Lower-case hex without separators.
    static func hex(_ bytes: [UInt8]) -> String {
        let digits = Array("0123456789abcdef".utf8)
        var text: [UInt8] = []
        text.reserveCapacity(bytes.count * 2)
        for byte in bytes {
            text.append(digits[Int(byte >> 4)])
            text.append(digits[Int(byte & 0xf)])
        }
        return String(decoding: text, as: UTF8.self)
    }
}
