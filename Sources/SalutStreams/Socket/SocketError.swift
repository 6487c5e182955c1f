import Foundation
import Glibc

/// Why a stream to a host failed, as `streamError` reports it.
///
/// Compare ``code`` to act on the kind of failure; `description` is a readable one-line message,
/// and ``tlsError`` holds the TLS layer's error when TLS is what failed.
/// `SocketStreamError` is a struct, not an enum, so that new kinds can be added in a minor release
/// without breaking code that switches over ``code`` (such a `switch` needs a `default`).
public struct SocketStreamError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The kind of a ``SocketStreamError``. Compare it with the static members; new kinds may be
    /// added in minor releases.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private let name: String
        private init(_ name: String) { self.name = name }
        /// The code's name, as written in Swift (for example `connectionRefused`).
        public var description: String { name }

        /// The host name did not resolve to any address.
        public static let nameNotFound = Code("nameNotFound")
        /// Every address refused the connection.
        public static let connectionRefused = Code("connectionRefused")
        /// No route to the host or its network.
        public static let unreachable = Code("unreachable")
        /// No address answered within the connect timeout.
        public static let timedOut = Code("timedOut")
        /// The host or port is malformed.
        public static let invalidAddress = Code("invalidAddress")
        /// The connection broke after it was made.
        public static let connectionLost = Code("connectionLost")
        /// Another system error (see ``SocketStreamError/systemCall`` and ``SocketStreamError/errorNumber``).
        public static let system = Code("system")
        /// TLS could not be set up, or the peer was not trusted (see ``SocketStreamError/tlsError``).
        public static let tls = Code("tls")
        /// The operation was cancelled.
        public static let cancelled = Code("cancelled")
        /// The peer went past one of the ``ConnectionLimits``.
        public static let limitExceeded = Code("limitExceeded")
    }

    private enum Details: Hashable, Sendable {
        case nameNotFound(String, detail: String)
        case connectionRefused(String)
        case unreachable(String)
        case timedOut(String)
        case invalidAddress(String)
        case connectionLost(String)
        case system(call: String, errno: Int32, message: String)
        case tls(TLSError)
        case cancelled
        case limitExceeded(String)
    }

    private let details: Details
    private init(_ details: Details) { self.details = details }

    // MARK: Making errors

    /// The host name did not resolve to any address; `detail` is the resolver's reason.
    public static func nameNotFound(_ host: String, detail: String) -> SocketStreamError {
        .init(.nameNotFound(host, detail: detail))
    }
    /// Every address of `target` refused the connection (nothing listens on the port).
    public static func connectionRefused(_ target: String) -> SocketStreamError { .init(.connectionRefused(target)) }
    /// No route to `target` or its network.
    public static func unreachable(_ target: String) -> SocketStreamError { .init(.unreachable(target)) }
    /// No address of `target` answered within the connect timeout.
    public static func timedOut(_ target: String) -> SocketStreamError { .init(.timedOut(target)) }
    /// The host or port is malformed; the text says which and how.
    public static func invalidAddress(_ text: String) -> SocketStreamError { .init(.invalidAddress(text)) }
    /// The connection broke after it was made (reset by the peer, for example).
    public static func connectionLost(_ detail: String) -> SocketStreamError { .init(.connectionLost(detail)) }
    /// Any other system error, with the call that failed, its errno and text.
    public static func system(call: String, errno: Int32, message: String) -> SocketStreamError {
        .init(.system(call: call, errno: errno, message: message))
    }
    /// TLS could not be set up, or the peer was not trusted.
    public static func tls(_ error: TLSError) -> SocketStreamError { .init(.tls(error)) }
    /// The operation was cancelled (both streams closed while connecting, for example).
    public static let cancelled = SocketStreamError(.cancelled)
    /// The peer went past one of the ``ConnectionLimits`` (too slow to finish its handshake or
    /// send its first byte, silent for too long, or crowded out by other connections setting
    /// up); the text says which.
    public static func limitExceeded(_ detail: String) -> SocketStreamError { .init(.limitExceeded(detail)) }

    /// Describes `errno` from a failed connect to `target`.
    static func connect(errno code: Int32, target: String) -> SocketStreamError {
        switch code {
        // reset while connecting: the listener went away
        case ECONNREFUSED, ECONNRESET: return .connectionRefused(target)
        case ENETUNREACH, EHOSTUNREACH, EADDRNOTAVAIL: return .unreachable(target)
        case ETIMEDOUT: return .timedOut(target)
        default: return .system(call: "connect", errno: code, message: String(cString: strerror(code)))
        }
    }

    // MARK: Reading errors

    /// The kind of failure.
    public var code: Code {
        switch details {
        case .nameNotFound: .nameNotFound
        case .connectionRefused: .connectionRefused
        case .unreachable: .unreachable
        case .timedOut: .timedOut
        case .invalidAddress: .invalidAddress
        case .connectionLost: .connectionLost
        case .system: .system
        case .tls: .tls
        case .cancelled: .cancelled
        case .limitExceeded: .limitExceeded
        }
    }

    /// What the error is about: the host name that did not resolve, or the target (`host:port`
    /// or address) that refused, was unreachable or did not answer.
    public var subject: String? {
        switch details {
        case .nameNotFound(let host, _): host
        case .connectionRefused(let target), .unreachable(let target), .timedOut(let target): target
        default: nil
        }
    }

    /// More about the failure, when known: the resolver's reason, what is wrong with an address,
    /// how a connection was lost, the system's message, or which limit was exceeded.
    public var reason: String? {
        switch details {
        case .nameNotFound(_, let detail): detail
        case .invalidAddress(let text), .connectionLost(let text), .limitExceeded(let text): text
        case .system(_, _, let message): message
        case .tls(let error): error.reason
        default: nil
        }
    }

    /// The TLS layer's error, when TLS is what failed (``Code-swift.struct/tls``).
    public var tlsError: TLSError? {
        if case .tls(let error) = details { return error }
        return nil
    }

    /// The system call that failed (``Code-swift.struct/system``), for example `"bind"`.
    public var systemCall: String? {
        if case .system(let call, _, _) = details { return call }
        return nil
    }

    /// The `errno` of the system call that failed (``Code-swift.struct/system``).
    public var errorNumber: Int32? {
        if case .system(_, let number, _) = details { return number }
        return nil
    }

    /// A one-line message for people.
    public var description: String {
        switch details {
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

/// `localizedDescription` (and so `CFReadStreamCopyError(_:)`'s text, Foundation's alerts and
/// logs) reads as `description`, not as "The operation could not be completed".
extension SocketStreamError: LocalizedError {
    public var errorDescription: String? { description }
}
