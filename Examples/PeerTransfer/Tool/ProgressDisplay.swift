import Foundation
import SalutStreams
import PeerTransferCore

/// Shows a transfer's progress: a redrawn line on a terminal (standard error), or JSON lines
/// on standard output for scripts.
final class ProgressDisplay: Sendable {
    private struct State {
        var started = ContinuousClock.Instant.now
        var lastDraw = ContinuousClock.Instant.now - .seconds(1)
        var currentFile = ""
        var filesDone = 0
        /// Files started in this run (the one being sent is this many), and how many will be.
        var filesStarted = 0
        var filesTotal = 0
        var entriesTotal = 0
        /// Entries left out of the offer (symlinks, names the protocol cannot carry, …).
        var skipped = 0
        var sent: UInt64 = 0
        var total: UInt64 = 0
        var fileSize: UInt64 = 0
        var fileStart: UInt64 = 0
        var fileStartSent: UInt64 = 0
        var lineShown = false
        /// While the offer waits for its answer: since when, and from whom (a line counts down).
        var waitingSince: ContinuousClock.Instant?
        var receiver = ""
    }
    private let json: Bool
    private let state = Locked(State())
    /// Seconds the receiver is looked for (`send --wait`), said while it is.
    private let lookupSeconds: Double?

    init(json: Bool, lookupSeconds: Double? = nil) {
        self.json = json
        self.lookupSeconds = lookupSeconds
    }

    func note(_ text: String) {
        if !json { printError(text) }
    }

    func skipped(_ entry: TransferPlan.Skipped) {
        if json {
            printJSON(["event": "skipped", "path": Terminal.escape(entry.path), "reason": entry.reason])
        } else {
            printError("skipped \(Terminal.escape(entry.description))")
        }
    }

    /// Records what will be offered, and lists what was left out of it.
    func planned(_ plan: TransferPlan) {
        state.withLock {
            $0.filesTotal = plan.manifest.fileCount
            $0.entriesTotal = plan.manifest.entries.count
            $0.skipped = plan.skipped.count
        }
        for skipped in plan.skipped { self.skipped(skipped) }
    }

    /// The entries offered, as recorded by ``planned(_:)``.
    var entriesTotal: Int { state.withLock { $0.entriesTotal } }

    /// Shows one event of the transfer: a JSON line, or on a terminal a line or the redrawn
    /// progress line.
    func show(_ event: SendEvent) {
        switch event {
        case .resolving(let name):
            if json {
                printJSON(["event": "resolving", "peer": name])
            } else {
                let bound = lookupSeconds.map { " (up to \(Wording.duration($0)))" } ?? ""
                printError("looking for \"\(Terminal.escape(name))\"\(bound)…")
            }
        case .connected(let name, let key, let firstUse, let renamedFrom):
            showConnected(name, key: key, firstUse: firstUse, renamedFrom: renamedFrom)
        case .answered(let accepted, let files, let declined, let there, let bytes, let reason):
            showAnswer(accepted: accepted, files: files, declined: declined, there: there, bytes: bytes, reason: reason)
        case .fileStarted(_, let path, let size, let offset):
            state.withLock {
                $0.currentFile = path
                $0.filesStarted += 1
                $0.fileSize = size
                $0.fileStart = offset
                $0.fileStartSent = $0.sent
            }
            if json {
                printJSON(["event": "file", "path": Terminal.escape(path), "size": size, "resumeAt": offset])
            } else if offset > 0 {
                // Said, so that a run after an interruption does not look like starting over.
                clearLine()
                printError(
                    "resuming \(Terminal.escape(path)) after its first \(Self.bytes(offset)) of \(Self.bytes(size)), which the receiver holds (checked chunk by chunk)"
                )
            }
        case .progress(let sent, let total):
            showProgress(sent: sent, total: total)
        case .fileVerified(_, let path, let storedAs):
            state.withLock { $0.filesDone += 1 }
            if json {
                printJSON([
                    "event": "verified", "path": Terminal.escape(path), "storedAs": Terminal.escapePeerText(storedAs),
                ])
            } else if storedAs != path {
                // Never a silent difference: the receiver kept another file under that name.
                clearLine()
                printError(
                    "\(Terminal.escape(path)) is stored as \(Terminal.escapePeerText(storedAs)): the receiver already had a file named so (other bytes, or the same from another sender), and kept both"
                )
            }
        case .fileFailed(_, let path, let reason):
            if json {
                printJSON(["event": "failed", "path": Terminal.escape(path), "reason": reason])
            } else {
                clearLine()
                printError("FAILED \(Terminal.escape(path)): \(reason)")
            }
        }
    }

