import Foundation

extension Receiver {
    /// The receiving side of one connection, as a state machine: each event (the key the
    /// sender proved, a frame from it, the transfer slot taken or not, the decision on the
    /// manifest, a file verified or not) moves the state and returns the actions the I/O shell
    /// (``Receiver``) performs. The trust decision is here: a sender the policy does not admit is
    /// turned away at its hello, before it takes a slot. No I/O here, so every order of events
    /// is testable without a socket.
    struct StateMachine {
        /// What the shell does.
        enum Action: Equatable {
            /// Send this frame to the sender.
            case reply(Frame)
            /// Judge the manifest (policy, inbox, free space), then call ``decided(_:)``.
            case decide(Manifest, [RelativePath])
            /// Open the part file of entry `index`, keeping its first `offset` bytes.
            case openFile(index: Int, offset: UInt64)
            /// Write these bytes of entry `index` at `offset`.
            case write(index: Int, offset: UInt64, data: Data)
            /// Every byte of entry `index` is in, and the sender says its SHA-256 is `sha256`:
            /// verify it and give it its name, then call ``fileFinished(_:)``.
            case finishFile(index: Int, sha256: String)
            /// Create the (possibly empty) folder of entry `index`.
            case makeDirectory(index: Int)
            /// Entry `index` is already in the inbox: none of its bytes will be written (the free
            /// space promised for it can be given back).
            case alreadyHeld(index: Int)
            /// Close the connection over this error, first sending it to the sender as a failure
            /// frame when `tellPeer` (not when the sender itself gave up).
            case fail(PeerTransferError, tellPeer: Bool)
            /// The exchange is over: close the connection cleanly.
            case close
            /// The sender identified itself and the policy admits it: take one of the daemon's
            /// transfer slots, then call ``slot(refused:)``.
            case takeSlot
            /// The policy takes files only from known senders, and this sender's key is not
            /// trusted here: tell it so and close (counted, not logged each time).
            case turnAway
            /// No transfer slot for this sender, for the reason given: tell it the receiver is
            /// busy and close.
            case refuseBusy(ReceiverService.AdmissionStateMachine.Busy)
        }

        private struct FileState {
            var size: UInt64
            /// The next byte expected; nil until the first chunk says where the sender resumes.
            var next: UInt64?
            /// How far the sender may resume: the whole chunks the receiver reported having.
            var resumeLimit: UInt64
            /// The digest of the file already in the inbox under this name, as the answer said.
            var existing: String?
            var finishing = false
        }

        private struct Receiving {
            var manifest: Manifest
            var paths: [RelativePath]
            var verified = 0
            var failed = 0
            var senderDone = false
        }

        private enum State {
            case awaitingHello
            /// The hello was admitted by the policy; a slot is being taken.
            case awaitingSlot(Hello)
            case awaitingManifest
            case deciding(Manifest, [RelativePath])
            case receiving(Receiving)
            case finished
        }

        private var state = State.awaitingHello
        /// The accepted files not yet finished, while receiving. Kept outside `state`, where each
        /// change would copy the whole dictionary (an enum payload is changed by copying it out
        /// and back): with 10,000 files, that made every chunk cost O(files).
        private var open: [Int: FileState] = [:]
        /// The file whose chunks are arriving (started, not yet complete): files come one after
        /// another, so a receiver holds one open file per connection, whatever the sender sends.
        private var inProgress: Int?
        private let hello: Hello
        /// Whether only senders whose key is trusted here may offer anything (`--accept known`).
        private let onlyKnownSenders: Bool
        /// Whether the key the sender proved in the handshake is trusted here.
        private var senderIsTrusted = false

        /// A machine that answers the sender's hello with `hello`; `onlyKnownSenders`: a sender
        /// whose key is not trusted is turned away at its hello, before it takes a slot.
        init(hello: Hello, onlyKnownSenders: Bool = false) {
            self.hello = hello
            self.onlyKnownSenders = onlyKnownSenders
        }

        /// The TLS handshake is done: the sender proved a key, trusted here or not.
        mutating func identified(trusted: Bool) {
            guard case .awaitingHello = state else {
                assertionFailure("identified(trusted:) in \(stateName)")
                return
            }
            senderIsTrusted = trusted
        }

        /// The shell tried to take a transfer slot for this sender (``Action/takeSlot``).
        /// `refused`: nil when it took one, or why it is refused as busy.
        mutating func slot(refused: ReceiverService.AdmissionStateMachine.Busy?) -> [Action] {
            guard case .awaitingSlot(let peer) = state else {
                assertionFailure("slot(refused:) \(stateName)")
                return []
            }
            if let refused {
                state = .finished
                return [.refuseBusy(refused)]
            }
            guard peer.protocolVersion == TransferLimits.protocolVersion else {
                return fail(
                    .protocolViolation(
                        "protocol version \(peer.protocolVersion) is not spoken here (this receiver speaks \(TransferLimits.protocolVersion))"
                    ))
            }
            state = .awaitingManifest
            return [.reply(.message(.hello, hello))]
        }

