import Foundation

/// What went wrong in a transfer, with the exit code the `peerxfer` tool reports for it.
///
/// A struct around a private code, so that new kinds of failure can be added without breaking
/// callers who switch over the public ones.
public struct PeerTransferError: Error, Sendable, Hashable, CustomStringConvertible {
    private enum Code: Hashable, Sendable {
        case usage, runtime, peerNotFound, declined, trust, protocolViolation, unsafePath, limit, noSpace, fileFailed
        case declinedByHook, declinedByPolicy, noAnswer, cannotAsk, cancelled, interrupted
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
    /// The person at the receiver declined the transfer or part of it.
    public static func declined(_ message: String) -> PeerTransferError { .init(.declined, message) }
    /// The receiver's accept hook (`serve --hook`) declined the transfer or part of it.
    public static func declinedByHook(_ message: String) -> PeerTransferError { .init(.declinedByHook, message) }
    /// The receiver's policy declined the sender without asking anyone (`serve --accept known`
    /// and a key not trusted there).
    public static func declinedByPolicy(_ message: String) -> PeerTransferError { .init(.declinedByPolicy, message) }
    /// No one answered the offer in time (the person at the receiver, or its hook), or the
    /// receiver stopped before it was answered: nobody said no.
    public static func noAnswer(_ message: String) -> PeerTransferError { .init(.noAnswer, message) }
    /// The receiver has no way to ask anyone (`--accept ask` without a terminal or a hook, a
    /// hook that cannot start): the offer was not put to anybody.
    public static func cannotAsk(_ message: String) -> PeerTransferError { .init(.cannotAsk, message) }
    /// The send was cancelled: by the person at the sender (`peerxfer cancel`), or, as the
    /// receiver reports it, by its sender (what it received of that send was removed).
    public static func cancelled(_ message: String) -> PeerTransferError { .init(.cancelled, message) }
    /// The send stopped before its end without being cancelled (Ctrl-C, a daemon stopping):
    /// what the receiver has of it is kept, and the same send resumes from there.
    public static func interrupted(_ message: String) -> PeerTransferError { .init(.interrupted, message) }
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
    /// True when someone or something at the receiver said no: ``declined(_:)``,
    /// ``declinedByHook(_:)`` or ``declinedByPolicy(_:)`` (not ``noAnswer(_:)`` or
    /// ``cannotAsk(_:)``: nobody said no there).
    public var isDeclined: Bool { [.declined, .declinedByHook, .declinedByPolicy].contains(code) }
    /// True when the same send, tried again unchanged, gets the same outcome: a person or a
    /// hook said no, the receiver has no way to ask, or the arguments are bad. A policy
    /// refusal is not final (the receiver may come to trust the key), nor is an offer no one
    /// answered (someone may be there next time).
    public var isFinal: Bool { [.declined, .declinedByHook, .cannotAsk, .usage].contains(code) }
    /// True for ``unsafePath(_:)``: something about this path (or what was planted under it)
    /// keeps it from being stored; other paths are not concerned.
    public var isUnsafePath: Bool { code == .unsafePath }
    /// True when the failure concerns one file only (``unsafePath(_:)``, or ``fileFailed(_:)``
    /// for a file that cannot be opened or written where it goes): that file fails, and the
    /// transfer goes on with the others. Anything else (no space, a broken connection, the
    /// process out of descriptors) ends the transfer.
    public var failsOneFileOnly: Bool { code == .unsafePath || code == .fileFailed }

    /// The tool's exit code: 2 usage, 3 peer not found, 5 declined by a person, 6 trust,
    /// 7 no answer, 8 the receiver cannot ask, 9 declined by the receiver's hook, 10 declined by
    /// the receiver's policy, 1 anything else.
    public var exitCode: Int32 {
        switch code {
        case .usage: return 2
        case .peerNotFound: return 3
        case .declined: return 5
        case .trust: return 6
        case .noAnswer: return 7
        case .cannotAsk: return 8
        case .declinedByHook: return 9
        case .declinedByPolicy: return 10
        default: return 1
        }
    }

    /// How the transfer ended, as `peerxfer status` and the JSON name it: `declined`,
    /// `declined-by-hook`, `declined-by-policy`, `no-answer`, `cannot-ask`, `cancelled`,
    /// `stopped` (by the sender, to resume later), or `failed`.
    public var outcome: String {
        switch code {
        case .declined: return "declined"
        case .declinedByHook: return "declined-by-hook"
        case .declinedByPolicy: return "declined-by-policy"
        case .noAnswer: return "no-answer"
        case .cannotAsk: return "cannot-ask"
        case .cancelled: return "cancelled"
        case .interrupted: return "stopped"
        default: return "failed"
        }
    }

    public var description: String { message }

    /// The code a failure frame carries on the wire.
    var wireCode: String {
        switch code {
        case .usage, .runtime, .fileFailed: return "internal"
        case .peerNotFound: return "not-found"
        case .declined: return "declined"
        case .declinedByHook: return "declined-hook"
        case .declinedByPolicy: return "declined-policy"
        case .noAnswer: return "no-answer"
        case .cannotAsk: return "cannot-ask"
        case .trust: return "trust"
        case .protocolViolation: return "protocol"
        case .unsafePath: return "path"
        case .limit: return "limit"
        case .noSpace: return "space"
        case .cancelled: return SendStop.cancelled.wireCode
        case .interrupted: return SendStop.interrupted.wireCode
        }
    }

    /// The error a failure frame from the peer stands for.
    static func fromWire(code: String, message: String) -> PeerTransferError {
        let text = "the receiver says: \(Terminal.escapePeerText(message))"
        switch code {
        case "declined": return .declined(text)
        case "declined-hook": return .declinedByHook(text)
        case "declined-policy": return .declinedByPolicy(text)
        case "no-answer": return .noAnswer(text)
        case "cannot-ask": return .cannotAsk(text)
        case "trust": return .trust(text)
        case "protocol", "version": return .protocolViolation(text)
        case "path": return .unsafePath(text)
        case "limit": return .limit(text)
        case "space": return .noSpace(text)
        case SendStop.cancelled.wireCode: return .cancelled(text)
        case SendStop.interrupted.wireCode: return .interrupted(text)
        default: return .runtime(text)
        }
    }
}
