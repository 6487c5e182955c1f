import Foundation
import Logging
import PeerTransferCore
import Salut
import SalutTools

/// Puts offers to a person or a hook, one at a time.
struct OfferJudge: Sendable {
    let hook: String?
    let logger: Logger
    /// Where "a" (always) records the sender's key as trusted.
    var knownPeersFile: String?
    /// The web page's questions (`serve --web`): offers are put there, not to the terminal.
    var web: WebQuestions?
    private static let turn = AsyncTurn()

    func judge(_ offer: IncomingOffer) async -> Judgement {
        // The question's time counts from the offer, its wait for its turn included: its
        // sender waits for the answer only so long.
        let arrived = Date()
        // Withdrawn while it waited for its turn (its sender left, or the daemon stops).
        guard await Self.turn.take() else { return .declined(Self.stopped, by: .noAnswer) }
        defer { Self.turn.release() }
        if Task.isCancelled { return .declined(Self.stopped, by: .noAnswer) }
        let timeLeft = Self.questionLimit - Date().timeIntervalSince(arrived)
        guard timeLeft >= Self.shortestQuestion else {
            return .declined(
                "no answer: the questions before it took the \(Int(Self.questionLimit)) s this offer had", by: .noAnswer
            )
        }
        if let hook { return await runHook(hook, offer: offer) }
        if let web { return await ask(offer, on: web, within: timeLeft) }
        return await askAtTheTerminal(offer, within: timeLeft)
    }

    /// Puts the offer on the web page (`serve --web`) and waits for its answer.
    private func ask(_ offer: IncomingOffer, on web: WebQuestions, within timeLeft: TimeInterval) async -> Judgement {
        let all = Set(offer.manifest.entries.indices)
        logger.notice("an offer from \(offer.introduction) waits for an answer on the web page")
        switch await web.ask(offer, within: timeLeft) {
        case .yes?: return Judgement(accepted: all)
        case .always?:
            trustForGood(offer)
            return Judgement(accepted: all)
        case .no?: return .declined("declined by the person at the receiver")
        case nil:
            // Withdrawn: the next offer waits a moment before it takes this one's place on
            // the page, so that a click meant for this one never answers another.
            if Task.isCancelled { await Self.pause(Self.afterWithdrawal) }
            return .declined(
                Task.isCancelled
                    ? Self.stopped
                    : "no answer: no one answered on the receiver's web page within \(Int(Self.questionLimit)) s",
                by: .noAnswer)
        }
    }

    /// Asks the person at the terminal, with the choices of `OfferQuestion`, until an answer,
    /// the time left, or the offer's withdrawal.
    private func askAtTheTerminal(_ offer: IncomingOffer, within timeLeft: TimeInterval) async -> Judgement {
        let all = Set(offer.manifest.entries.indices)
        guard isatty(0) == 1 else {
            logger.warning(
                "could not ask anyone about an offer from \(offer.senderName): --accept ask has no terminal and no --hook"
            )
            return .declined(
                "no one to ask: the receiver runs --accept ask with no terminal and no --hook, so offers are put to nobody",
                by: .cannotAsk)
        }
        // What is offered and the choices (see `OfferQuestion`: nothing the sender chose comes
        // before its key, and no offered name can pass for a line of the tool's own).
        let question = OfferQuestion(offer, canTrust: knownPeersFile != nil)
        guard let stop = CancelPipe() else {
            logger.error(
                "could not ask about an offer from \(offer.senderName): no descriptor left to wait for the answer")
            return .declined(
                "not asked: the receiver could not wait for an answer (out of descriptors)", by: .cannotAsk)
        }
        defer { stop.close() }
        // Nothing typed before the question answers it (an answer meant for a question that
        // was withdrawn, say).
        if tcflush(0, TCIFLUSH) != 0 {
            logger.warning("cannot clear what was typed before the question: \(String(cString: strerror(errno)))")
        }
        // Log lines wait until the question is answered (or withdrawn).
        let (chosen, always) = await QuestionGate.whileAsking {
            await choice(asking: question, of: all, until: Date().addingTimeInterval(timeLeft), stop: stop)
        }
        // The prompt's line ends, unanswered: withdrawn (its sender left, or the daemon stops),
        // or out of time.
        // Said on a line of its own, naming the offer: log lines may have come in between.
        if chosen == nil {
            let withdrawn = Task.isCancelled
            writeAll(
                withdrawn
                    ? "\n(withdrawn: the offer from \(offer.senderName) [key \(offer.senderKey.prefix(16))…])\n" : "\n",
                to: 2)
            if withdrawn {
                // The person may be typing the answer to this question right now: the next one
                // waits a moment (holding the turn), and what was typed meanwhile is cleared
                // before it is asked, so that a "y" meant for this offer never accepts another.
                await Self.pause(Self.afterWithdrawal)
            }
            return .declined(
                Task.isCancelled
                    ? Self.stopped
                    : "no answer: no one answered the question at the receiver within \(Int(Self.questionLimit)) s",
                by: .noAnswer)
        }
        if always { trustForGood(offer) }
        let accepted = chosen ?? []
        return accepted.isEmpty
            ? .declined("declined by the person at the receiver")
            : Judgement(accepted: accepted, cause: .person)
    }