        /// True once the exchange ended, cleanly or not.
        var isFinished: Bool {
            if case .finished = state { return true }
            return false
        }

        /// Whether a frame of `kind` and `length` bytes may come now, judged from its header alone,
        /// before any of its payload is kept: before the offer is answered only a hello, then a
        /// manifest, and a failure are due (before the hello, at most
        /// ``TransferLimits/maximumHello`` bytes), so a peer cannot make the receiver hold a
        /// megabyte chunk, or 16 MiB of anything, before it said who it is.
        /// - Throws: ``PeerTransferError/protocolViolation(_:)`` for a kind not due now,
        ///   ``PeerTransferError/limit(_:)`` for a hello over its limit.
        func admit(_ kind: Frame.Kind, length: Int) throws {
            let due: [Frame.Kind]
            switch state {
            case .awaitingHello:
                due = [.hello, .failure]
                if due.contains(kind) && length > TransferLimits.maximumHello {
                    throw PeerTransferError.limit(
                        "a \(kind) message of \(length) bytes before the hello (the limit is \(TransferLimits.maximumHello))"
                    )
                }
            case .awaitingSlot: due = []  // (the shell takes the slot before it reads on)
            case .awaitingManifest: due = [.manifest, .failure]
            case .deciding: due = [.failure]
            case .receiving, .finished: return  // judged whole, by received(_:)
            }
            guard due.contains(kind) else {
                throw PeerTransferError.protocolViolation("an unexpected \(kind) message \(stateName)")
            }
        }

        // MARK: Events

        /// A frame arrived from the sender.
        mutating func received(_ frame: Frame) -> [Action] {
            do {
                switch (state, frame.kind) {
                case (.awaitingHello, .hello):
                    let peer = try frame.decode(Hello.self)
                    // The policy first: a sender turned away learns nothing more of this
                    // receiver, and takes no slot.
                    if onlyKnownSenders && !senderIsTrusted {
                        state = .finished
                        return [.turnAway]
                    }
                    state = .awaitingSlot(peer)
                    return [.takeSlot]
                case (.awaitingManifest, .manifest):
                    let manifest = try frame.decode(Manifest.self)
                    let paths = try manifest.validate()
                    state = .deciding(manifest, paths)
                    return [.decide(manifest, paths)]
                case (.receiving(var receiving), .chunk):
                    let actions = try chunk(ChunkFrame(frame), in: &receiving)
                    state = .receiving(receiving)
                    return actions
                case (.receiving(var receiving), .fileEnd):
                    let actions = try fileEnd(FileEnd(frame), in: &receiving)
                    state = .receiving(receiving)
                    return actions
                case (.receiving(var receiving), .done):
                    guard !receiving.senderDone else {
                        throw PeerTransferError.protocolViolation("a second done message")
                    }
                    _ = try frame.decode(Done.self)
                    receiving.senderDone = true
                    // Files the sender never completed count as failed.
                    let unfinished = open.filter { !$0.value.finishing }
                    receiving.failed += unfinished.count
                    open = open.filter { $0.value.finishing }
                    state = .receiving(receiving)
                    return unfinished.keys.sorted().map {
                        .reply(
                            .message(
                                .fileResult,
                                FileResult(
                                    index: $0, verified: false, storedAs: nil,
                                    error: "the sender stopped before the end of the file")))
                    } + endIfSettled()
                case (_, .failure):
                    let failure = try frame.decode(Failure.self)
                    state = .finished
                    return [.fail(Self.senderStopped(failure), tellPeer: false)]
                default:
                    throw PeerTransferError.protocolViolation("an unexpected \(frame.kind) message \(stateName)")
                }
            } catch let error as PeerTransferError {
                return fail(error)
            } catch {
                return fail(.runtime("\(error)"))
            }
        }

