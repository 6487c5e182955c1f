import Foundation

/// Why a TLS connection could not be set up or broke, as a stream's `streamError` reports it
/// (wrapped in ``SocketStreamError/tls(_:)``).
public enum TLSError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The configuration cannot work (for example versions out of order, or a server without
    /// a certificate).
    case invalidConfiguration(String)
    /// A certificate, key or trust file could not be loaded.
    case cannotLoad(file: String, reason: String)
    /// The handshake failed (protocol versions, ciphers, an alert from the peer, or a peer that
    /// does not speak TLS), with OpenSSL's reason.
    case handshakeFailed(String)
    /// The peer's certificate did not validate: the chain or the name is wrong. The reason is
    /// OpenSSL's (for example "self-signed certificate" or "hostname mismatch").
    case untrustedPeer(reason: String)
    /// The peer's certificate matched none of the pinned fingerprints; `presented` is its
    /// certificate fingerprint (hex SHA-256).
    case pinMismatch(presented: String)
    /// The peer sent no certificate where one was required.
    case noPeerCertificate
    /// A trust evaluator (a session delegate, for example) rejected the peer.
    case rejectedByEvaluator
    /// OpenSSL reported an error after the handshake.
    case protocolError(String)
    /// The peer's TCP connection ended without a TLS close_notify first: the data may have
    /// been cut short (by the peer, or by someone in between), so it is not a clean end.
    case closedWithoutCloseNotify

    public var description: String {
        switch self {
        case .invalidConfiguration(let why): return "invalid TLS configuration: \(why)"
        case .cannotLoad(let file, let reason): return "cannot load \(file): \(reason)"
        case .handshakeFailed(let reason): return "TLS handshake failed: \(reason)"
        case .untrustedPeer(let reason): return "TLS peer not trusted: \(reason)"
        case .pinMismatch(let presented): return "TLS peer certificate (SHA-256 \(presented)) matches no pinned fingerprint"
        case .noPeerCertificate: return "TLS peer presented no certificate"
        case .rejectedByEvaluator: return "TLS peer rejected by the trust evaluator"
        case .protocolError(let reason): return "TLS error: \(reason)"
        case .closedWithoutCloseNotify: return "connection closed without TLS close_notify (the data may be truncated)"
        }
    }
}
