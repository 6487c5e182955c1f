import Foundation
import Salut

extension Sender {
    /// The sender's side of the conversation over an open connection, as a state machine: the
    /// hellos, the offer and its answer, the files, and the receiver's summary. Events in (what
    /// the receiver said, what the shell did), actions out (what the shell does next); no I/O.
    /// The shell is ``Sender/transfer(_:over:to:events:)``; the receiver's verdicts on each
    /// file, which come in while the files go out, are checked by a ``VerdictStateMachine``.
    ///
    /// Only a receiver of this protocol version is offered anything. Once the answer came, what
    /// it accepted is counted (``Tally``) before anything is sent. A write that fails while the
    /// files go out yields to what the receiver said, when it said something: its reason is
    /// the truth, the broken write only its consequence. And the error a send ends with names
    /// silence truthfully: a receiver that went quiet before it answered did not answer (it
    /// did not fail a transfer).
    struct ConversationStateMachine: Sendable {
        /// What the shell does next.
        enum Action: Sendable {
            /// Offer the plan's manifest and read the answer; report it with
            /// ``receivedAnswer(_:)``.
            case offer
            /// Find what to send of each accepted file (hashing what the receiver already
            /// has); report it with ``prepared(_:)``.
            case prepare(Answer)
            /// Report the answer as counted, then send the accepted files in order while the
            /// verdicts are read; report with ``sentAll()`` or, when a write failed,
            /// ``sendingFailed(_:receiverSaid:)``.
            case send(Tally)
            /// Say that nothing more comes, then wait for the receiver's summary; report it
            /// with ``summarized(verified:failed:bytesSent:)`` (or a failed write, or the
            /// receiver's failure instead of a summary, with ``sendingFailed(_:receiverSaid:)``).
            case finish
            /// The send is over: report this.
            case report(SendReport)
            /// The send ends with this error.
            case fail(any Error)
        }

        /// One accepted file as the shell prepared it: where its bytes start, and whether the
        /// receiver holds it whole already.
        struct Prepared: Sendable, Equatable {
            var index: Int
            var offset: UInt64
            var alreadyThere: Bool
        }

        /// What the answer means for this send, counted.
        struct Tally: Sendable, Equatable {
            /// The entries accepted (files and folders).
            var accepted: Set<Int>
            /// How many of them are files.
            var acceptedFiles: Int
            /// The paths declined.
            var declined: [String]
            /// Files the receiver holds already.
            var alreadyThere: Int
            /// File bytes not sent: the receiver has them (resumed, or already there).
            var bytesSkipped: UInt64
            /// File bytes this run sends.
            var bytesToSend: UInt64
            /// The receiver's reason for what it declined, as it said it (escape it to show it).
            var reason: String?

            init(_ entries: [ManifestEntry], answer: Answer, prepared: [Prepared]) {
                let accepted = Set(answer.accepted.map(\.index).filter { entries.indices.contains($0) })
                self.accepted = accepted
                acceptedFiles = accepted.filter { entries[$0].kind == .file }.count
                declined = entries.indices.filter { !accepted.contains($0) }.map { entries[$0].path }
                alreadyThere = prepared.filter(\.alreadyThere).count
                bytesSkipped = prepared.reduce(0) { $0 + ($1.alreadyThere ? entries[$1.index].size : $1.offset) }
                bytesToSend = prepared.reduce(0) { $0 + ($1.alreadyThere ? 0 : entries[$1.index].size - $1.offset) }
                reason = answer.reason
            }
        }

        private enum State: Sendable {
            /// The hello went out; the receiver's is awaited.
            case greeting
            /// The offer went out; the answer is awaited.
            case offering
            /// What to send of each accepted file is being found.
            case preparing(Answer)
            /// The accepted files are going out.
            case sending(Answer, Tally)
            /// Everything went out; the summary is awaited.
            case finishing(Answer, Tally)
            /// Reported, or failed (`answered`: after the receiver's answer): no more events are
            /// expected.
            case ended(answered: Bool)
        }

        private let entries: [ManifestEntry]
        private var state = State.greeting

        /// A conversation offering `entries` (the manifest's), its hello sent.
        init(offering entries: [ManifestEntry]) {
            self.entries = entries
        }

        /// Whether the receiver answered the offer (from then on, its silence is no longer
        /// "no answer").
        var hasAnswer: Bool {
            switch state {
            case .greeting, .offering: false
            case .preparing, .sending, .finishing: true
            case .ended(let answered): answered
            }
        }

