import Foundation

/// What went wrong in a transfer, with the exit code the `peerxfer` tool reports for it.
///
/// A struct around a private code, so that new kinds of failure can be added without breaking
/// callers who switch over the public ones.
public struct PeerTransferError: Error, Sendable, Hashable, CustomStringConvertible {
    private enum Code: Hashable, Sendable {
        case usage, runtime, peerNotFound, declined, trust, protocolViolation, unsafePath, limit, noSpace, fileFailed
    }

    private let code: Code
    /// What happened, for a person; network strings in it are escaped.
    public let message: String

    private init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    /// Bad arguments: a path that does not exist, an option out of range.
    public static func usage(_ message: String) -> PeerTransferError { .init(.usage, message) }
    /// A failure of the machine or the network (I/O error, connection lost).
    public static func runtime(_ message: String) -> PeerTransferError { .init(.runtime, message) }
    /// The named peer was not found in time.
    public static func peerNotFound(_ message: String) -> PeerTransferError { .init(.peerNotFound, message) }
    /// The receiver declined the transfer or part of it.
    public static func declined(_ message: String) -> PeerTransferError { .init(.declined, message) }
    /// A key did not match its pin, or the receiver does not know the sender.
    public static func trust(_ message: String) -> PeerTransferError { .init(.trust, message) }
    /// The peer broke the protocol (bad frame, out-of-order message, unknown version).
    public static func protocolViolation(_ message: String) -> PeerTransferError { .init(.protocolViolation, message) }
    /// A path in a manifest that would leave the inbox, or cannot be stored.
    public static func unsafePath(_ message: String) -> PeerTransferError { .init(.unsafePath, message) }
    /// A manifest or frame over the protocol's limits.
    public static func limit(_ message: String) -> PeerTransferError { .init(.limit, message) }
    /// Not enough free space for what was offered.
    public static func noSpace(_ message: String) -> PeerTransferError { .init(.noSpace, message) }
    /// One or more files did not arrive verified.
    public static func fileFailed(_ message: String) -> PeerTransferError { .init(.fileFailed, message) }

    /// True for ``trust(_:)`` failures.
    public var isTrustFailure: Bool { code == .trust }
    /// True for ``declined(_:)``.
    public var isDeclined: Bool { code == .declined }
    /// True for ``unsafePath(_:)``: something about this path (or what was planted under it)
    /// keeps it from being stored; other paths are not concerned.
    public var isUnsafePath: Bool { code == .unsafePath }
    /// True when the failure concerns one file only (``unsafePath(_:)``, or ``fileFailed(_:)``
    /// for a file that cannot be opened or written where it goes): that file fails, and the
    /// transfer goes on with the others. Anything else (no space, a broken connection, the
    /// process out of descriptors) ends the transfer.
    public var failsOneFileOnly: Bool { code == .unsafePath || code == .fileFailed }

    /// The tool's exit code: 2 usage, 3 peer not found, 5 declined, 6 trust, 1 anything else.
    public var exitCode: Int32 {
        switch code {
        case .usage: return 2
        case .peerNotFound: return 3
        case .declined: return 5
        case .trust: return 6
        default: return 1
        }
    }

    public var description: String { message }

    /// The code a failure frame carries on the wire.
    var wireCode: String {
        switch code {
        case .usage, .runtime, .fileFailed: return "internal"
        case .peerNotFound: return "not-found"
        case .declined: return "declined"
        case .trust: return "trust"
        case .protocolViolation: return "protocol"
        case .unsafePath: return "path"
        case .limit: return "limit"
        case .noSpace: return "space"
        }
    }

    /// The error a failure frame from the peer stands for.
    static func fromWire(code: String, message: String) -> PeerTransferError {
        let text = "the receiver says: \(Terminal.escape(message))"
        switch code {
        case "declined": return .declined(text)
        case "trust": return .trust(text)
        case "protocol", "version": return .protocolViolation(text)
        case "path": return .unsafePath(text)
        case "limit": return .limit(text)
        case "space": return .noSpace(text)
        default: return .runtime(text)
        }
    }
}
