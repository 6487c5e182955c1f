import Foundation
import SalutStreams

/// Why a session task or one of its operations failed.
///
/// Compare ``code`` to act on the kind of failure; `description` is a readable one-line message,
/// and ``connectionError`` holds the streams layer's error when the connection is what failed.
/// `PeerSessionError` is a struct, not an enum, so that new kinds can be added in a minor release
/// without breaking code that switches over ``code`` (such a `switch` needs a `default`).
public struct PeerSessionError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The kind of a ``PeerSessionError``. Compare it with the static members; new kinds may be
    /// added in minor releases.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private let name: String
        private init(_ name: String) { self.name = name }
        /// The code's name, as written in Swift (for example `timedOut`).
        public var description: String { name }

        /// The task was cancelled.
        public static let cancelled = Code("cancelled")
        /// A deadline passed (see ``PeerSessionError/deadline``).
        public static let timedOut = Code("timedOut")
        /// The connection could not be made or broke (see ``PeerSessionError/connectionError``).
        public static let connection = Code("connection")
        /// The session was invalidated before the task was created.
        public static let sessionInvalidated = Code("sessionInvalidated")
        /// The operation cannot run now.
        public static let notAllowed = Code("notAllowed")
        /// Resume data that cannot be read.
        public static let invalidResumeData = Code("invalidResumeData")
        /// A transfer's own work failed.
        public static let transferFailed = Code("transferFailed")
        /// Not a failure, and not a delivery: a background upload was handed to the process
        /// that runs its session, which reports the delivery (``PeerUploadTask/isQueuedElsewhere``).
        public static let queuedWithRunner = Code("queuedWithRunner")
    }

    private enum Details: Hashable, Sendable {
        case cancelled
        case timedOut(String)
        case connection(SocketStreamError)
        case sessionInvalidated
        case notAllowed(String)
        case invalidResumeData(String)
        case transferFailed(String)
        case queuedWithRunner
    }

    private let details: Details
    /// The error of the layer that failed, for ``Code-swift.struct/transferFailed`` (an upload
    /// protocol's own error, say): what `NSUnderlyingErrorKey` holds in a `URLError`. It takes no
    /// part in equality: two errors are equal when their code and details are.
    public let underlyingError: (any Error)?
    private init(_ details: Details, underlying: (any Error)? = nil) {
        self.details = details
        self.underlyingError = underlying
    }

    public static func == (a: PeerSessionError, b: PeerSessionError) -> Bool { a.details == b.details }
    public func hash(into hasher: inout Hasher) { hasher.combine(details) }

    // MARK: Making errors

    /// The task was cancelled.
    public static let cancelled = PeerSessionError(.cancelled)
    /// A deadline passed: which one (`"read"`, `"write"`, `"idle"`, `"resource"`, `"connect"`).
    public static func timedOut(_ deadline: String) -> PeerSessionError { .init(.timedOut(deadline)) }
    /// The connection could not be made or broke, with the streams layer's reason.
    public static func connection(_ error: SocketStreamError) -> PeerSessionError { .init(.connection(error)) }
    /// The session was invalidated before the task was created.
    public static let sessionInvalidated = PeerSessionError(.sessionInvalidated)
    /// The operation cannot run now: the side is closed, the streams were captured, or the task
    /// has completed.
    public static func notAllowed(_ why: String) -> PeerSessionError { .init(.notAllowed(why)) }
    /// Resume data that cannot be read.
    public static func invalidResumeData(_ why: String) -> PeerSessionError { .init(.invalidResumeData(why)) }
    /// A transfer's own work failed, with its description.
    public static func transferFailed(_ why: String) -> PeerSessionError { .init(.transferFailed(why)) }
    /// A background upload task of a process that only queues completes with this: its record
    /// is written for the process that runs the session, which delivers it; nothing was sent
    /// yet, and this process hears no more of it.
    public static let queuedWithRunner = PeerSessionError(.queuedWithRunner)
    /// A transfer's own work failed with `underlying` (kept as ``underlyingError``).
    static func transferFailed(_ why: String, underlying: (any Error)?) -> PeerSessionError {
        .init(.transferFailed(why), underlying: underlying)
    }

    // MARK: Reading errors

    /// The kind of failure.
    public var code: Code {
        switch details {
        case .cancelled: .cancelled
        case .timedOut: .timedOut
        case .connection: .connection
        case .sessionInvalidated: .sessionInvalidated
        case .notAllowed: .notAllowed
        case .invalidResumeData: .invalidResumeData
        case .transferFailed: .transferFailed
        case .queuedWithRunner: .queuedWithRunner
        }
    }

    /// Which deadline passed (``Code-swift.struct/timedOut``): `"read"`, `"write"`, `"idle"`,
    /// `"resource"` or `"connect"`.
    public var deadline: String? {
        if case .timedOut(let which) = details { return which }
        return nil
    }

    /// The streams layer's error, when the connection is what failed
    /// (``Code-swift.struct/connection``).
    public var connectionError: SocketStreamError? {
        if case .connection(let error) = details { return error }
        return nil
    }

    /// Why the operation was not allowed, the resume data was refused or the transfer failed.
    public var reason: String? {
        switch details {
        case .notAllowed(let why), .invalidResumeData(let why), .transferFailed(let why): why
        default: nil
        }
    }

    /// A one-line message for people.
    public var description: String {
        switch details {
        case .cancelled: return "cancelled"
        case .timedOut(let what): return "\(what) timed out"
        case .connection(let error): return error.description
        case .sessionInvalidated: return "the session was invalidated"
        case .notAllowed(let why): return why
        case .invalidResumeData(let why): return "invalid resume data: \(why)"
        case .transferFailed(let why): return "transfer failed: \(why)"
        case .queuedWithRunner:
            return "queued for the process that runs the background session (not sent yet: that process delivers it)"
        }
    }

    /// Wraps any error from the layers below.
    static func wrap(_ error: any Error) -> PeerSessionError {
        if let own = error as? PeerSessionError { return own }
        if let socket = error as? SocketStreamError { return socket == .cancelled ? .cancelled : .connection(socket) }
        if let failure = error as? StreamFailure { return .notAllowed(failure.description) }
        return PeerSessionError(.transferFailed("\(error)"), underlying: error)
    }
}
