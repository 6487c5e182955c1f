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

/// Making strings from the network safe to print.
public enum Terminal {
    /// `count` and `noun`, in the plural (`plural`, or the noun and an "s") unless there is
    /// one: "1 file", "3 files", "2 entries".
    public static func counted(_ count: Int, _ noun: String, plural: String? = nil) -> String {
        "\(count) \(count == 1 ? noun : plural ?? noun + "s")"
    }

    /// `text` with control characters (C0, DEL, C1), bidirectional marks and overrides,
    /// zero-width characters and line separators replaced by visible escapes, and backslashes doubled (so an escape in the
    /// output always stands for one character), so that a peer's name or path cannot move the
    /// cursor, recolour the terminal, reorder what is shown or pass for another name.
    public static func escape(_ text: String) -> String {
        // Printable ASCII but the backslash is shown as it is (none of the marks below is ASCII).
        if text.utf8.allSatisfy({ $0 >= 0x20 && $0 < 0x7f && $0 != 0x5c }) { return text }
        var out = ""
        out.reserveCapacity(text.utf8.count)
        for scalar in text.unicodeScalars {
            switch scalar.value {
            case 0x00..<0x20, 0x7f, 0x80..<0xa0:
                out += String(format: "\\x%02x", scalar.value)
            case 0x5c:
                // A backslash is doubled, so that a name holding "\x9b" as text never reads
                // the same as one holding the character U+009B.
                out += "\\\\"
            case 0x061c, 0x200b, 0x200e, 0x200f, 0x2028, 0x2029, 0x202a...0x202e, 0x2066...0x2069, 0xfeff:
                // Bidirectional marks and overrides, the zero-width space and byte-order mark, line or paragraph
                // separators: invisible, or able to reorder or split what is shown (the zero-width
                // joiners stay: Persian names and emoji need them).
                out += String(format: "\\u{%04x}", scalar.value)
            default:
                out.unicodeScalars.append(scalar)
            }
        }
        return out
    }
}
