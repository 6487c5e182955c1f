import Foundation

extension DaemonStatus.Transfer {
    /// One transfer as `status` shows it: id, time, direction and peer, what was sent, and the
    /// outcome in words (`declined by the person there`, not `failed`); one under way with its
    /// percent, bytes, rate and time left, or the time its receiver has left to answer.
    public func shown(now: Double = Date().timeIntervalSince1970) -> String {
        let transfer = self
        let time = Date(timeIntervalSince1970: transfer.started).formatted(
            .dateTime.month(.abbreviated).day().hour(.twoDigits(amPM: .omitted)).minute())
        let what =
            transfer.task.map {
                " (task \(Terminal.escape(TaskID.short($0)))\(transfer.path.map { ", \(Terminal.escape($0))" } ?? ""))"
            } ?? ""
        let files = Wording.counted(transfer.files, "file")
        let size = Wording.bytes(transfer.bytes)
        var state = Self.words(forState: transfer.state, peer: transfer.peer)
        let elapsed = transfer.since.map { max(0, now - $0) }
        switch transfer.state {
        case "sending", "receiving":
            state += " " + Self.progress(done: transfer.bytesReceived, of: transfer.bytes, in: elapsed)
        case "waiting-for-answer", "asking":
            if let elapsed {
                // The receiver's limit, on both ends (the sender waits a little longer).
                let left = max(0, TransferLimits.answerTime - elapsed)
                state += " (\(Wording.clock(left)) left)"
            }
        case "done", "failed":
            state += ", \(transfer.verified)/\(transfer.files) verified"
            if transfer.failed > 0 { state += ", \(transfer.failed) failed" }
        default:
            break
        }
        // The cause, where the state's words do not say it all (a failure's, a hook's reason).
        let said = ["declined", "cannot-ask", "declined-by-policy"].contains(transfer.state)
        let error = said ? "" : transfer.error.map { " (\(Terminal.escape($0)))" } ?? ""
        return
            "#\(transfer.id) \(time) \(transfer.direction == "out" ? "out to" : "in from") \(transfer.peer)\(what), \(files), \(size): \(state)\(error)"
    }

    /// "42%, 5.0 MB of 12.0 MB, 3.1 MB/s, 0:02 left": the rate over `seconds` (nil or too short
    /// a time: not yet measured).
    public static func progress(done: UInt64, of total: UInt64, in seconds: Double?) -> String {
        let percent = total > 0 ? done * 100 / total : 100
        var text = "\(percent)%, \(Wording.bytes(done)) of \(Wording.bytes(total))"
        if let seconds, seconds >= 1, done > 0 {
            let rate = Double(done) / seconds
            text += ", \(Wording.bytes(UInt64(rate)))/s, \(Wording.clock(Double(total - min(done, total)) / rate)) left"
        }
        return text
    }

    /// A transfer's state in words (`peer` as the row shows it).
    public static func words(forState state: String, peer: String) -> String {
        switch state {
        case "asking": return "waiting for the answer here"
        case "connecting": return "connecting"
        case "waiting-for-receiver": return "waiting for \(peer) to appear"
        case "waiting-for-answer": return "waiting for \(peer)'s answer"
        case "waiting-to-retry": return "waiting to try again"
        case "verifying": return "verifying (the receiver checks the last files)"
        case "declined": return "declined by the person there"
        case "declined-by-hook": return "declined by the accept hook"
        case "declined-by-policy": return "declined by policy (the sender's key is not trusted)"
        case "no-answer": return "no answer in time"
        case "cannot-ask": return "not asked (no terminal and no hook on the receiver)"
        case "interrupted": return "interrupted (the daemon stopped)"
        case "cancelled": return "cancelled"
        case "stopped": return "stopped before its end (what came is kept: sending again resumes)"
        default: return state
        }
    }
}
