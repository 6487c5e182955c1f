import ArgumentParser
import Foundation
import PeerTransferCore
import Salut

/// `peerxfer status`: what the local daemon is doing.
struct Status: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Show the local daemon's state and its recent transfers (from the configuration folder)."
    )

    @OptionGroup var config: ConfigOptions

    @Flag(help: "The status as one JSON object.")
    var json = false

    @Flag(help: "Show it again each time it changes, until interrupted.")
    var follow = false

    func run() async throws {
        try config.requireExisting()
        let directory = config.directory ?? PeerConfiguration.defaultDirectory
        let file = (directory as NSString).appendingPathComponent("status.json")
        var last: DaemonStatus?
        repeat {
            let status = try DaemonStatus.load(from: file)
            if status != last || last == nil {
                show(status)
                last = status
            }
            if follow { try await Task.sleep(for: .milliseconds(500)) }
        } while follow
    }

    /// One background send, as its record says.
    private struct QueuedSend {
        var id: String
        var what: String
        var service: String
        var phase: String
        var attempts: Int
        var lastError: String?
        var cancelRequested: Bool

        var line: String {
            let state =
                cancelRequested ? "cancelled (the daemon drops it when it starts)" : "\(phase), \(attempts) attempt(s)"
            return
                "task \(TaskID.short(id)): \(Terminal.escape(what)) → \"\(Terminal.escape(service))\": \(state)\(lastError.map { "; last error: \(Terminal.escape($0))" } ?? "")"
        }

        var object: [String: Any] {
            // Escaped as `peers --json` does: names may come from the network.
            var object: [String: Any] = [
                "id": id, "description": Terminal.escape(what), "service": Terminal.escape(service),
                "phase": phase, "attempts": attempts, "cancelRequested": cancelRequested,
            ]
            if let lastError { object["lastError"] = Terminal.escape(lastError) }
            return object
        }
    }

    /// The background sends queued or in progress, as their records say.
    private func backgroundQueue() -> [QueuedSend] {
        // Nothing is queued where no configuration is (and `status` makes none).
        let directory = config.directory ?? PeerConfiguration.defaultDirectory
        guard FileManager.default.fileExists(atPath: directory), let configuration = try? config.load() else {
            return []
        }
        let session = PeerSession(
            configuration: configuration.backgroundSessionConfiguration(runsTasks: false, displayName: "peerxfer"))
        // One per redraw under --follow: let go of it (its views and its lock file) each time.
        defer { session.finishTasksAndInvalidate() }
        return session.allTasks.compactMap { $0 as? PeerUploadTask }.map { task in
            QueuedSend(
                id: task.persistentIdentifier, what: task.taskDescription ?? "?", service: task.service.name,
                phase: task.recordedPhase, attempts: task.attempts, lastError: task.recordedError,
                cancelRequested: task.isCancellationRequested)
        }
    }

    private func printObject(_ object: [String: Any]) {
        if let line = try? JSONSerialization.data(
            withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes])
        {
            printLine(String(decoding: line, as: UTF8.self))
        }
    }

    private func show(_ status: DaemonStatus?) {
        guard let status else {
            // Sends queued before any daemon ran are still there (and can be cancelled).
            let queue = backgroundQueue()
            if json {
                printObject(["running": false, "queue": queue.map(\.object)])
            } else {
                printLine("no daemon has run with this configuration (peerxfer serve)")
                if !queue.isEmpty { printLine("background queue (delivered once a daemon runs):") }
                for send in queue { printLine("  \(send.line)") }
            }
            return
        }
        if json {
            // Through JSONSerialization both ways: its numbers come back as NSNumber, which
            // JSONLine's Swift-typed switch is not meant for.
            if let data = try? JSONEncoder().encode(status),
                var object = try? JSONSerialization.jsonObject(with: data) as? [String: Any]
            {
                object["running"] = status.daemonAlive
                object["queue"] = backgroundQueue().map(\.object)
                printObject(object)
            }
            return
        }
        printLine(
            status.daemonAlive
                ? "serving \"\(Terminal.escape(status.name))\" on port \(status.port), inbox \(status.inbox), pid \(status.pid)"
                : "not running (last seen as \"\(Terminal.escape(status.name))\")")
        printLine("key \(status.key)")
        let queue = backgroundQueue()
        printLine(queue.isEmpty ? "background queue: empty" : "background queue:")
        for send in queue { printLine("  \(send.line)") }
        if status.transfers.isEmpty { printLine("no transfers yet") }
        for transfer in status.transfers { printLine(Self.line(for: transfer)) }
    }

    /// One transfer as `status` shows it: id, time, direction and peer, what was sent, and the
    /// outcome in words (`declined by the person there`, not `failed`).
    static func line(for transfer: DaemonStatus.Transfer) -> String {
        let time = Date(timeIntervalSince1970: transfer.started).formatted(
            .dateTime.month(.abbreviated).day().hour(.twoDigits(amPM: .omitted)).minute())
        let what =
            transfer.task.map {
                " (task \(Terminal.escape(TaskID.short($0)))\(transfer.path.map { ", \(Terminal.escape($0))" } ?? ""))"
            } ?? ""
        let files = Wording.counted(transfer.files, "file")
        let size = Wording.bytes(transfer.bytes)
        var state = words(forState: transfer.state)
        if transfer.state == "receiving", transfer.bytes > 0 {
            state += " \(transfer.bytesReceived * 100 / transfer.bytes)%"
        }
        if transfer.state == "done" || transfer.state == "receiving" || transfer.state == "failed" {
            state += ", \(transfer.verified)/\(transfer.files) verified"
            if transfer.failed > 0 { state += ", \(transfer.failed) failed" }
        }
        let error = transfer.error.map { " (\(Terminal.escape($0)))" } ?? ""
        return
            "#\(transfer.id) \(time) \(transfer.direction == "out" ? "out to" : "in from") \(transfer.peer)\(what), \(files), \(size): \(state)\(error)"
    }

    /// A transfer's state in words.
    static func words(forState state: String) -> String {
        switch state {
        case "asking": return "waiting for the answer"
        case "declined": return "declined by the person there"
        case "declined-by-hook": return "declined by the accept hook"
        case "declined-by-policy": return "declined by policy (the sender's key is not trusted)"
        case "no-answer": return "no answer in time"
        case "cannot-ask": return "not asked (no terminal and no hook on the receiver)"
        case "interrupted": return "interrupted (the daemon stopped)"
        default: return state
        }
    }
}