    /// Shows `question` and reads answers until one chooses (all of `all`, none, or a pick) or
    /// the time runs out or the offer is withdrawn (nil). True with an "always" answer.
    private func choice(
        asking question: OfferQuestion, of all: Set<Int>, until deadline: Date, stop: CancelPipe
    ) async -> (Set<Int>?, Bool) {
        var chosen: Set<Int>?
        var always = false
        writeAll(question.text, to: 2)
        var answer = await readAnswer(until: deadline, stop: stop)
        // An answer that is not one of the choices is asked again, never taken as a no.
        asking: while let line = answer {
            switch OfferAnswer(line) {
            case .yes: chosen = all
            case .no: chosen = []
            case .always:
                // (From a sender trusted already: a yes.)
                chosen = all
                always = question.offersAlways
            case .pick:
                writeAll(question.pickList, to: 2)
                while let picked = await readAnswer(until: deadline, stop: stop) {
                    if let numbers = question.picked(picked) {
                        chosen = numbers
                        break asking
                    }
                    writeAll(question.pickReminder, to: 2)
                }
                answer = nil
                break asking
            case .unclear:
                writeAll(question.reminder, to: 2)
                answer = await readAnswer(until: deadline, stop: stop)
                continue asking
            }
            break asking
        }
        return (chosen, always)
    }

    /// Trusts the offer's sender key from now on, as `peerxfer trust KEY` would, labelled with
    /// the name it claims (an "always" answer).
    private func trustForGood(_ offer: IncomingOffer) {
        guard !offer.senderTrusted, let knownPeersFile else { return }
        do {
            try KnownPeers.update(at: knownPeersFile) {
                $0.trusted[offer.senderKey] = $0.trusted[offer.senderKey] ?? offer.senderName
            }
            logger.notice(
                "the key \(offer.senderKey) is trusted from now on; `peerxfer untrust \(offer.senderKey)` forgets it")
        } catch {
            logger.error("cannot record the key \(offer.senderKey) as trusted: \(error)")
        }
    }

    /// A line typed at the terminal before `deadline`; nil when the time ran out or the wait
    /// was stopped (the offer withdrawn, the daemon stopping). Waited for on a thread of its
    /// own: the shared pool of async threads keeps serving other peers meanwhile.
    private func readAnswer(until deadline: Date, stop: CancelPipe) async -> String? {
        await withTaskCancellationHandler {
            await onThreadOfItsOwn { () -> String? in
                let left = deadline.timeIntervalSinceNow
                guard left > 0 else { return nil }
                var fds = [
                    pollfd(fd: 0, events: Int16(POLLIN), revents: 0),
                    pollfd(fd: stop.readEnd, events: Int16(POLLIN), revents: 0),
                ]
                guard poll(&fds, 2, Int32(left * 1000)) > 0, fds[1].revents == 0, fds[0].revents != 0
                else { return nil }
                return readLine()
            }
        } onCancel: {
            stop.wake()
        }
    }

    /// Seconds a person has to answer a question.
    static let questionLimit = TransferLimits.answerTime
    /// The least time left worth asking a person with (an offer that waited behind others).
    static let shortestQuestion: TimeInterval = 5

    /// Why an offer ends unanswered when the daemon stops or its sender left.
    static let stopped = "not answered: the receiver stopped before the question was answered"

    /// The entries the hook accepts: all when it exits 0 printing nothing, those whose paths
    /// it prints when it exits 0 printing some, none otherwise (or after 120 s, as no answer).
    private func runHook(_ command: String, offer: IncomingOffer) async -> Judgement {
        var environment = ProcessInfo.processInfo.environment
        environment["PEERXFER_SENDER"] = offer.senderName
        environment["PEERXFER_KEY"] = offer.senderKey
        environment["PEERXFER_LABEL"] = offer.senderLabel ?? ""
        environment["PEERXFER_TRUSTED"] = offer.senderTrusted ? "yes" : "no"
        environment["PEERXFER_FILES"] = "\(offer.manifest.fileCount)"
        environment["PEERXFER_BYTES"] = "\(offer.manifest.totalBytes)"
        let listing = offer.manifest.entries.map { Terminal.escape($0.path) }.joined(separator: "\n") + "\n"
        let outcome = await HookRunner.run(
            command, environment: environment, input: Data(listing.utf8), limit: Self.hookLimit)
        if Task.isCancelled {
            logger.info("the accept hook for the offer from \(offer.senderName) was ended: the offer was withdrawn")
            return .declined(Self.stopped, by: .noAnswer)
        }
        if let failure = outcome.failure {
            logger.error("the accept hook could not start: \(failure)")
            return .declined("not asked: the receiver's accept hook could not start", by: .cannotAsk)
        }
        let entries = offer.manifest.entries
        let judgement = AcceptHookVerdict.judgement(
            status: outcome.status, printed: outcome.printed, entries: entries, limit: Self.hookLimit)
        if outcome.status != 0 {
            let how = outcome.status.map { "status \($0)" } ?? "killed, or out of its \(Int(Self.hookLimit)) s"
            logger.info("the accept hook declined the offer from \(offer.senderName) (\(how))")
        } else {
            logger.info(
                "the accept hook accepted \(judgement.accepted.count) of \(entries.count) entries from \(offer.senderName)"
            )
        }
        return judgement
    }

    /// How long the next question waits after one is withdrawn.
    static let afterWithdrawal: TimeInterval = 1.5

    /// Waits `seconds`, even in a cancelled task (the turn is held meanwhile).
    private static func pause(_ seconds: TimeInterval) async {
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            DispatchQueue.global().asyncAfter(deadline: .now() + seconds) { done.resume() }
        }
    }

    /// Seconds a hook has to decide.
    static let hookLimit = TransferLimits.answerTime
}
