import Foundation
import Salut

extension Sender {
    /// Offers `plan` over `pair`, an open connection to the receiver `name` (whose key was
    /// judged), and sends what it accepts; a receiver silent for longer than its bound is
    /// left. The part of ``send(_:to:events:)`` after the connection is made (in-process
    /// tests drive it over a connection in memory).
    /// - Throws: ``PeerTransferError``: what the receiver refused (`declined`, `trust`, …) as it
    ///   said it, a failed connection as `runtime` naming `name`.
    func transfer(
        _ plan: TransferPlan, over pair: BoundStreamPair, to name: String,
        events: @escaping @Sendable (SendEvent) -> Void
    ) async throws -> SendReport {
        let watchdog = ProgressWatchdog(bound: answerBound)
        let watching = Task { await watchdog.watch(pair, what: "from the receiver") }
        defer { watching.cancel() }
        let conversation = Locked(ConversationStateMachine(offering: plan.manifest.entries))
        let (stopper, cancellationMeans) = (self.stopper ?? SendStopper(), self.cancellationMeans)
        stopper.connected(pair)
        do {
            return try await withTaskCancellationHandler {
                // Not cancelled with the caller: a cancellation stops the send through the
                // stopper, between two frames, so that the receiver is told why (a write cut
                // by the cancellation could leave half a frame, after which nothing can be said).
                try await Task { [self] in
                    try await exchange(
                        plan, over: pair, conversation: conversation, watchdog: watchdog, stopper: stopper,
                        events: events)
                }.value
            } onCancel: {
                stopper.stop(cancellationMeans())
            }
        } catch  where stopper.reason != nil {
            // The reason goes out before the connection is closed, and the receiver closes
            // first (a close with its bytes unread would reset the connection, and a reset can
            // lose what it has not read yet): the stopper's grace bounds both waits.
            _ = await onThreadOfItsOwn {
                stopper.waitUntilTold(seconds: Double(SendStopper.grace.components.seconds) + 1)
            }
            await Self.readToTheEnd(pair.input)
            throw Self.stopped(stopper.reason!, name: name, told: stopper.toldTheReceiver)
        } catch {
            throw conversation.withLock {
                $0.failure(of: error, expired: watchdog.expired, answerBound: answerBound, name: name)
            }
        }
    }

    /// Reads `input` until its end or its failure (the stopper resets the connection by its
    /// deadline, which ends this).
    private static func readToTheEnd(_ input: InputStream) async {
        let scratch = UnsafeMutableRawBufferPointer.allocate(byteCount: 16 * 1024, alignment: 16)
        defer { scratch.deallocate() }
        while let count = try? await input.read(into: scratch), count > 0 {}
    }

    /// The error of a send stopped for `reason`, for the person who stopped it; `told`: whether
    /// the receiver was told.
    static func stopped(_ reason: SendStop, name: String, told: Bool) -> PeerTransferError {
        let receiver = "\"\(Terminal.escape(name))\""
        switch (reason, told) {
        case (.cancelled, true):
            return .cancelled("cancelled; \(receiver) was told, and removes what it received of this send")
        case (.cancelled, false):
            return .cancelled(
                "cancelled; \(receiver) could not be told, and keeps what it received of this send until its daemon clears part files no one came back for"
            )
        case (.interrupted, true):
            return .interrupted("stopped; \(receiver) keeps what it received, and the same send resumes from there")
        case (.interrupted, false):
            return .interrupted(
                "stopped (\(receiver) could not be told); the same send resumes from what it received")
        }
    }

