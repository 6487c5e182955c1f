import ArgumentParser
import Foundation
import PeerTransferCore
import Salut

/// `peerxfer cancel`: take background sends off the daemon's queue.
struct Cancel: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Cancel background sends queued with `send --background`.",
        discussion: """
            Name each send by its task id as `send --background` and `peerxfer status` show it (the first 8 characters are enough), or give --all. The daemon with the same --config stops the send, in the middle of a transfer too; a daemon that is not running drops it when it starts. Exit 0 when every named send was found and cancelled, 1 when one is not in the queue (already delivered or failed), 2 for bad arguments (an id that matches more than one send among them).
            """
    )

    @Argument(help: ArgumentHelp("Task ids (or their first characters).", valueName: "task"))
    var tasks: [String] = []

    @Flag(help: "Cancel every queued background send.")
    var all = false

    @OptionGroup var config: ConfigOptions

    func validate() throws {
        guard all != !tasks.isEmpty else {
            throw ValidationError(
                all
                    ? "give task ids or --all, not both"
                    : "give the task ids to cancel (peerxfer status lists them), or --all")
        }
        guard tasks.allSatisfy({ $0.count >= 4 && $0.allSatisfy { $0.isHexDigit || $0 == "-" } }) else {
            throw ValidationError(
                "a task id is hexadecimal, at least its first 4 characters (peerxfer status lists them)")
        }
    }

    func run() async throws {
        let configuration = try config.loadExisting()
        let session = PeerSession(
            configuration: configuration.backgroundSessionConfiguration(runsTasks: false, displayName: "peerxfer"))
        defer { session.finishTasksAndInvalidate() }
        let queued = session.allTasks.compactMap { $0 as? PeerUploadTask }
        var chosen: [PeerUploadTask] = []
        if all {
            chosen = queued
        } else {
            for id in tasks {
                let matches = queued.filter { $0.persistentIdentifier.hasPrefix(id.lowercased()) }
                guard matches.count <= 1 else {
                    throw PeerTransferError.usage("\(id) matches \(matches.count) queued sends; give more of its id")
                }
                guard let task = matches.first else {
                    throw PeerTransferError.runtime(
                        "no queued background send has the id \(id) (delivered, cancelled, failed or never queued here: peerxfer status shows the queue)"
                    )
                }
                chosen.append(task)
            }
        }
        for task in chosen {
            let what =
                "\(task.taskDescription ?? "?") for \"\(Terminal.escape(task.service.name))\" (task \(TaskID.short(task.persistentIdentifier)))"
            if task.isCancellationRequested {
                // Asked before, and no daemon has run since to act on it.
                printLine("already cancelled: \(what); the daemon drops it when it starts")
                continue
            }
            task.cancel()
            printLine("cancelled \(what)")
        }
        if chosen.isEmpty { printLine("the background queue is empty") }
        // A name granted first-use trust for a queued send (`--accept-new-key`) keeps it only
        // while a send to it is still queued.
        let chosenIDs = Set(chosen.map(\.persistentIdentifier))
        let stillQueued = queued.filter { !chosenIDs.contains($0.persistentIdentifier) && !$0.isCancellationRequested }
            .map(\.service.name)
        try KnownPeers.update(at: configuration.knownPeersFile) { known in
            known.revokeNewKeyGrants { name in !stillQueued.contains { ServiceNames.sameIgnoringASCIICase($0, name) } }
        }
    }
}