        /// The shell judged the manifest: `answer` lists the accepted entries and what the inbox
        /// already has of each. An answer accepting nothing declines the transfer.
        mutating func decided(_ answer: Answer) -> [Action] {
            guard case .deciding(let manifest, let paths) = state else {
                assertionFailure("decided(_:) \(stateName): the shell asks for a decision once")
                return []
            }
            if answer.accepted.isEmpty {
                // (The shell sends a judge's full decline as a refusal, with its cause.)
                return fail(.declined(answer.reason ?? "the receiver declined the transfer"))
            }
            let receiving = Receiving(manifest: manifest, paths: paths)
            var actions: [Action] = [.reply(.message(.answer, answer))]
            for entry in answer.accepted {
                guard manifest.entries.indices.contains(entry.index) else { continue }
                let offered = manifest.entries[entry.index]
                switch offered.kind {
                case .directory:
                    actions.append(.makeDirectory(index: entry.index))
                case .file:
                    let limit = min(UInt64(entry.have.count) * UInt64(manifest.chunkSize), offered.size)
                    open[entry.index] = FileState(
                        size: offered.size, next: nil, resumeLimit: limit, existing: entry.existing)
                }
            }
            state = .receiving(receiving)
            return actions
        }

        /// The shell refused the manifest before deciding (not enough space, for example).
        mutating func refused(_ error: PeerTransferError) -> [Action] {
            guard case .deciding = state else {
                assertionFailure("refused(_:) \(stateName)")
                return []
            }
            return fail(error)
        }

        /// The sender stopped (cancelled, interrupted) while its offer was being decided: the
        /// exchange ends without an answer, and without a failure frame back (it waits for
        /// none).
        mutating func senderLeft(_ error: PeerTransferError) -> [Action] {
            guard case .deciding = state else {
                assertionFailure("senderLeft(_:) \(stateName)")
                return []
            }
            state = .finished
            return [.fail(error, tellPeer: false)]
        }

        /// Files verified and failed so far.
        var summaryCounts: (verified: Int, failed: Int) {
            if case .receiving(let receiving) = state { return (receiving.verified, receiving.failed) }
            return (finishedCounts.verified, finishedCounts.failed)
        }
        private var finishedCounts = (verified: 0, failed: 0)

        /// The shell verified (or failed to verify) entry `result.index`.
        mutating func fileFinished(_ result: FileResult) -> [Action] {
            // Late: the exchange failed or ended while the shell verified the file (nothing to say).
            guard case .receiving(var receiving) = state, open[result.index]?.finishing == true else { return [] }
            open[result.index] = nil
            if result.verified { receiving.verified += 1 } else { receiving.failed += 1 }
            state = .receiving(receiving)
            return [.reply(.message(.fileResult, result))] + endIfSettled()
        }

        /// The connection ended or failed: whatever was in progress is over. Returns the error to
        /// report, nil when the exchange had finished.
        mutating func connectionEnded() -> PeerTransferError? {
            if case .receiving(let receiving) = state { finishedCounts = (receiving.verified, receiving.failed) }
            defer { state = .finished }
            switch state {
            case .finished: return nil
            case .receiving(let receiving) where receiving.senderDone: return nil
            case .receiving: return .interrupted("the sender ended the connection during the transfer")
            default: return .runtime("the sender's connection ended \(stateName)")
            }
        }

        /// What the sender's failure frame says: a cancelled send (its part files are then
        /// removed), a stopped one (kept, to resume), or another reason to give up;
        /// `beforeTheAnswer` while its offer was still being decided (`whileAsking`: put to a
        /// person or a hook, whose question is withdrawn).
        static func senderStopped(
            _ failure: Failure, beforeTheAnswer: Bool = false, whileAsking: Bool = false
        ) -> PeerTransferError {
            let when =
                !beforeTheAnswer
                ? "" : " before its offer was answered" + (whileAsking ? "; its question was withdrawn" : "")
            switch failure.code {
            case SendStop.cancelled.wireCode: return .cancelled("the sender cancelled the send" + when)
            case SendStop.interrupted.wireCode: return .interrupted("the sender stopped the send" + when)
            default: return .runtime("the sender gave up: \(Terminal.escapePeerText(failure.message))")
            }
        }

        // MARK: Internals

