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
/// Every wait a stop causes ends by its deadline (``grace``): the connection is reset then.
///
/// The I/O shell of ``StateMachine``. One stopper serves the sends of one sender one after
/// another; once stopped, it stops every later send at its first frame.
public final class SendStopper: Sendable {
    /// What one send's telling came to.
    private final class Telling: Sendable {
        /// Signalled once the receiver was told, or once nothing can be told.
        let done = DispatchSemaphore(value: 0)
        /// Whether the failure frame went out.
        let wrote = Locked(false)
    }

    private let machine = Locked(StateMachine())
    private let current = Locked<(pair: BoundStreamPair?, telling: Telling)>((nil, Telling()))
    /// How long a stop may take, from the stop on: the failure frame's write, the end of our
    /// side and the receiver's close; then the connection is reset.
    static let grace: Duration = .seconds(10)

    /// A stopper for the sends of one sender.
    public init() {}

    /// Why the send was stopped, once ``stop(_:)`` was called.
    public var reason: SendStop? { machine.withLock { $0.reason } }

    /// Stops the send: the receiver is told at once, or as soon as the frame being written is
    /// out. A second call changes nothing.
    public func stop(_ reason: SendStop) {
        perform(machine.withLock { $0.stop(reason) })
    }

    /// True once the reason went out to the receiver (not when nothing could be told).
    public var toldTheReceiver: Bool { current.value.telling.wrote.value }

    /// Blocks until the receiver was told (or nothing could be told), for at most `seconds`:
    /// for a signal handler that ends the process once the receiver knows. True when told or
    /// when there was nothing to tell.
    public func waitUntilTold(seconds: Double) -> Bool {
        let telling = current.value.telling
        guard telling.done.wait(timeout: .now() + seconds) == .success else { return false }
        telling.done.signal()  // (for another waiter)
        return true
    }

    // MARK: For the sender

    /// A connection is open (a send begins).
    func connected(_ pair: BoundStreamPair) {
        let actions = machine.withLock { machine -> [StateMachine.Action] in
            let actions = machine.connected()
            // A send of its own: what an earlier send told is not this one's.
            current.withLock { $0 = (pair, actions.isEmpty ? Telling() : $0.telling) }
            return actions
        }
        perform(actions)
    }

    /// Writes `data` (whole frames; `last`, the sender's last) unless the send was stopped; a
    /// stop that came meanwhile is told once it is written (then this throws ``Stopped``).
    /// - Throws: ``Stopped`` once the send was stopped; the write's own error.
    func write(_ data: Data, to output: OutputStream, last: Bool = false) async throws {
        guard machine.withLock({ $0.mayWrite() }) else { throw Stopped() }
        do {
            try await output.write(data)
        } catch {
            perform(machine.withLock { $0.wrote(completely: false, last: last) })
            throw error
        }
        let actions = machine.withLock { $0.wrote(completely: true, last: last) }
        perform(actions)
        if actions.contains(where: { if case .tell = $0 { return true } else { return false } }) { throw Stopped() }
    }

    /// Thrown by ``write(_:to:last:)`` once the send is stopped.
    struct Stopped: Error {}

    private func perform(_ actions: [StateMachine.Action]) {
        let (pair, telling) = current.value
        for action in actions {
            switch action {
            case .tell(let reason):
                guard let pair else {
                    telling.done.signal()
                    continue
                }
                Task {
                    let failure = Failure(code: reason.wireCode, message: reason.message)
                    if (try? await pair.output.write(Frame.message(.failure, failure).encoded)) != nil {
                        telling.wrote.withLock { $0 = true }
                    }
                    try? await pair.finishSending()
                    telling.done.signal()
                }
            case .nothingToTell:
                telling.done.signal()
            case .startDeadline:
                guard let pair else { continue }
                // Whatever still waits on the connection then (a write the receiver does not
                // take, its close, its verdicts) ends. Harmless on a connection already closed.
                Task {
                    try? await Task.sleep(for: Self.grace)
                    pair.reset()
                }
            }
        }
    }
}
