import Foundation
import SalutStreams

/// Why a session task or one of its operations failed.
public enum PeerSessionError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The task was cancelled.
    case cancelled
    /// A deadline passed: which one (`"read"`, `"write"`, `"idle"`, `"resource"`, `"connect"`).
    case timedOut(String)
    /// The connection could not be made or broke, with the streams layer's reason.
    case connection(SocketStreamError)
    /// The session was invalidated before the task was created.
    case sessionInvalidated
    /// The operation cannot run now: the side is closed, the streams were captured, or the task
    /// has completed.
    case notAllowed(String)
    /// Resume data that cannot be read.
    case invalidResumeData(String)
    /// A transfer's own work failed, with its description.
    case transferFailed(String)

    public var description: String {
        switch self {
        case .cancelled: return "cancelled"
        case .timedOut(let what): return "\(what) timed out"
        case .connection(let error): return error.description
        case .sessionInvalidated: return "the session was invalidated"
        case .notAllowed(let why): return why
        case .invalidResumeData(let why): return "invalid resume data: \(why)"
        case .transferFailed(let why): return "transfer failed: \(why)"
        }
    }

    /// Wraps any error from the layers below.
    static func wrap(_ error: any Error) -> PeerSessionError {
        if let own = error as? PeerSessionError { return own }
        if let socket = error as? SocketStreamError { return socket == .cancelled ? .cancelled : .connection(socket) }
        if let failure = error as? StreamFailure { return .notAllowed(failure.description) }
        return .transferFailed("\(error)")
    }
}