        /// The receiver's hello came: it must speak this protocol version.
        mutating func receivedHello(_ hello: Hello) -> Action {
            guard case .greeting = state else { return unexpected("receivedHello") }
            guard hello.protocolVersion == TransferLimits.protocolVersion else {
                return end(
                    .fail(
                        PeerTransferError.protocolViolation(
                            "the receiver speaks protocol \(hello.protocolVersion), not \(TransferLimits.protocolVersion)"
                        )))
            }
            state = .offering
            return .offer
        }

        /// The receiver answered the offer (a refusal comes as its error, not as an answer). An
        /// answer that accepts an entry not offered, or one entry twice, is a broken protocol.
        mutating func receivedAnswer(_ answer: Answer) -> Action {
            guard case .offering = state else { return unexpected("receivedAnswer") }
            var accepted = Set<Int>()
            for entry in answer.accepted {
                guard entries.indices.contains(entry.index) else {
                    return end(
                        .fail(
                            PeerTransferError.protocolViolation(
                                "the receiver accepted entry \(entry.index), but \(entries.count) were offered (0 to \(entries.count - 1))"
                            )))
                }
                guard accepted.insert(entry.index).inserted else {
                    return end(
                        .fail(PeerTransferError.protocolViolation("the receiver accepted entry \(entry.index) twice")))
                }
            }
            state = .preparing(answer)
            return .prepare(answer)
        }

        /// What to send of each accepted file is known.
        mutating func prepared(_ files: [Prepared]) -> Action {
            guard case .preparing(let answer) = state else { return unexpected("prepared") }
            let tally = Tally(entries, answer: answer, prepared: files)
            state = .sending(answer, tally)
            return .send(tally)
        }

        /// Every accepted file went out.
        mutating func sentAll() -> Action {
            guard case .sending(let answer, let tally) = state else { return unexpected("sentAll") }
            state = .finishing(answer, tally)
            return .finish
        }

        /// The sending failed: a write of the files or of the end, or the wait for the summary;
        /// `receiverSaid`: the receiver's own error, when it sent one before the connection broke.
        mutating func sendingFailed(_ error: any Error, receiverSaid: PeerTransferError?) -> Action {
            switch state {
            case .sending, .finishing:
                return end(.fail(receiverSaid ?? error))
            case .greeting, .offering, .preparing, .ended:
                return unexpected("sendingFailed")
            }
        }

        /// The receiver summed up: `verified` files, `failed` with why (as the verdicts
        /// checked them); `bytesSent`: the file bytes this run sent.
        mutating func summarized(verified: Int, failed: [String], bytesSent: UInt64) -> Action {
            guard case .finishing(let answer, let tally) = state else { return unexpected("summarized") }
            return end(
                .report(
                    SendReport(
                        verified: verified, failed: failed, declined: tally.declined, bytesSent: bytesSent,
                        bytesSkipped: tally.bytesSkipped, declineCode: tally.declined.isEmpty ? nil : answer.cause)))
        }

        /// The error a send to `name` that ended by `error` reports (a send that was stopped
        /// is the shell's to name, once it knows whether the receiver was told). `expired`: why
        /// the watchdog cut the connection, when it did; `answerBound`: how long an answer was
        /// waited for.
        func failure(of error: any Error, expired: String?, answerBound: Duration, name: String) -> any Error {
            let receiver = "\"\(Terminal.escape(name))\""
            switch error {
            case let error as PeerTransferError:
                return error
            case _ where expired != nil && !hasAnswer:
                // Silent from the offer on: nobody there said yes or no. (The watchdog's reset
                // closed the streams: the read fails as "not open", whatever its type, which says
                // nothing to the person.)
                let bound = Wording.duration(Double(answerBound.components.seconds))
                return PeerTransferError.noAnswer("\(receiver) did not answer the offer within \(bound)")
            case is SocketStreamError:
                return PeerTransferError.runtime("the connection to \(receiver) failed: \(expired ?? "\(error)")")
            default:
                return PeerTransferError.runtime("the transfer to \(receiver) failed: \(expired ?? "\(error)")")
            }
        }

        private mutating func end(_ action: Action) -> Action {
            state = .ended(answered: hasAnswer)
            return action
        }

        private mutating func unexpected(_ event: String) -> Action {
            assertionFailure("Sender.ConversationStateMachine: \(event) in \(state)")
            return end(.fail(PeerTransferError.runtime("internal error: \(event) came when it could not")))
        }
    }
}
