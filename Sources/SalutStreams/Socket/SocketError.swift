import Foundation
import Glibc

/// Why a stream to a host failed, as `streamError` reports it.
public enum SocketStreamError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The host name did not resolve to any address.
    case nameNotFound(String, detail: String)
    /// Every address refused the connection (nothing listens on the port).
    case connectionRefused(String)
    /// No route to the host or its network.
    case unreachable(String)
    /// No address answered within the connect timeout.
    case timedOut(String)
    /// The host or port is malformed.
    case invalidAddress(String)
    /// The connection broke after it was made (reset by the peer, for example).
    case connectionLost(String)
    /// Any other system error, with its errno and text.
    case system(call: String, errno: Int32, message: String)
    /// TLS could not be set up, or the peer was not trusted.
    case tls(TLSError)
    /// The operation was cancelled (both streams closed while connecting, for example).
    case cancelled
    /// The peer went past one of the ``ConnectionLimits`` (too slow to finish its handshake or
    /// send its first byte, silent for too long, or crowded out by other connections setting
    /// up); the text says which.
    case limitExceeded(String)

    /// Describes `errno` from a failed connect to `target`.
    static func connect(errno code: Int32, target: String) -> SocketStreamError {
        switch code {
        case ECONNREFUSED, ECONNRESET: return .connectionRefused(target)   // reset while connecting: the listener went away
        case ENETUNREACH, EHOSTUNREACH, EADDRNOTAVAIL: return .unreachable(target)
        case ETIMEDOUT: return .timedOut(target)
        default: return .system(call: "connect", errno: code, message: String(cString: strerror(code)))
        }
    }

    public var description: String {
        switch self {
        case .nameNotFound(let host, let detail): return "cannot resolve \"\(host)\": \(detail)"
        case .connectionRefused(let target): return "connection to \(target) refused"
        case .unreachable(let target): return "\(target) is unreachable"
        case .timedOut(let target): return "connecting to \(target) timed out"
        case .invalidAddress(let text): return "invalid address: \(text)"
        case .connectionLost(let detail): return "connection lost: \(detail)"
        case .system(let call, let code, let message): return "\(call) failed: \(message) (errno \(code))"
        case .tls(let error): return error.description
        case .cancelled: return "cancelled"
        case .limitExceeded(let detail): return "connection cut: \(detail)"
        }
    }
}
