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

    @Flag(
        help:
            "Keep watching until interrupted: on a terminal the view is redrawn in place each second (progress, rates, time left); otherwise (or with --json) each change is one JSON object on a line of its own."
    )
    var follow = false

    func run() async throws {
        try config.requireExisting()
        let directory = config.directory ?? PeerConfiguration.defaultDirectory
        let file = (directory as NSString).appendingPathComponent("status.json")
        let live = follow && !json && isatty(1) == 1
        let lines = follow && !live
        var last: DaemonStatus?
        var first = true
        repeat {
            let status = try DaemonStatus.load(from: file)
            if live {
                // Home, the view, then clear what an older, longer view left below it.
                writeAll(
                    "\u{1b}[H" + render(status, rows: Self.terminalRows()).map { $0 + "\u{1b}[K\n" }.joined()
                        + "\u{1b}[J",
                    to: 1)
            } else if status != last || first {
                if lines || json { printObject(object(status)) } else { render(status).forEach(printLine) }
                last = status
            }
            first = false
            if follow { try await Task.sleep(for: live ? .seconds(1) : .milliseconds(500)) }
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

        /// Where the daemon's status says this send is, when it is under way (its row there
        /// has the progress): said instead of the session's coarser phase.
        var live: DaemonStatus.Transfer?

        var line: String {
            let now =
                live.map {
                    "\(DaemonStatus.Transfer.words(forState: $0.state, peer: "\"\(Terminal.escape(service))\"")) (#\($0.id))"
                }
                ?? phase
            let state =
                cancelRequested
                ? "cancelled (the daemon drops it when it starts)" : "\(now), \(Wording.counted(attempts, "attempt"))"
            return
                "task \(TaskID.short(id)): \(Terminal.escape(what)) → \"\(Terminal.escape(service))\": \(state)\(lastError.map { "; last error: \(Terminal.escape($0))" } ?? "")"
        }

        var object: [String: Any] {
            // Escaped as `peers --json` does: names may come from the network.
            var object: [String: Any] = [
                "id": id, "description": Terminal.escape(what), "service": Terminal.escape(service),
                "phase": phase, "attempts": attempts, "cancelRequested": cancelRequested,
            ]
            // The session's phase is coarse ("transferring" from the connection on): the live
            // state of the send says where it is (waiting for the answer, sending, verifying).
            if let live { object["state"] = live.state }
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

    /// The status as one JSON object (the queue included; names escaped as `peers --json` does).
    private func object(_ status: DaemonStatus?) -> [String: Any] {
        guard let status else { return ["running": false, "queue": backgroundQueue().map(\.object)] }
        // Through JSONSerialization both ways: its numbers come back as NSNumber, which
        // JSONLine's Swift-typed switch is not meant for.
        guard let data = try? JSONEncoder().encode(status),
            var object = try? JSONSerialization.jsonObject(with: data) as? [String: Any]
        else { return ["running": status.daemonAlive] }
        object["running"] = status.daemonAlive
        object["queue"] = backgroundQueue().map(\.object)
        return object
    }

    /// The terminal's height in lines (nil when it cannot be read).
    private static func terminalRows() -> Int? {
        var size = winsize()
        guard ioctl(1, UInt(TIOCGWINSZ), &size) == 0, size.ws_row > 0 else { return nil }
        return Int(size.ws_row)
    }

    /// The status as lines for a person; with `rows`, the newest transfers that fit in that
    /// many lines (a view redrawn in place must not scroll).
    private func render(_ status: DaemonStatus?, rows: Int? = nil) -> [String] {
        var lines: [String] = []
        guard let status else {
            // Sends queued before any daemon ran are still there (and can be cancelled).
            let queue = backgroundQueue()
            lines.append("no daemon has run with this configuration (peerxfer serve)")
            if !queue.isEmpty { lines.append("background queue (delivered once a daemon runs):") }
            lines += queue.map { "  \($0.line)" }
            return lines
        }
        lines.append(
            status.daemonAlive
                ? "serving \"\(Terminal.escape(status.name))\" on port \(status.port), inbox \(status.inbox), pid \(status.pid)"
                : "not running (last seen as \"\(Terminal.escape(status.name))\")")
        lines.append("key \(status.key)")
        var queue = backgroundQueue()
        // (A row a dead daemon left says nothing of now: the session's record does.)
        for index in queue.indices where status.daemonAlive {
            queue[index].live = status.transfers.last { $0.task == queue[index].id && $0.ended == nil }
        }
        lines.append(queue.isEmpty ? "background queue: empty" : "background queue:")
        lines += queue.map { "  \($0.line)" }
        if status.transfers.isEmpty { lines.append("no transfers yet") }
        var transfers = status.transfers
        if let rows, lines.count + transfers.count > rows - 1 {
            let room = max(0, rows - 2 - lines.count)
            let hidden = transfers.count - room
            transfers = Array(transfers.suffix(room))
            lines.append("(\(Wording.counted(hidden, "older transfer")) above: `peerxfer status` lists them all)")
        }
        lines += transfers.map { $0.shown() }
        return lines
    }
}
