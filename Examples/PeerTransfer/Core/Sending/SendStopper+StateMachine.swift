import Foundation

extension SendStopper {
    /// When a stopping send may tell its receiver, as a state machine: the sender writes one
    /// frame at a time, and a failure frame must not land inside another (a chunk half
    /// written), so a stop that comes while a frame is being written is told once that write
    /// ends. Events in, actions out; no I/O.
    struct StateMachine: Sendable {
        /// What the shell does.
        enum Action: Equatable, Sendable {
            /// Write the failure frame for `reason` and end our side of the data.
            case tell(SendStop)
            /// Nothing can be told (no connection, a frame half written, or the data all sent):
            /// say so to whoever waits for the telling.
            case nothingToTell
            /// The stop's deadline starts: once it passes, the connection is reset, whatever
            /// still waits on it (a write the receiver does not take, its close, its verdicts).
            case startDeadline
        }

        private enum State: Equatable {
            /// No connection yet.
            case unconnected
            /// Stopped before a connection was made.
            case stoppedUnconnected(SendStop)
            /// A connection; `writing` while a frame goes out.
            case connected(writing: Bool)
            /// Stopped while a frame went out: told once it is written.
            case stopping(SendStop)
            /// The receiver was told (or no more can be said).
            case told(SendStop)
            /// Everything was sent: nothing to stop but the wait for the verdicts.
            case finished
            /// Finished, then stopped.
            case finishedAndStopped(SendStop)
        }

        private var state = State.unconnected

        /// Why the send was stopped, once it was.
        var reason: SendStop? {
            switch state {
            case .stoppedUnconnected(let reason), .stopping(let reason), .told(let reason),
                .finishedAndStopped(let reason):
                return reason
            case .unconnected, .connected, .finished:
                return nil
            }
        }

        /// A connection is open: frames may go out. After a send that ended, the next one of
        /// the same sender; after a stop, it is told at once and goes no further.
        mutating func connected() -> [Action] {
            switch state {
            case .unconnected, .finished, .connected(writing: false):
                state = .connected(writing: false)
                return []
            case .stoppedUnconnected(let reason), .told(let reason), .finishedAndStopped(let reason):
                state = .told(reason)
                return [.tell(reason), .startDeadline]
            case .connected(writing: true), .stopping:
                assertionFailure("connected() in \(state): one stopper serves one send at a time")
                return []
            }
        }

        /// A frame is about to go out: true when it may.
        mutating func mayWrite() -> Bool {
            switch state {
            case .connected(writing: false):
                state = .connected(writing: true)
                return true
            case .stopping, .told, .finishedAndStopped, .stoppedUnconnected:
                return false  // stopped: the sender writes nothing more
            case .unconnected, .connected(writing: true), .finished:
                assertionFailure("mayWrite() in \(state)")
                return false
            }
        }

        /// The frame went out (`completely`), or its write failed; `last`: it was the sender's
        /// last (the receiver then has everything, and only its verdicts remain).
        mutating func wrote(completely: Bool, last: Bool = false) -> [Action] {
            switch state {
            case .connected(writing: true):
                state = last && completely ? .finished : .connected(writing: false)
                return []
            case .stopping(let reason):
                if last && completely {
                    // Everything is out: nothing to take back, the verdicts decide.
                    state = .finishedAndStopped(reason)
                    return [.nothingToTell]
                }
                state = .told(reason)
                // A write that failed may have left half a frame: nothing more can be said.
                return completely ? [.tell(reason)] : [.nothingToTell]
            default:
                assertionFailure("wrote(completely:last:) in \(state)")
                return []
            }
        }

        /// The send is to stop, for `reason`. A second stop changes nothing.
        mutating func stop(_ reason: SendStop) -> [Action] {
            switch state {
            case .unconnected:
                state = .stoppedUnconnected(reason)
                return [.nothingToTell]
            case .connected(writing: false):
                state = .told(reason)
                return [.tell(reason), .startDeadline]
            case .connected(writing: true):
                state = .stopping(reason)
                return [.startDeadline]
            case .finished:
                state = .finishedAndStopped(reason)
                return [.nothingToTell, .startDeadline]
            case .stoppedUnconnected, .stopping, .told, .finishedAndStopped:
                return []
            }
        }
    }
}
