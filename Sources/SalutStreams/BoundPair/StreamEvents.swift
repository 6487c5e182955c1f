import Foundation

/// Status, error and event bookkeeping shared by Salut's stream subclasses.
///
/// Events follow Apple's rules: each is posted when its condition becomes true, and
/// `hasBytesAvailable` / `hasSpaceAvailable` are posted again only after the client has read or
/// written (so a delegate that does not read is not called in a loop). Events go to the delegate
/// on the run loop the stream is scheduled in, or on its dispatch queue; a stream with neither
/// posts nothing.
final class StreamEvents: @unchecked Sendable {
    // @unchecked: mutable state is guarded by `lock`; delegate calls go through `scheduler`.

    private let lock = StateLock()
    private var status: Stream.Status = .notOpen
    private var error: (any Error)?
    private var waitingForClient: Stream.Event = []  // events posted and not yet consumed
    private var posted: Stream.Event = []  // one-shot events already posted
    let scheduler = DelegateScheduler(onMainRunLoop: false)

    var streamStatus: Stream.Status { lock.withLock { status } }
    var streamError: (any Error)? { lock.withLock { error } }

    /// Moves to `status` unless the stream is already closed or failed.
    func set(_ new: Stream.Status) {
        lock.withLock { if status != .closed && status != .error { status = new } }
    }

    /// Records a failure: status `.error`, the error kept for `streamError`.
    func fail(_ failure: any Error) {
        lock.withLock {
            if status != .error && status != .closed { status = .error; error = failure }
        }
    }

    /// For a stream still `opening` behind a connection gate: suspends until the connection is
    /// made or has failed (or the task is cancelled), and settles the stream, so that an async
    /// read or write right after `open()` waits for the connection instead of failing.
    func settled(_ stream: Stream, gate: ConnectionGate?, then refresh: () -> Void) async {
        guard streamStatus == .opening, let gate else { return }
        await gate.settled()
        if case .connecting = gate.current { return }  // cancelled: still opening
        settle(stream, gate: gate, then: refresh)
    }

    /// Apple's `open()`: `opening`, then `open` with `openCompleted` at once, or, for a stream
    /// behind a connection `gate`, once the connection is made (`settle`).
    func open(_ stream: Stream, gate: ConnectionGate?, then refresh: () -> Void) {
        guard streamStatus == .notOpen else { return }
        set(.opening)
        if let gate {
            gate.requestOpen()
            if case .connecting = gate.current { return }
        }
        settle(stream, gate: gate, then: refresh)
    }

    /// Finishes opening when the gate has settled: `open` and `openCompleted`, or `error` and
    /// `errorOccurred` when the connection failed.
    func settle(_ stream: Stream, gate: ConnectionGate?, then refresh: () -> Void) {
        guard streamStatus == .opening else { return }
        if let gate, case .failed(let error) = gate.current {
            fail(error)
            post(.errorOccurred, to: stream, once: true)
            return
        }
        set(.open)
        post(.openCompleted, to: stream, once: true)
        refresh()
    }

    /// The client read or wrote: the matching event may be posted again (also when the client
    /// did so while the stream was scheduled nowhere: scheduled again, it hears of what is due).
    func consumed(_ event: Stream.Event) {
        lock.withLock { _ = waitingForClient.remove(event) }
    }

    /// Posts `event` to `stream`'s delegate if it is due. `once` events are posted at most once;
    /// others again only after `consumed(_:)`.
    func post(_ event: Stream.Event, to stream: Stream, once: Bool = false) {
        guard scheduler.isScheduled else { return }
        let due = lock.withLock {
            let due = once ? !posted.contains(event) : !waitingForClient.contains(event)
            if due { if once { posted.insert(event) } else { waitingForClient.insert(event) } }
            return due
        }
        guard due else { return }
        let target = WeaklyHandedOver(stream)  // used only where its delegate calls are made
        scheduler.deliver {
            guard let stream = target.object else { return }  // let go meanwhile: nothing to tell
            stream.delegate?.stream(stream, handle: event)
        }
    }
}

/// Why a bound-pair stream operation failed.
///
/// A struct rather than an enum, so that new kinds can be added in a minor release: compare it
/// with the static members (`error == .readerClosed`) or its ``code``.
public struct StreamFailure: Error, Sendable, Hashable, CustomStringConvertible {
    /// The kind of a ``StreamFailure``. Compare it with the static members; new kinds may be
    /// added in minor releases.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private let name: String
        private init(_ name: String) { self.name = name }
        /// The code's name, as written in Swift (for example `readerClosed`).
        public var description: String { name }

        /// The reading end was closed.
        public static let readerClosed = Code("readerClosed")
        /// The stream is not open.
        public static let notOpen = Code("notOpen")
        /// A line read with `InputStream.lines(maximumLength:)` was longer than its limit.
        public static let lineTooLong = Code("lineTooLong")
        /// A write with a timeout (`OutputStream.write(_:timeout:)`) found no room in time.
        public static let timedOut = Code("timedOut")
    }

    private enum Details: Hashable, Sendable {
        case readerClosed
        case notOpen
        case lineTooLong(limit: Int)
        case timedOut
    }

    private let details: Details
    private init(_ details: Details) { self.details = details }

    /// The reading end was closed, so nothing written can be delivered.
    public static let readerClosed = StreamFailure(.readerClosed)
    /// The stream is not open (never opened, or already closed).
    public static let notOpen = StreamFailure(.notOpen)
    /// A line went past `limit` bytes without its end (`InputStream.lines(maximumLength:)`).
    public static func lineTooLong(limit: Int) -> StreamFailure { StreamFailure(.lineTooLong(limit: limit)) }
    /// The time given to a write (`OutputStream.write(_:timeout:)`) passed before the reader
    /// took its bytes.
    public static let timedOut = StreamFailure(.timedOut)

    /// The kind of failure.
    public var code: Code {
        switch details {
        case .readerClosed: .readerClosed
        case .notOpen: .notOpen
        case .lineTooLong: .lineTooLong
        case .timedOut: .timedOut
        }
    }

    /// A one-line message for people.
    public var description: String {
        switch details {
        case .readerClosed: return "the reading end of the stream pair was closed"
        case .notOpen: return "the stream is not open"
        case .lineTooLong(let limit): return "a line went past \(limit) bytes without its end"
        case .timedOut: return "the reader took no more bytes within the time given to the write"
        }
    }
}

/// `localizedDescription` (and so `CFReadStreamCopyError(_:)`'s text, Foundation's alerts and
/// logs) reads as `description`, not as "The operation could not be completed".
extension StreamFailure: LocalizedError {
    public var errorDescription: String? { description }
}