    /// The receiver answered the connection: who it is, and whether its key is new here.
    private func showConnected(_ name: String, key: String, firstUse: Bool, renamedFrom: String?) {
        if json {
            var object: [String: Any] = ["event": "connected", "peer": name, "key": key, "firstUse": firstUse]
            if let renamedFrom { object["renamedFrom"] = renamedFrom }
            printJSON(object)
            // The offer is out: the receiver has this long to answer it.
            printJSON(["event": "waiting-for-answer", "peer": name, "seconds": Int(TransferLimits.answerTime)])
        } else {
            let verdict =
                firstUse
                ? "new here: pinned once it accepts this offer"
                : renamedFrom.map { "known device, pinned as \"\(Terminal.escape($0))\"" } ?? "matches its pin"
            printError("connected to \"\(Terminal.escape(name))\" (key \(key.prefix(16))…, \(verdict))")
            countDownToTheAnswer(from: Terminal.escape(name))
        }
    }

    /// The receiver answered the offer: what it takes, and what is left to send.
    private func showAnswer(accepted: Int, files: Int, declined: Int, there: Int, bytes: UInt64, reason: String?) {
        state.withLock {
            $0.total = bytes
            $0.started = .now
            $0.waitingSince = nil
        }
        clearLine()
        if json {
            var object: [String: Any] = [
                "event": "answered", "accepted": accepted, "acceptedFiles": files, "declined": declined,
                "alreadyThere": there, "bytesToSend": bytes,
            ]
            if let reason { object["reason"] = reason }
            printJSON(object)
        } else {
            let folders = accepted - files
            state.withLock { $0.filesTotal = files - there }
            var line =
                "accepted \(Wording.counted(files, "file"))\(folders > 0 ? " and \(Wording.counted(folders, "folder"))" : "")"
                + (accepted < entriesTotal
                    ? " of \(Wording.counted(entriesTotal, "entry", plural: "entries"))" : "")
                + "; \(Self.bytes(bytes)) to send"
            if there > 0 { line += ", \(Wording.counted(there, "file")) already there" }
            if let reason, declined > 0 { line += " (\(reason))" }
            printError(line)
        }
    }

    /// Bytes sent so far: the progress line (ten times a second at most, once a second in JSON).
    private func showProgress(sent: UInt64, total: UInt64) {
        let line: String? = state.withLock { state in
            state.sent = sent
            state.total = total
            let now = ContinuousClock.Instant.now
            guard now - state.lastDraw >= .milliseconds(json ? 1000 : 100) || sent == total else { return nil }
            state.lastDraw = now
            return json ? "" : Self.line(state)
        }
        guard let line else { return }
        if json {
            printJSON(["event": "progress", "sent": sent, "total": total])
        } else {
            writeAll(("\r\u{1b}[K" + line), to: 2)
            state.withLock { $0.lineShown = true }
        }
    }

    func finish(_ report: SendReport) {
        let seconds = state.withLock {
            Double(($0.started.duration(to: .now)).components.seconds) + Double(
                ($0.started.duration(to: .now)).components.attoseconds) / 1e18
        }
        let skipped = state.withLock { $0.skipped }
        if json {
            printJSON([
                "event": "done", "verified": report.verified, "failed": report.failed.count,
                "declined": report.declined.count, "bytesSent": report.bytesSent, "bytesSkipped": report.bytesSkipped,
                "skipped": skipped, "seconds": (seconds * 1000).rounded() / 1000,
            ])
        } else {
            clearLine()
            let rate = seconds > 0 ? Double(report.bytesSent) / seconds : 0
            printError(
                "done: \(report.verified) file\(report.verified == 1 ? "" : "s") verified, \(report.failed.count) failed, \(report.declined.count) declined; sent \(Self.bytes(report.bytesSent)) in \(String(format: "%.1f", seconds)) s (\(Self.bytes(UInt64(rate)))/s)\(report.bytesSkipped > 0 ? ", \(Self.bytes(report.bytesSkipped)) not needed again" : "")\(skipped > 0 ? "; \(Wording.counted(skipped, "entry", plural: "entries")) left out (listed above as skipped)" : "")"
            )
        }
    }

    /// Says, as a JSON line, why the send failed and the exit status it ends with (on a
    /// terminal the error's own line says it: the progress line is cleared for it).
    func ended(by error: PeerTransferError) {
        if json {
            printJSON([
                "event": "error", "exitCode": Int(error.exitCode), "outcome": error.outcome, "message": error.message,
            ])
        } else {
            clearLine()
        }
    }

