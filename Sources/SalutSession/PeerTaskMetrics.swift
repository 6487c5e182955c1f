import Foundation
import SalutStreams

/// What happened during one task, like `URLSessionTaskMetrics`: its interval and one
/// transaction per connection attempt.
public struct PeerTaskMetrics: Sendable {
    /// From the first `resume()` to completion: for a background upload task, across
    /// relaunches (the first resume is kept with its record).
    public var taskInterval: DateInterval
    /// One entry per connection the task made (stream tasks make one; a background upload,
    /// one per connection its protocol made through ``PeerUploadContext/connect(to:tls:bufferSize:resolveTimeout:)``
    /// in this process).
    public var transactionMetrics: [PeerTransactionMetrics]
    /// For background upload tasks: the waits for the service and between attempts.
    public var waits: [PeerTaskWait] = []
    /// For background upload tasks: how many attempts were made (1 for other tasks).
    public var attempts: Int = 1
}

/// Timestamps and facts about one connection, like `URLSessionTaskTransactionMetrics`. A date
/// is nil when that step did not happen (no TLS, nothing read, …).
public struct PeerTransactionMetrics: Sendable {
    /// When the task started to make the connection.
    public var fetchStartDate: Date?
    /// Name resolution (DNS, Avahi for `.local` names and services) began.
    public var domainLookupStartDate: Date?
    /// Name resolution ended.
    public var domainLookupEndDate: Date?
    /// The first TCP connection attempt began.
    public var connectStartDate: Date?
    /// A TCP connection was made.
    public var connectEndDate: Date?
    /// The TLS handshake began.
    public var secureConnectionStartDate: Date?
    /// The TLS handshake and trust decision ended.
    public var secureConnectionEndDate: Date?
    /// The first write began.
    public var requestStartDate: Date?
    /// The last write ended.
    public var requestEndDate: Date?
    /// The first byte was read.
    public var responseStartDate: Date?
    /// The last read ended.
    public var responseEndDate: Date?
    /// This end's address, for example `127.0.0.1` or `fe80::1%eth0`.
    public var localAddress: String?
    /// This end's port.
    public var localPort: Int?
    /// The peer's address.
    public var remoteAddress: String?
    /// The peer's port.
    public var remotePort: Int?
    /// For example `TLSv1.3`, when TLS was on.
    public var negotiatedTLSProtocolVersion: String?
    /// For example `TLS_AES_256_GCM_SHA384`, when TLS was on.
    public var negotiatedTLSCipherSuite: String?
    /// Always false for stream tasks: each owns its connection.
    public var isReusedConnection: Bool
    /// Bytes written to the socket (after TLS framing is removed: application bytes).
    public var countOfRequestBodyBytesSent: Int64
    /// Bytes read from the socket (application bytes).
    public var countOfResponseBodyBytesReceived: Int64
}

/// Collects a transaction's timestamps as connection events and operations happen.
final class MetricsRecorder: @unchecked Sendable {
    // @unchecked: `transaction` and `started` are guarded by `lock` (a `StateLock`).
    private let lock = StateLock()
    private var transaction = PeerTransactionMetrics(
        isReusedConnection: false, countOfRequestBodyBytesSent: 0,
        countOfResponseBodyBytesReceived: 0)
    private var started: Date?

    func taskStarted() {
        lock.withLock { if started == nil { started = Date() } }
    }

    func update(_ change: (inout PeerTransactionMetrics) -> Void) {
        lock.withLock { change(&transaction) }
    }

    /// Records a step of making the connection.
    func record(_ event: ConnectionEvent) {
        let now = Date()
        update { metrics in
            switch event {
            case .lookupStart: metrics.domainLookupStartDate = now
            case .lookupEnd: metrics.domainLookupEndDate = now
            case .connectStart: metrics.connectStartDate = now
            case .connectEnd: metrics.connectEndDate = now
            case .secureConnectStart: metrics.secureConnectionStartDate = now
            case .ready(let details):
                if metrics.secureConnectionStartDate != nil && details.tls != nil {
                    metrics.secureConnectionEndDate = now
                }
                if metrics.connectEndDate == nil { metrics.connectEndDate = now }
                metrics.localAddress = details.localAddress?.host
                metrics.localPort = details.localAddress.map { Int($0.port) }
                metrics.remoteAddress = details.remoteAddress?.host
                metrics.remotePort = details.remoteAddress.map { Int($0.port) }
                metrics.negotiatedTLSProtocolVersion = details.tls?.protocolVersion
                metrics.negotiatedTLSCipherSuite = details.tls?.cipherSuite
            case .failed: break
            }
        }
    }

    /// The connection's transaction with these byte counts; nil when no connection was begun.
    func transaction(sent: Int64, received: Int64) -> PeerTransactionMetrics? {
        lock.withLock {
            guard transaction.fetchStartDate != nil else { return nil }
            var made = transaction
            made.countOfRequestBodyBytesSent = sent
            made.countOfResponseBodyBytesReceived = received
            return made
        }
    }

    func finish(sent: Int64, received: Int64) -> PeerTaskMetrics {
        lock.withLock {
            transaction.countOfRequestBodyBytesSent = sent
            transaction.countOfResponseBodyBytesReceived = received
            let start = started ?? Date()
            let made = transaction.fetchStartDate != nil
            return PeerTaskMetrics(
                taskInterval: DateInterval(start: start, end: max(start, Date())),
                transactionMetrics: made ? [transaction] : [])
        }
    }
}