    /// The conversation over an open connection, driven by `conversation` (see
    /// ``ConversationStateMachine``): hellos, the offer and its answer, then the accepted files
    /// sent by one task while another reads the receiver's verdicts (checked by a
    /// ``VerdictStateMachine``), and the report. One method per action.
    private func exchange(
        _ plan: TransferPlan, over pair: BoundStreamPair, conversation: Locked<ConversationStateMachine>,
        watchdog: ProgressWatchdog, stopper: SendStopper, events: @escaping @Sendable (SendEvent) -> Void
    ) async throws -> SendReport {
        var reader = FrameReader(pair.input)
        let hello = Hello(
            protocolVersion: TransferLimits.protocolVersion, device: configuration.deviceID, name: displayName)
        try await stopper.write(Frame.message(.hello, hello).encoded, to: pair.output)
        // A hello is small: the receiver is held to what it holds senders to.
        let peerHello = try await Self.expect(.hello, Hello.self, from: &reader, atMost: TransferLimits.maximumHello)
        var action = conversation.withLock { $0.receivedHello(peerHello) }
        var outgoing: [Outgoing] = []
        var sending: Sending?
        defer { sending?.files.release() }  // (once released, later calls do nothing)
        while true {
            switch action {
            case .offer:
                try await stopper.write(Frame.message(.manifest, plan.manifest).encoded, to: pair.output)
                let answer = try await Self.expect(.answer, Answer.self, from: &reader)
                action = conversation.withLock { $0.receivedAnswer(answer) }
            case .prepare(let answer):
                outgoing = await whatToSend(plan, answer: answer, watchdog: watchdog)
                let prepared = outgoing.map {
                    ConversationStateMachine.Prepared(
                        index: $0.index, offset: $0.offset, alreadyThere: $0.unchanged != nil)
                }
                action = conversation.withLock { $0.prepared(prepared) }
            case .send(let tally):
                let started = startSending(
                    plan, tally: tally, reader: reader, pair: pair, watchdog: watchdog, stopper: stopper, events: events
                )
                sending = started
                action = await whileSending(started, conversation: conversation) {
                    for item in outgoing { try await started.files.send(item) }
                    return conversation.withLock { $0.sentAll() }
                }
            case .finish:
                guard let sending else { preconditionFailure("finishing a send that never started") }
                action = await whileSending(sending, conversation: conversation) {
                    try await stopper.write(Frame.message(.done, Done()).encoded, to: pair.output, last: true)
                    // Nothing more to send: our end of the data (close_notify, then FIN) goes
                    // out behind the done message, and the receiver's verdicts still come in.
                    // Whether it all arrived, only the receiver's summary tells (a receiver that
                    // has everything may answer and close before our half-close).
                    try? await pair.finishSending()
                    sending.files.release()
                    let (verified, failed) = try await sending.results.value
                    return conversation.withLock {
                        $0.summarized(verified: verified, failed: failed, bytesSent: sending.files.sent)
                    }
                }
            case .report(let report):
                return report
            case .fail(let error):
                throw error
            }
        }
    }

    /// The two halves of the sending: the task reading the verdicts, the files going out
    /// (used by the exchange's task alone).
    private struct Sending {
        var results: Task<(verified: Int, failed: [String]), any Error>
        var files: FileSender
    }

    /// Reports the answer as `tally` counts it, and starts reading the verdicts.
    private func startSending(
        _ plan: TransferPlan, tally: ConversationStateMachine.Tally, reader: FrameReader, pair: BoundStreamPair,
        watchdog: ProgressWatchdog, stopper: SendStopper, events: @escaping @Sendable (SendEvent) -> Void
    ) -> Sending {
        events(
            .answered(
                accepted: tally.accepted.count, acceptedFiles: tally.acceptedFiles, declined: tally.declined.count,
                alreadyThere: tally.alreadyThere, bytesToSend: tally.bytesToSend,
                reason: tally.reason.map(Terminal.escapePeerText)))
        let verdicts = Locked(VerdictStateMachine(entries: plan.manifest.entries, accepted: tally.accepted))
        let results = readVerdicts(from: reader, into: verdicts, pair: pair, watchdog: watchdog, events: events)
        let files = FileSender(
            plan, output: pair.output, stopper: stopper, watchdog: watchdog, verdicts: verdicts,
            total: tally.bytesToSend, events: events)
        return Sending(results: results, files: files)
    }

    /// Runs `step` of the sending; a failure in it (a write, or the wait for the summary) is
    /// reported to `conversation`, with the receiver's reason when it sent one (the reading
    /// task gets a moment to read what came before the connection broke: a cancelled read
    /// would drop it unread).
    private func whileSending(
        _ sending: Sending, conversation: Locked<ConversationStateMachine>,
        _ step: () async throws -> ConversationStateMachine.Action
    ) async -> ConversationStateMachine.Action {
        do {
            return try await step()
        } catch {
            sending.files.release()
            var receiverSaid: PeerTransferError?
            if case .failure(let receiverError as PeerTransferError) = await Self.outcome(
                of: sending.results, within: .seconds(2))
            {
                receiverSaid = receiverError
            }
            return conversation.withLock { $0.sendingFailed(error, receiverSaid: receiverSaid) }
        }
    }