    /// Says that the send was stopped (Ctrl-C, SIGTERM, a closed terminal) and how to go on.
    /// `told`: whether the receiver was told (it then keeps what it received, and says so).
    func interrupted(by signal: StopSignal, told: Bool) {
        let (done, sent, answered) = state.withLock { ($0.filesDone, $0.sent, $0.waitingSince == nil && $0.total > 0) }
        if json {
            printJSON(["event": "interrupted", "verified": done, "signal": signal.name, "receiverTold": told])
        } else {
            clearLine()
        }
        // On standard error in JSON mode too, as an error's message is: a person may be watching.
        // (No count: the receiver confirms small files in batches, so it may hold more than it
        // has confirmed yet.)
        let what = "peerxfer: " + (signal == .interrupt ? "interrupted" : "stopped by \(signal.name)")
        printError(
            sent > 0 || answered
                ? "\(what)\(told ? "; the receiver was told and keeps what it received" : ""): run the same command again to send the rest (what the receiver has verified is not sent again, and a file cut half way resumes)"
                : "\(what)\(told ? "; the receiver was told" : "") before anything was sent: run the same command again to send"
        )
    }

    /// Asks the person at the terminal whether to trust a receiver met for the first time,
    /// showing its name, its key and the verification code; true for "y" or "yes".
    func askToTrust(_ receiver: NewReceiver) async -> Bool {
        clearLine()
        printError(
            """
            "\(Terminal.escape(receiver.name))" is new to this device\(receiver.knownAs.map { " (its key is paired here as \"\(Terminal.escape($0))\")" } ?? ""). Anyone on the link can answer to a name, so check its key:
              key                \(receiver.key)
              verification code  \(receiver.code)
            `peerxfer identity` on that device prints its key; the receiver shows the same code when it asks about this offer.
            """)
        return await TerminalQuestion.ask("Trust this key and send? [y/N] ")
    }

    /// Counts down, on a line redrawn each second, the time the receiver has left to answer
    /// (a person may be deciding there), until the answer comes or the send ends.
    private func countDownToTheAnswer(from name: String) {
        let since = ContinuousClock.Instant.now
        state.withLock {
            $0.waitingSince = since
            $0.receiver = name
        }
        Task { [self] in
            while true {
                let waiting = state.withLock { state -> Bool in
                    guard state.waitingSince == since else { return false }
                    // The receiver's own limit: it gives up asking then (the sender waits longer).
                    let left = Duration.seconds(TransferLimits.answerTime) - since.duration(to: .now)
                    let seconds = max(0, Double(left.components.seconds))
                    // Drawn under the lock that ending the wait takes: never after it ended.
                    writeAll(
                        "\r\u{1b}[Koffered to \"\(state.receiver)\", waiting for its answer (at most \(Wording.clock(seconds)) more)",
                        to: 2)
                    state.lineShown = true
                    return true
                }
                guard waiting else { return }
                try? await Task.sleep(for: .seconds(1))
            }
        }
    }

    private func clearLine() {
        let shown = state.withLock { state -> Bool in
            // Whatever ends the line ends the countdown with it.
            state.waitingSince = nil
            defer { state.lineShown = false }
            return state.lineShown
        }
        if shown { writeAll("\r\u{1b}[K", to: 2) }
    }

    private static func line(_ state: State) -> String {
        let elapsed = state.started.duration(to: .now)
        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        // A rate over less than a quarter of a second says nothing yet: not shown as 0.
        let rate = seconds >= 0.25 ? Double(state.sent) / seconds : 0
        let fraction = state.total > 0 ? Double(state.sent) / Double(state.total) : 1
        let width = 24
        let filled = Int(fraction * Double(width))
        let bar = String(repeating: "#", count: filled) + String(repeating: "-", count: width - filled)
        let eta =
            state.sent >= state.total
            ? "0:00" : rate > 0 ? Wording.clock(Double(state.total - state.sent) / rate) : "--:--"
        let speed = rate > 0 ? "\(bytes(UInt64(rate)))/s" : "measuring"
        let fileDone = state.fileStart + (state.sent - state.fileStartSent)
        let filePercent = state.fileSize > 0 ? Int(Double(fileDone) / Double(state.fileSize) * 100) : 100
        let name = Terminal.escape(String(state.currentFile.suffix(40)))
        return
            "[\(bar)] \(Int(fraction * 100))% \(bytes(state.sent))/\(bytes(state.total)) \(speed) ETA \(eta) · \(name) \(filePercent)% (file \(state.filesStarted) of \(state.filesTotal))"
    }

    static func bytes(_ count: UInt64) -> String { Wording.bytes(count) }

}
