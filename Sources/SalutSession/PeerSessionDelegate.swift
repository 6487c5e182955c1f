import Foundation
import SalutStreams

/// Session-level events. Every method has a default implementation; implement what you need.
/// Calls arrive one at a time on the session's delegate queue.
public protocol PeerSessionDelegate: AnyObject {
    /// The session was invalidated (`finishTasksAndInvalidate()` once its tasks completed, or
    /// `invalidateAndCancel()`); `error` is nil for an explicit invalidation. The session lets
    /// go of its delegate right after this call.
    func peerSession(_ session: PeerSession, didBecomeInvalidWithError error: (any Error)?)

    /// A task's TLS peer needs a trust decision. `challenge.proposedDisposition` is what the
    /// session's trust policy decided; call `completionHandler` (once, from any thread) with
    /// `.useCredential` to trust the peer, `.performDefaultHandling` to follow the policy, or
    /// `.cancelAuthenticationChallenge` to refuse. The default follows the policy.
    func peerSession(
        _ session: PeerSession, task: PeerSessionTask, didReceive challenge: PeerTrustChallenge,
        completionHandler: @escaping @Sendable (PeerTrustChallenge.Disposition) -> Void)
}

/// Task events, for a session delegate that also wants them.
public protocol PeerSessionTaskDelegate: PeerSessionDelegate {
    /// The task's metrics, delivered just before `didCompleteWithError`.
    func peerSession(_ session: PeerSession, task: PeerSessionTask, didFinishCollecting metrics: PeerTaskMetrics)
    /// The task completed: the last call a task causes. `error` is nil on success.
    func peerSession(_ session: PeerSession, task: PeerSessionTask, didCompleteWithError error: (any Error)?)
}

/// Stream task events.
public protocol PeerSessionStreamDelegate: PeerSessionTaskDelegate {
    /// The peer finished sending: a read reached the end of the data.
    func peerSession(_ session: PeerSession, readClosedFor streamTask: PeerStreamTask)
    /// The write side closed: `closeWrite()` took effect, or the peer stopped reading.
    func peerSession(_ session: PeerSession, writeClosedFor streamTask: PeerStreamTask)
    /// `captureStreams()` finished: the task's connection is now these (open) streams, and the
    /// task completes.
    func peerSession(
        _ session: PeerSession, streamTask: PeerStreamTask, didBecome inputStream: InputStream,
        outputStream: OutputStream)
}

// Default implementations: each does nothing, except the trust challenge, which follows the
// session's trust policy (`.performDefaultHandling`).
extension PeerSessionDelegate {
    public func peerSession(_ session: PeerSession, didBecomeInvalidWithError error: (any Error)?) {}
    public func peerSession(
        _ session: PeerSession, task: PeerSessionTask, didReceive challenge: PeerTrustChallenge,
        completionHandler: @escaping @Sendable (PeerTrustChallenge.Disposition) -> Void
    ) {
        completionHandler(.performDefaultHandling)
    }
}

extension PeerSessionTaskDelegate {
    public func peerSession(_ session: PeerSession, task: PeerSessionTask, didFinishCollecting metrics: PeerTaskMetrics)
    {}
    public func peerSession(_ session: PeerSession, task: PeerSessionTask, didCompleteWithError error: (any Error)?) {}
}

extension PeerSessionStreamDelegate {
    public func peerSession(_ session: PeerSession, readClosedFor streamTask: PeerStreamTask) {}
    public func peerSession(_ session: PeerSession, writeClosedFor streamTask: PeerStreamTask) {}
    public func peerSession(
        _ session: PeerSession, streamTask: PeerStreamTask, didBecome inputStream: InputStream,
        outputStream: OutputStream
    ) {}
}

/// A TLS trust decision put to the session delegate.
public struct PeerTrustChallenge: Sendable {
    /// What the delegate may answer.
    public enum Disposition: Sendable, Equatable {
        /// Trust the peer.
        case useCredential
        /// Do what the session's trust policy decided (``proposedDisposition``).
        case performDefaultHandling
        /// Refuse the peer: the TLS start fails.
        case cancelAuthenticationChallenge
    }

    /// The host (or service) the task connected to.
    public var host: String
    /// The port the task connected to (0 for a service, whose port comes from resolving it).
    public var port: Int
    /// What the peer presented: fingerprints, subject, TLS version and cipher, and, when the
    /// policy refuses it, why.
    public var peerTrust: TLSPeerTrust
    /// The policy's decision: `.useCredential` when it trusts the peer, else
    /// `.cancelAuthenticationChallenge`.
    public var proposedDisposition: Disposition
}
