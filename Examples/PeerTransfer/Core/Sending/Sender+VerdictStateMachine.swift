import Foundation

extension Sender {
    /// The receiver's word on what was sent, checked as it comes in, as a state machine: the
    /// sending task says which files' ends it is sending (``fileEnding(_:withdrawn:)``), the
    /// reading task hands over each frame the receiver sends (``received(_:)``) and the end of
    /// its data (``connectionEnded()``); each returns what to report. No I/O.
    ///
    /// A verdict is believed only where it can be true: for an accepted file, once its end was
    /// sent, once, and never "verified" for a file this sender withdrew (the receiver cannot
    /// have checked a digest it was not sent). The receiver's summary ends the exchange; each
    /// accepted file it gave no verdict for counts as failed, for a summary that skips some
    /// files is no proof that they arrived. A failure that answers an offer (declined, no
    /// answer…) is no reason to stop a transfer already accepted: said then, it is a broken
    /// protocol, as a `cancelled` failure is (only a sender cancels its send).
    struct VerdictStateMachine: Sendable {
        /// What the shell reports next.
        enum Action: Sendable, Equatable {
            /// The receiver verified the file `index` and stored it as `storedAs` (as the
            /// receiver said it: escape it to show it).
            case verified(index: Int, path: String, storedAs: String)
            /// The file `index` did not arrive verified, for `reason` (escaped).
            case failed(index: Int, path: String, reason: String)
            /// The receiver summed up: the exchange is over, with these counts.
            case summarized(verified: Int, failed: [String])
            /// The receiver failed the transfer, broke the protocol or lied: nothing more is
            /// sent, and the send ends with this error.
            case fail(PeerTransferError)
        }

        private enum State: Sendable {
            /// Verdicts are coming in.
            case collecting
            /// The summary came, or the exchange failed: nothing more is read.
            case ended
        }

        private let entries: [ManifestEntry]
        /// The accepted entries that are files: each must get a verdict.
        private let acceptedFiles: Set<Int>
        /// The files whose end the sender sent (or is sending), and whether it withdrew them.
        private var ends: [Int: Bool] = [:]
        /// The files that got their verdict.
        private var judged = Set<Int>()
        private var verified = 0
        private var failed: [String] = []
        private var state = State.collecting

        /// Checks verdicts on `entries`, of which the receiver accepted those at `accepted`.
        init(entries: [ManifestEntry], accepted: Set<Int>) {
            self.entries = entries
            acceptedFiles = accepted.filter { entries.indices.contains($0) && entries[$0].kind == .file }
        }

        /// The sender is about to send the end of file `index` (its digest, or its withdrawal):
        /// a verdict on it may come from now on.
        mutating func fileEnding(_ index: Int, withdrawn: Bool) {
            ends[index] = withdrawn
        }

        /// A frame from the receiver, once the offer was answered.
        mutating func received(_ frame: Frame) -> Action {
            guard case .collecting = state else { return unexpected("a \(frame.kind) frame") }
            do {
                switch frame.kind {
                case .fileResult:
                    return try judge(try frame.decode(FileResult.self))
                case .summary:
                    _ = try frame.decode(Summary.self)
                    return summarize()
                case .failure:
                    let failure = try frame.decode(Failure.self)
                    // An answer to an offer is no reason to stop a transfer the receiver took:
                    // said after the answer, it is a broken protocol, not a decline. Nor is a
                    // sender's own word (only a sender cancels its send).
                    guard !Self.offerAnswers.contains(failure.code), failure.code != SendStop.cancelled.wireCode else {
                        throw PeerTransferError.protocolViolation(
                            "the receiver accepted the offer, then sent a \"\(Terminal.escapePeerText(failure.code))\" failure (\(Terminal.escapePeerText(failure.message)))"
                        )
                    }
                    return end(.fail(PeerTransferError.fromWire(code: failure.code, message: failure.message)))
                default:
                    throw PeerTransferError.protocolViolation("an unexpected \(frame.kind) message from the receiver")
                }
            } catch let error as PeerTransferError {
                return end(.fail(error))
            } catch {
                return end(.fail(.protocolViolation("\(error)")))
            }
        }

        /// The receiver's data ended (its connection closed) before its summary.
        mutating func connectionEnded() -> Action {
            guard case .collecting = state else { return unexpected("the connection's end") }
            return end(.fail(.runtime("the receiver closed the connection before its summary")))
        }

        private mutating func judge(_ result: FileResult) throws -> Action {
            let index = result.index
            guard acceptedFiles.contains(index) else {
                throw PeerTransferError.protocolViolation("a result for entry \(index), which is not an accepted file")
            }
            guard let withdrawn = ends[index] else {
                throw PeerTransferError.protocolViolation("a result for entry \(index), whose end was not sent yet")
            }
            guard !(result.verified && withdrawn) else {
                throw PeerTransferError.protocolViolation(
                    "entry \(index) reported verified, though this sender withdrew it")
            }
            guard judged.insert(index).inserted else {
                throw PeerTransferError.protocolViolation("a second result for entry \(index)")
            }
            let path = entries[index].path
            if result.verified {
                verified += 1
                return .verified(index: index, path: path, storedAs: result.storedAs ?? path)
            }
            let reason = Terminal.escapePeerText(result.error ?? "not verified")
            failed.append("\(path): \(reason)")
            return .failed(index: index, path: path, reason: reason)
        }

        /// The failure codes that answer an offer (and only that).
        static let offerAnswers: Set<String> = [
            "declined", "declined-hook", "declined-policy", "no-answer", "cannot-ask", "trust",
        ]

        private mutating func summarize() -> Action {
            // Each accepted file the summary leaves out counts as one failed file.
            let unconfirmed = acceptedFiles.subtracting(judged).sorted().map {
                "\(entries[$0].path): the receiver ended without saying it was verified"
            }
            return end(.summarized(verified: verified, failed: failed + unconfirmed))
        }

        private mutating func end(_ action: Action) -> Action {
            state = .ended
            return action
        }

        /// An event the shell cannot send in this state (it stops reading once the exchange
        /// ended): a bug in the shell.
        private mutating func unexpected(_ event: String) -> Action {
            assertionFailure("Sender.VerdictStateMachine: \(event) in \(state)")
            return end(.fail(.runtime("internal error: \(event) came when it could not")))
        }
    }
}