    /// What to send of each accepted file, found on a thread of its own (it hashes what the
    /// receiver already has: part files to resume, files already in its inbox). That may take
    /// a while before the first frame: the receiver allows for it (see
    /// `TransferLimits.hashingAllowance`), and so does this side.
    private func whatToSend(_ plan: TransferPlan, answer: Answer, watchdog: ProgressWatchdog) async -> [Outgoing] {
        watchdog.touch(
            bound: idleBound
                + TransferLimits.hashingAllowance(
                    for: answer, chunkSize: plan.manifest.chunkSize, sizes: plan.manifest.entries.map(\.size)))
        let outgoing = await onThreadOfItsOwn { Self.outgoing(plan, answer: answer) }
        watchdog.touch(bound: idleBound)
        return outgoing
    }

    /// Reads the receiver's verdicts while the files go out, on a task of its own: what it
    /// verified and what failed, once it summed up. A receiver that fails the transfer, or
    /// breaks the protocol, is sent nothing more: the connection is reset, which ends the
    /// sending at once, and the task's error is what the send reports.
    private func readVerdicts(
        from reader: FrameReader, into verdicts: Locked<VerdictStateMachine>, pair: BoundStreamPair,
        watchdog: ProgressWatchdog, events: @escaping @Sendable (SendEvent) -> Void
    ) -> Task<(verified: Int, failed: [String]), any Error> {
        Task {
            var reader = reader
            do {
                while true {
                    let frame = try await reader.next()
                    if frame != nil { watchdog.touch() }
                    let action = verdicts.withLock { machine in
                        frame.map { machine.received($0) } ?? machine.connectionEnded()
                    }
                    switch action {
                    case .verified(let index, let path, let storedAs):
                        // (Escaped where it is shown, as the path is.)
                        events(.fileVerified(index: index, path: path, storedAs: storedAs))
                    case .failed(let index, let path, let reason):
                        events(.fileFailed(index: index, path: path, reason: reason))
                    case .summarized(let verified, let failed):
                        return (verified, failed)
                    case .fail(let error):
                        throw error
                    }
                }
            } catch is CancellationError {
                throw CancellationError()  // the sending ended first (and says why)
            } catch {
                pair.reset()
                throw error
            }
        }
    }

    /// What `task` came to, waiting for it at most `bound` before it is cancelled.
    private static func outcome<T: Sendable>(
        of task: Task<T, any Error>, within bound: Duration
    ) async -> Result<T, any Error> {
        let timer = Task {
            try? await Task.sleep(for: bound)
            task.cancel()
        }
        defer { timer.cancel() }
        return await task.result
    }

    /// Reads the next frame, which must be `kind` (a failure frame becomes its error) of at
    /// most `limit` bytes: both are judged from the frame's header, before its payload is kept.
    /// - Throws: ``PeerTransferError/protocolViolation(_:)`` for another kind,
    ///   ``PeerTransferError/limit(_:)`` for a frame over `limit`.
    static func expect<M: Decodable>(
        _ kind: Frame.Kind, _ type: M.Type, from reader: inout FrameReader,
        atMost limit: Int = TransferLimits.maximumControlMessage
    ) async throws -> M {
        let admitting = { (arriving: Frame.Kind, length: Int) throws in
            guard arriving == kind || arriving == .failure else {
                throw PeerTransferError.protocolViolation("the receiver sent \(arriving) where \(kind) was due")
            }
            guard length <= limit else {
                throw PeerTransferError.limit(
                    "the receiver sent a \(arriving) message of \(length) bytes where its \(kind) was due (the limit is \(limit))"
                )
            }
        }
        guard let frame = try await reader.next(admitting: admitting) else {
            throw PeerTransferError.runtime("the receiver closed the connection (waiting for its \(kind))")
        }
        if frame.kind == .failure {
            let failure = try frame.decode(Failure.self)
            throw PeerTransferError.fromWire(code: failure.code, message: failure.message)
        }
        guard frame.kind == kind else {
            throw PeerTransferError.protocolViolation("the receiver sent \(frame.kind) where \(kind) was due")
        }
        return try frame.decode(type)
    }
}