        private mutating func chunk(_ chunk: ChunkFrame, in receiving: inout Receiving) throws -> [Action] {
            let index = Int(chunk.index)
            guard !receiving.senderDone else {
                throw PeerTransferError.protocolViolation("a chunk after the done message")
            }
            guard var file = open[index], !file.finishing else {
                throw PeerTransferError.protocolViolation(
                    "a chunk for entry \(index), which is not accepted or already complete")
            }
            let chunkSize = UInt64(receiving.manifest.chunkSize)
            let expectedLength = min(chunkSize, file.size &- chunk.offset)
            guard chunk.offset < file.size, chunk.offset % chunkSize == 0, UInt64(chunk.data.count) == expectedLength
            else {
                throw PeerTransferError.protocolViolation(
                    "a chunk of \(chunk.data.count) bytes at \(chunk.offset) for entry \(index), which is \(file.size) bytes in chunks of \(chunkSize)"
                )
            }
            var actions: [Action] = []
            if let next = file.next {
                guard chunk.offset == next else {
                    throw PeerTransferError.protocolViolation(
                        "entry \(index) skipped from byte \(next) to \(chunk.offset)")
                }
            } else {
                if let current = inProgress, current != index {
                    throw PeerTransferError.protocolViolation(
                        "entry \(index) started before entry \(current) was complete (files go one after another)")
                }
                guard chunk.offset <= file.resumeLimit else {
                    throw PeerTransferError.protocolViolation(
                        "entry \(index) resumed at \(chunk.offset), past the \(file.resumeLimit) bytes the receiver has"
                    )
                }
                actions.append(.openFile(index: index, offset: chunk.offset))
                inProgress = index
            }
            actions.append(.write(index: index, offset: chunk.offset, data: chunk.data))
            file.next = chunk.offset + UInt64(chunk.data.count)
            open[index] = file
            return actions
        }

        /// The sender ended entry `end.index`: after all of its bytes, or, for a file the inbox
        /// already holds with the same digest (or an empty one), with no bytes at all.
        private mutating func fileEnd(_ end: FileEnd, in receiving: inout Receiving) throws -> [Action] {
            let index = Int(end.index)
            guard !receiving.senderDone else {
                throw PeerTransferError.protocolViolation("a fileEnd after the done message")
            }
            guard var file = open[index], !file.finishing else {
                throw PeerTransferError.protocolViolation(
                    "the end of entry \(index), which is not accepted or already ended")
            }
            var actions: [Action] = []
            if end.sha256 == FileEnd.withdrawn {
                // The sender takes the file back, at any point of it: it fails alone.
                if let current = inProgress, current != index {
                    throw PeerTransferError.protocolViolation(
                        "entry \(index) ended before entry \(current) was complete (files go one after another)")
                }
                inProgress = nil
                guard file.next != nil else {
                    open[index] = nil
                    receiving.failed += 1
                    return [
                        .reply(
                            .message(
                                .fileResult,
                                FileResult(
                                    index: index, verified: false, storedAs: nil,
                                    error: Self.withdrawnReason)))
                    ]
                }
                file.finishing = true
                open[index] = file
                return [.finishFile(index: index, sha256: end.sha256)]
            }
            if let next = file.next {
                guard next == file.size else {
                    throw PeerTransferError.protocolViolation("entry \(index) ended at byte \(next) of \(file.size)")
                }
            } else {
                if let current = inProgress, current != index {
                    throw PeerTransferError.protocolViolation(
                        "entry \(index) ended before entry \(current) was complete (files go one after another)")
                }
                if let existing = file.existing, existing == end.sha256 {
                    // The inbox already holds this very file under its name: nothing to write.
                    open[index] = nil
                    receiving.verified += 1
                    return [
                        .alreadyHeld(index: index),
                        .reply(
                            .message(
                                .fileResult,
                                FileResult(
                                    index: index, verified: true,
                                    storedAs: receiving.paths[index].description, error: nil))),
                    ]
                }
                guard file.size == 0 else {
                    throw PeerTransferError.protocolViolation(
                        "entry \(index) ended before its first byte (it is \(file.size) bytes)")
                }
                file.next = 0
                actions.append(.openFile(index: index, offset: 0))
            }
            file.finishing = true
            inProgress = nil
            open[index] = file
            return actions + [.finishFile(index: index, sha256: end.sha256)]
        }

        /// Why a file the sender withdrew failed.
        static let withdrawnReason =
            "the file changed while the sender read it, so the sender withdrew it; nothing of it was kept"

        /// The summary and the end, once the sender is done and no file is being finished.
        private mutating func endIfSettled() -> [Action] {
            guard case .receiving(let receiving) = state, receiving.senderDone, open.isEmpty else { return [] }
            finishedCounts = (receiving.verified, receiving.failed)
            state = .finished
            return [
                .reply(.message(.summary, Summary(verified: receiving.verified, failed: receiving.failed))), .close,
            ]
        }

        private mutating func fail(_ error: PeerTransferError) -> [Action] {
            if case .receiving(let receiving) = state { finishedCounts = (receiving.verified, receiving.failed) }
            state = .finished
            return [.fail(error, tellPeer: true)]
        }

        private var stateName: String {
            switch state {
            case .awaitingHello: return "before the hello"
            case .awaitingSlot: return "while a transfer slot was being taken"
            case .awaitingManifest: return "before the manifest"
            case .deciding: return "while the manifest was being judged"
            case .receiving(let receiving):
                return receiving.senderDone ? "after the sender finished" : "during the transfer"
            case .finished: return "after the end"
            }
        }
    }
}
