import Foundation

extension SendStopper {
    /// When a stopping send may tell its receiver, as a state machine: the sender writes one
    /// frame at a time, and a failure frame must not land inside another (a chunk half
    /// written), so a stop that comes while a frame is being written is told once that write
    /// ends. Events in, actions out; no I/O.
    struct StateMachine: Sendable {
        /// What the shell does.
        enum Action: Equatable, Sendable {
            /// Write the failure frame for `reason` and end our side of the data; then, should
            /// the receiver still not close, reset the connection after a short grace.
            case tell(SendStop)
            /// Nothing can be told (no connection, or the data is all sent): say so to whoever
            /// waits for the telling; reset the connection after a grace if there is one.
            case nothingToTell
            /// Reset the connection after the grace, should the write under way never end.
            case resetLater
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

        /// A connection is open: frames may go out. (After a send that finished, the next one
        /// of the same sender; after a stop, it is told at once and goes no further.)
        mutating func connected() -> [Action] {
            switch state {
            case .unconnected, .finished:
                state = .connected(writing: false)
                return []
            case .stoppedUnconnected(let reason), .told(let reason), .finishedAndStopped(let reason):
                state = .told(reason)
                return [.tell(reason)]
            default:
                assertionFailure("connected() in \(state)")
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
            default:
                assertionFailure("mayWrite() in \(state)")
                return false
            }
        }

        /// The frame went out (`completely`), or its write failed.
        mutating func wrote(completely: Bool) -> [Action] {
            switch state {
            case .connected(writing: true):
                state = .connected(writing: false)
                return []
            case .stopping(let reason):
                state = .told(reason)
                // A write that failed may have left half a frame: nothing more can be said.
                return completely ? [.tell(reason)] : [.nothingToTell]
            default:
                assertionFailure("wrote(completely:) in \(state)")
                return []
            }
        }

        /// The last frame went out: the receiver has everything, and only its verdicts remain.
        mutating func finished() {
            switch state {
            case .connected(writing: false): state = .finished
            case .told, .stopping, .finishedAndStopped: break  // (a late report of the end)
            default: assertionFailure("finished() in \(state)")
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
                return [.tell(reason)]
            case .connected(writing: true):
                state = .stopping(reason)
                return [.resetLater]
            case .finished:
                state = .finishedAndStopped(reason)
                return [.nothingToTell]
            case .stoppedUnconnected, .stopping, .told, .finishedAndStopped:
                return []
            }
        }
    }
}
