import Foundation

/// Why a TLS connection could not be set up or broke, as a stream's `streamError` reports it
/// (inside a ``SocketStreamError`` whose ``SocketStreamError/tlsError`` it is).
///
/// Compare ``code`` to act on the kind of failure; `description` is a readable one-line message.
/// `TLSError` is a struct, not an enum, so that new kinds can be added in a minor release without
/// breaking code that switches over ``code`` (such a `switch` needs a `default`).
public struct TLSError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The kind of a ``TLSError``. Compare it with the static members; new kinds may be added in
    /// minor releases.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private let name: String
        private init(_ name: String) { self.name = name }
        /// The code's name, as written in Swift (for example `pinMismatch`).
        public var description: String { name }

        /// The configuration cannot work.
        public static let invalidConfiguration = Code("invalidConfiguration")
        /// A certificate, key or trust file could not be loaded.
        public static let cannotLoad = Code("cannotLoad")
        /// The handshake failed.
        public static let handshakeFailed = Code("handshakeFailed")
        /// The peer's certificate did not validate.
        public static let untrustedPeer = Code("untrustedPeer")
        /// The peer's certificate matched none of the pinned fingerprints.
        public static let pinMismatch = Code("pinMismatch")
        /// The peer sent no certificate where one was required.
        public static let noPeerCertificate = Code("noPeerCertificate")
        /// A trust evaluator rejected the peer.
        public static let rejectedByEvaluator = Code("rejectedByEvaluator")
        /// OpenSSL reported an error after the handshake.
        public static let protocolError = Code("protocolError")
        /// The connection ended without a TLS close_notify.
        public static let closedWithoutCloseNotify = Code("closedWithoutCloseNotify")
        /// A service was to be connected to with its advertised key pinned, but its TXT record
        /// holds no key (no such entry, or not a SHA-256 fingerprint); nothing was connected.
        public static let advertisedKeyMissing = Code("advertisedKeyMissing")
        /// A service advertises another key than the one trusted for it before (trust on
        /// first use); nothing was connected. Another device may be using its name.
        public static let advertisedKeyChanged = Code("advertisedKeyChanged")
    }

    private enum Details: Hashable, Sendable {
        case invalidConfiguration(String)
        case cannotLoad(file: String, reason: String)
        case handshakeFailed(String)
        case untrustedPeer(reason: String)
        case pinMismatch(presented: String, publicKey: String?)
        case noPeerCertificate
        case rejectedByEvaluator
        case protocolError(String)
        case closedWithoutCloseNotify
        case advertisedKeyMissing(service: String, txtKey: String)
        case advertisedKeyChanged(service: String, advertised: String, trusted: String)
    }

    private let details: Details
    private init(_ details: Details) { self.details = details }

    // MARK: Making errors

    /// The configuration cannot work (for example versions out of order, or a server without
    /// a certificate).
    public static func invalidConfiguration(_ why: String) -> TLSError { .init(.invalidConfiguration(why)) }
    /// A certificate, key or trust file could not be loaded.
    public static func cannotLoad(file: String, reason: String) -> TLSError {
        .init(.cannotLoad(file: file, reason: reason))
    }
    /// The handshake failed (protocol versions, ciphers, an alert from the peer, or a peer that
    /// does not speak TLS), with OpenSSL's reason.
    public static func handshakeFailed(_ reason: String) -> TLSError { .init(.handshakeFailed(reason)) }
    /// The peer's certificate did not validate: the chain or the name is wrong. The reason is
    /// OpenSSL's (for example "self-signed certificate" or "hostname mismatch").
    public static func untrustedPeer(reason: String) -> TLSError { .init(.untrustedPeer(reason: reason)) }
    /// The peer's certificate matched none of the pinned fingerprints; `presented` is its
    /// certificate fingerprint (hex SHA-256).
    public static func pinMismatch(presented: String) -> TLSError {
        .init(.pinMismatch(presented: presented, publicKey: nil))
    }
    /// The peer's certificate matched none of the pinned fingerprints: `certificate` is the
    /// SHA-256 of the certificate it presented and `publicKey` that of its public key (what
    /// ``TLSIdentity`` and the Security article tell you to pin), both lower-case hex.
    public static func pinMismatch(certificate: String, publicKey: String) -> TLSError {
        .init(.pinMismatch(presented: certificate, publicKey: publicKey))
    }
    /// The peer sent no certificate where one was required.
    public static let noPeerCertificate = TLSError(.noPeerCertificate)
    /// A trust evaluator (a session delegate, for example) rejected the peer.
    public static let rejectedByEvaluator = TLSError(.rejectedByEvaluator)
    /// OpenSSL reported an error after the handshake.
    public static func protocolError(_ reason: String) -> TLSError { .init(.protocolError(reason)) }
    /// `service` advertises no public-key fingerprint under `txtKey` in its TXT record.
    public static func advertisedKeyMissing(service: String, txtKey: String) -> TLSError {
        .init(.advertisedKeyMissing(service: service, txtKey: txtKey))
    }
    /// `service` advertises the key `advertised` (SHA-256 of its public key, hex) where the key
    /// `trusted` was trusted for it before.
    public static func advertisedKeyChanged(service: String, advertised: String, trusted: String) -> TLSError {
        .init(.advertisedKeyChanged(service: service, advertised: advertised, trusted: trusted))
    }
    /// The peer's TCP connection ended without a TLS close_notify first: the data may have
    /// been cut short (by the peer, or by someone in between), so it is not a clean end.
    public static let closedWithoutCloseNotify = TLSError(.closedWithoutCloseNotify)

    // MARK: Reading errors

    /// The kind of failure.
    public var code: Code {
        switch details {
        case .invalidConfiguration: .invalidConfiguration
        case .cannotLoad: .cannotLoad
        case .handshakeFailed: .handshakeFailed
        case .untrustedPeer: .untrustedPeer
        case .pinMismatch: .pinMismatch
        case .noPeerCertificate: .noPeerCertificate
        case .rejectedByEvaluator: .rejectedByEvaluator
        case .protocolError: .protocolError
        case .closedWithoutCloseNotify: .closedWithoutCloseNotify
        case .advertisedKeyMissing: .advertisedKeyMissing
        case .advertisedKeyChanged: .advertisedKeyChanged
        }
    }

    /// Why, in OpenSSL's or Salut's words, when more is known than the kind: what is wrong with
    /// the configuration, why a file could not be loaded, why the handshake failed or the peer
    /// was not trusted.
    public var reason: String? {
        switch details {
        case .invalidConfiguration(let why): why
        case .cannotLoad(_, let reason): reason
        case .handshakeFailed(let reason), .untrustedPeer(let reason), .protocolError(let reason): reason
        default: nil
        }
    }

    /// The file that could not be loaded (``Code-swift.struct/cannotLoad``).
    public var file: String? {
        if case .cannotLoad(let file, _) = details { return file }
        return nil
    }

    /// The fingerprint (hex SHA-256 of the certificate) the peer presented, when it matched no
    /// pin (``Code-swift.struct/pinMismatch``): what to pin if the peer is the one you expect.
    public var presentedFingerprint: String? {
        if case .pinMismatch(let presented, _) = details { return presented }
        return nil
    }

    /// The SHA-256 of the public key the peer presented (lower-case hex), when it matched no
    /// pin (``Code-swift.struct/pinMismatch``): the value to pin if the peer is the one you
    /// expect, as ``TLSPeerTrust/publicKeySHA256`` and ``TLSIdentity`` give it.
    public var presentedPublicKeyFingerprint: String? {
        if case .pinMismatch(_, let key) = details { return key }
        return nil
    }

    /// The key a service advertises where another was trusted for it
    /// (``Code-swift.struct/advertisedKeyChanged``): the SHA-256 of its public key, lower-case
    /// hex. Trust it only once its owner confirms the key changed.
    public var advertisedPublicKeyFingerprint: String? {
        if case .advertisedKeyChanged(_, let advertised, _) = details { return advertised }
        return nil
    }

    /// A one-line message for people.
    public var description: String {
        switch details {
        case .invalidConfiguration(let why): return "invalid TLS configuration: \(why)"
        case .cannotLoad(let file, let reason): return "cannot load \(file): \(reason)"
        case .handshakeFailed(let reason): return "TLS handshake failed: \(reason)"
        case .untrustedPeer(let reason): return "TLS peer not trusted: \(reason)"
        case .pinMismatch(let presented, let key?):
            return
                "TLS peer's public key (SHA-256 \(key); certificate SHA-256 \(presented)) matches no pinned fingerprint"
        case .pinMismatch(let presented, nil):
            return "TLS peer certificate (SHA-256 \(presented)) matches no pinned fingerprint"
        case .noPeerCertificate: return "TLS peer presented no certificate"
        case .rejectedByEvaluator: return "TLS peer rejected by the trust evaluator"
        case .protocolError(let reason): return "TLS error: \(reason)"
        case .closedWithoutCloseNotify: return "connection closed without TLS close_notify (the data may be truncated)"
        case .advertisedKeyMissing(let service, let txtKey):
            return
                "\(TerminalText.escaped(service)) advertises no TLS key (no SHA-256 fingerprint under \"\(TerminalText.escaped(txtKey))\" in its TXT record); not connected"
        case .advertisedKeyChanged(let service, let advertised, let trusted):
            return
                "\(TerminalText.escaped(service)) now advertises TLS key \(advertised), not the key \(trusted) trusted for it before: another device may be using its name; not connected (trust the new key only if its owner confirms it changed)"
        }
    }
}

/// `localizedDescription` (and so `CFReadStreamCopyError(_:)`'s text, Foundation's alerts and
/// logs) reads as `description`, not as "The operation could not be completed".
extension TLSError: LocalizedError {
    public var errorDescription: String? { description }
}
