import Foundation
import Salut

/// Why a send stopped before its end, as its receiver is told.
public enum SendStop: String, Sendable, Equatable {
    /// The person cancelled it (`peerxfer cancel`): the receiver removes what it received of it.
    case cancelled
    /// It was interrupted (Ctrl-C, the daemon stopping): the receiver keeps what it received,
    /// and the same send resumes from there.
    case interrupted

    /// The failure frame's code on the wire.
    var wireCode: String {
        switch self {
        case .cancelled: return "cancelled"
        case .interrupted: return "stopped"
        }
    }

    /// What the receiver is told, for its person.
    var message: String {
        switch self {
        case .cancelled: return "the sender cancelled the send"
        case .interrupted: return "the sender stopped the send; it resumes where it stopped when sent again"
        }
    }
}

/// Stops a send and tells its receiver why: a cancelled send's part files are removed there, an
/// interrupted one's kept. Give one to a ``Sender`` (``Sender/stopper``) and call
/// ``stop(_:)`` from anywhere (a signal handler, a cancelled task); the sender writes nothing
/// after it, and the receiver gets one failure frame between two of the sender's frames.
///
/// The I/O shell of ``StateMachine``; one stopper serves one send.
public final class SendStopper: Sendable {
    private let machine = Locked(StateMachine())
    private let connection = Locked<BoundStreamPair?>(nil)
    /// Signalled once the receiver was told, or once nothing can be told.
    private let toldSignal = DispatchSemaphore(value: 0)
    private let wroteTheReason = Locked(false)
    /// How long the receiver has to close the connection once told, before it is reset.
    static let grace: Duration = .seconds(3)

    /// A stopper for one send.
    public init() {}

    /// Why the send was stopped, once ``stop(_:)`` was called.
    public var reason: SendStop? { machine.withLock { $0.reason } }

    /// Stops the send: the receiver is told at once, or as soon as the frame being written is
    /// out. A second call changes nothing.
    public func stop(_ reason: SendStop) {
        perform(machine.withLock { $0.stop(reason) })
    }

    /// True once the reason went out to the receiver (not when nothing could be told).
    public var toldTheReceiver: Bool { wroteTheReason.value }

    /// Blocks until the receiver was told (or nothing could be told), for at most `seconds`:
    /// for a signal handler that ends the process once the receiver knows. True when told.
    public func waitUntilTold(seconds: Double) -> Bool {
        guard toldSignal.wait(timeout: .now() + seconds) == .success else { return false }
        toldSignal.signal()  // (for another waiter)
        return true
    }

    // MARK: For the sender

    /// The connection is open.
    func connected(_ pair: BoundStreamPair) {
        connection.withLock { $0 = pair }
        perform(machine.withLock { $0.connected() })
    }

    /// Writes `data` (whole frames) unless the send was stopped; a stop that came meanwhile is
    /// told once it is written.
    /// - Throws: ``Stopped`` once the send was stopped; the write's own error.
    func write(_ data: Data, to output: OutputStream) async throws {
        guard machine.withLock({ $0.mayWrite() }) else { throw Stopped() }
        do {
            try await output.write(data)
        } catch {
            perform(machine.withLock { $0.wrote(completely: false) })
            throw error
        }
        perform(machine.withLock { $0.wrote(completely: true) })
    }

    /// Every frame was sent.
    func finished() {
        machine.withLock { $0.finished() }
    }

    /// Thrown by ``write(_:to:)`` once the send is stopped.
    struct Stopped: Error {}

    private func perform(_ actions: [StateMachine.Action]) {
        let pair = connection.value
        for action in actions {
            switch action {
            case .tell(let reason):
                guard let pair else {
                    toldSignal.signal()
                    continue
                }
                Task { [wroteTheReason] in
                    let failure = Failure(code: reason.wireCode, message: reason.message)
                    if (try? await pair.output.write(Frame.message(.failure, failure).encoded)) != nil {
                        wroteTheReason.withLock { $0 = true }
                    }
                    try? await pair.finishSending()
                    toldSignal.signal()
                    await Self.reset(pair, afterGrace: ())
                }
            case .nothingToTell:
                toldSignal.signal()
                if let pair { Task { await Self.reset(pair, afterGrace: ()) } }
            case .resetLater:
                if let pair { Task { await Self.reset(pair, afterGrace: ()) } }
            }
        }
    }

    /// Resets `pair` after the grace: a receiver that does not close once told (or a write that
    /// never ends) does not hold the send. Harmless on a connection already closed.
    private static func reset(_ pair: BoundStreamPair, afterGrace: Void) async {
        try? await Task.sleep(for: grace)
        pair.reset()
    }
}
