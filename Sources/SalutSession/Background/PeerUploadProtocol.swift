import Foundation
import SalutStreams
import SalutDiscovery

/// What a background upload sends.
public enum PeerUploadBody: @unchecked Sendable {
    // @unchecked: a stream body is read by one attempt at a time, on the attempt's task only.

    /// A file (or, for protocols that send trees, a folder), read at each attempt.
    case file(URL)
    /// Bytes kept in the session's state folder until the task ends.
    case data(Data)
    /// A stream read once: a retry or a relaunch asks the delegate for a fresh one
    /// (``PeerSessionUploadDelegate/peerSession(_:task:needNewBodyStream:)``).
    case stream(InputStream)
}

/// How a background session delivers a body to a peer: the application protocol on the wire
/// (peerxfer's, for example). The session finds the service, waits, retries and persists; the
/// protocol connects and transfers.
public protocol PeerUploadProtocol: Sendable {
    /// Delivers `body` to `service` (visible and resolved just now), resuming from
    /// `context.checkpoint` when it can. Return only once the peer has the whole body.
    /// - Throws: anything; ``isRetryable(_:)`` decides whether the session tries again.
    func upload(_ body: PeerUploadBody, to service: ResolvedService, context: PeerUploadContext) async throws

    /// Whether an attempt that threw `error` may succeed later (a lost connection, a peer that
    /// went away). The default says yes to everything but cancellation.
    func isRetryable(_ error: any Error) -> Bool
}

extension PeerUploadProtocol {
    public func isRetryable(_ error: any Error) -> Bool {
        !(error is CancellationError) && (error as? PeerSessionError) != .cancelled
    }
}

/// What an upload attempt works with.
public final class PeerUploadContext: @unchecked Sendable {
    // @unchecked: `saved` is guarded by `lock`; the task is thread-safe.

    /// 1 for the first attempt, then 2, 3…
    public let attempt: Int
    /// What an earlier attempt saved (nil for the first).
    public let checkpoint: Data?
    /// The task's id, stable across relaunches (``PeerUploadTask/persistentIdentifier``): to
    /// tell the application's own records of this upload apart from another's.
    public let persistentIdentifier: String
    private weak var task: PeerUploadTask?
    private let lock = StateLock()
    private var saved: Data?
    /// The connections made through ``connect(to:tls:bufferSize:resolveTimeout:)``, with the
    /// counter of the bytes each carried (guarded by `lock`).
    private var connections: [(recorder: MetricsRecorder, traffic: TrafficCounter?)] = []

    init(task: PeerUploadTask, attempt: Int, checkpoint: Data?) {
        self.task = task
        self.persistentIdentifier = task.persistentIdentifier
        self.attempt = attempt
        self.checkpoint = checkpoint
        saved = checkpoint
    }

    /// Remembers how far the upload has safely come (kept on disk with the task).
    public func save(checkpoint: Data) {
        lock.withLock { saved = checkpoint }
        task?.checkpointSaved(checkpoint)
    }

    /// True once the task was cancelled (``PeerSessionTask/cancel()``), as opposed to an
    /// attempt stopped because the session is invalidated (the task stays queued for the next
    /// launch): a protocol can tell its peer to drop what it received rather than keep it.
    public var isTaskCancelled: Bool {
        guard let task else { return false }
        return task.state == .canceling && !task.background.isLeaving
    }

    /// Reports bytes sent of the whole body (`total` -1 when unknown).
    public func reportProgress(sent: Int64, total: Int64) {
        task?.uploadProgressed(sent: sent, total: total)
    }

    /// Connects to `service` (the one ``PeerUploadProtocol/upload(_:to:context:)`` was given),
    /// as `DiscoveredService.connect(tls:bufferSize:resolveTimeout:context:)` does, and records
    /// the connection in the task's metrics: one ``PeerTransactionMetrics`` per connection made
    /// this way, with its timestamps, addresses, TLS version and cipher, and the bytes your
    /// protocol wrote and read on it (after TLS: its own bytes, headers and body alike), all
    /// measured by the session on the connection.
    /// - Throws: what `DiscoveredService.connect` throws (a `SocketStreamError`).
    public func connect(
        to service: ResolvedService, tls: TLSConfiguration? = nil, bufferSize: Int = 256 * 1024,
        resolveTimeout: TimeInterval = 5
    ) async throws -> BoundStreamPair {
        let recorder = MetricsRecorder()
        recorder.update { $0.fetchStartDate = Date() }
        let pair = service.service.streams(
            tls: tls, bufferSize: bufferSize, resolveTimeout: resolveTimeout,
            context: task?.session.discoveryContext ?? .shared)
        pair.observeConnection { recorder.record($0) }
        lock.withLock { connections.append((recorder, pair.traffic)) }
        try await pair.open()
        return pair
    }

    /// The transactions of the connections this attempt made through ``connect(to:tls:bufferSize:resolveTimeout:)``.
    func transactions() -> [PeerTransactionMetrics] {
        lock.withLock {
            connections.compactMap { connection in
                connection.recorder.transaction(
                    sent: connection.traffic?.bytesSent ?? 0, received: connection.traffic?.bytesReceived ?? 0)
            }
        }
    }

    var latestCheckpoint: Data? { lock.withLock { saved } }
}

/// A wait a background task went through, as its metrics report it.
public struct PeerTaskWait: Codable, Sendable, Equatable {
    /// Why the task waited.
    public enum Reason: String, Codable, Sendable {
        /// The service was not visible in discovery.
        case serviceNotVisible
        /// An attempt failed; the task waited before trying again.
        case retryDelay
    }

    public var reason: Reason
    public var start: Date
    public var end: Date?
}

/// Background upload events, for a delegate that wants them.
public protocol PeerSessionUploadDelegate: PeerSessionTaskDelegate {
    /// A retry or a relaunch needs the body again, and a stream cannot be rewound: call
    /// `completionHandler` with a fresh stream of the same bytes, or nil to fail the task
    /// (``PeerSessionError/transferFailed(_:)``). The default answers nil.
    func peerSession(
        _ session: PeerSession, task: PeerUploadTask,
        needNewBodyStream completionHandler: @escaping @Sendable (InputStream?) -> Void)

    /// The task is waiting: for its service to become visible, or before another attempt.
    func peerSession(_ session: PeerSession, task: PeerUploadTask, isWaiting phase: PeerUploadTask.Phase)

    /// A background session re-created after a relaunch has delivered every event that was
    /// pending then: the completions no delegate heard, and those of the tasks it carried on
    /// (called once they have all ended). Not called when nothing was pending.
    func peerSessionDidFinishEvents(forBackgroundSession session: PeerSession)
}

extension PeerSessionUploadDelegate {
    public func peerSession(
        _ session: PeerSession, task: PeerUploadTask,
        needNewBodyStream completionHandler: @escaping @Sendable (InputStream?) -> Void
    ) {
        completionHandler(nil)
    }
    public func peerSession(_ session: PeerSession, task: PeerUploadTask, isWaiting phase: PeerUploadTask.Phase) {}
    public func peerSessionDidFinishEvents(forBackgroundSession session: PeerSession) {}
}
