import ArgumentParser
import Foundation
import PeerTransferCore
import Salut
import SalutDiscovery

/// `peerxfer send`: offer files to a receiver and send what it accepts.
struct Send: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Send files and folders to a peerxfer receiver found by name.",
        discussion: """
            Each PATH lands in the receiver's inbox under its last component; folders go with everything in them (symlinks are not followed, and entries whose names peerxfer does not send, with control or bidirectional characters or over its length limits, are left out; both are listed as skipped). On a terminal a progress line shows bytes, rate and time left; otherwise (or with --json) each event is a JSON object on its own line of standard output, and a failure ends with an `error` event holding the exit status and the reason.

            Trust is by key, not by name: anyone on the link can answer to a name. A receiver this device has not paired with is never sent to silently: on a terminal you are shown its key and a verification code and asked; otherwise the send is refused (exit 6) with the command that pairs. Say in advance what to trust with --expect-key (the start of the key `peerxfer identity` prints on the receiver) or --accept-new-key (whatever key answers first, as OpenSSH's accept-new), or pair once with `peerxfer trust --pin NAME KEY`. Once paired, a key change under that name, or a name that looks like it, is refused (exit 6, KEY CHANGED) until `peerxfer untrust NAME`. Interrupted? Run the same command again: files the receiver has are not sent again, and a file cut half way resumes after the last chunk that verifies on the receiver's disk.

            A receiver on another subnet, published in a wide-area zone (`serve --domain home.arpa --tsig-key FILE`), is found with --domain: through avahi-daemon when it is set up for that domain, or with --dns-server by asking that name server directly:
              peerxfer send photos --to "Office PC" --domain home.arpa --dns-server 198.18.2.1
            """
    )

    @Argument(
        help: ArgumentHelp(
            "Files and folders to send; - sends standard input as one file (named by --as).", valueName: "path"))
    var paths: [String] = []

    @Option(
        name: .customLong("to"),
        help: ArgumentHelp(
            "The receiver's name, as `peerxfer peers` lists it. Several --to send to each in turn, with one summary; the exit status is then the first failed receiver's.",
            valueName: "name"))
    var receivers: [String] = []

    @Option(
        help: ArgumentHelp(
            "Send this text as a file (text-DATE.txt, or the name given to --as).", valueName: "text"))
    var text: String?

    @Option(
        name: .customLong("as"),
        help: ArgumentHelp(
            "The name the receiver stores standard input (-) or --text under.", valueName: "name"))
    var storedName: String?

    @Option(
        help: ArgumentHelp(
            "This device's name, as the receiver is told (it shows it with this device's key). Kept for later commands; default: the name given last, else the host name.",
            valueName: "name"))
    var name: String?

    @OptionGroup var config: ConfigOptions

    @OptionGroup var place: DomainOptions

    @OptionGroup var logging: LoggingOptions

    @Option(
        parsing: .unconditional,
        help: ArgumentHelp("Seconds to look for the receiver before giving up with exit 3.", valueName: "seconds"))
    var wait: Double = 10

    @Option(
        name: .customLong("expect-key"),
        help: ArgumentHelp(
            "The receiver's key, as `peerxfer identity` prints it there: all 64 hex digits or at least the first 16. Any other key is refused (exit 6); a receiver new here that has it is pinned.",
            valueName: "hex"))
    var expectKey: String?

    @Flag(
        name: .customLong("accept-new-key"),
        help:
            "If the receiver is new here, trust and pin whatever key answers first (OpenSSH's accept-new). A pinned receiver's changed key is still refused."
    )
    var acceptNewKey = false

    @Flag(help: "Report progress as JSON lines even on a terminal.")
    var json = false

    @Flag(
        help:
            "Hand the transfer to the local daemon (`peerxfer serve` with the same --config) and return, printing each path's task id; the daemon delivers when the receiver is (or becomes) reachable, retrying and resuming, for up to 7 days. `peerxfer status` shows the queue and what was delivered, by task id; `peerxfer cancel ID` takes a send off the queue."
    )
    var background = false

    func validate() throws {
        guard !paths.isEmpty || text != nil else {
            throw ValidationError("give at least one file or folder to send (or - for standard input, or --text)")
        }
        guard !receivers.isEmpty else {
            throw ValidationError(
                "give the receiver with --to NAME (`peerxfer peers` lists them; several --to send to each)")
        }
        guard paths.filter({ $0 == "-" }).count <= 1, !(paths.contains("-") && text != nil) else {
            throw ValidationError("standard input (-) and --text send one file each: give one of them, once")
        }
        if let storedName {
            guard paths.contains("-") || text != nil else {
                throw ValidationError("--as names standard input (-) or --text; give one of them")
            }
            guard (try? RelativePath(validating: storedName))?.components.count == 1 else {
                throw ValidationError(
                    "--as \"\(Terminal.escape(storedName))\" cannot be a file's name (no /, not . or .., no control characters)"
                )
            }
        }
        if paths.contains("-") && isatty(0) == 1 {
            throw ValidationError(
                "- sends standard input, which is this terminal: pipe something in (cmd | peerxfer send - --to NAME)")
        }
        guard wait.isFinite, wait >= 0.01, wait <= 86_400 else {
            throw ValidationError("--wait must be a number of seconds above 0 (0.01 at least), at most 86400")
        }
        // A name no receiver can have fails now, not after a look-up (or, queued, a week).
        for to in receivers { try PeerNameRule.check(to, option: "--to") }
        for (index, to) in receivers.enumerated()
        where receivers[..<index].contains(where: { ServiceNames.sameIgnoringASCIICase($0, to) }) {
            throw ValidationError("--to \"\(Terminal.escape(to))\" is given twice")
        }
        if let name { try PeerNameRule.check(name, option: "--name") }
        try place.check()
        if let expectKey {
            do {
                _ = try KeyText.prefix(expectKey, option: "--expect-key")
            } catch let error as PeerTransferError {
                throw ValidationError(error.message)
            }
        }
        if expectKey != nil && acceptNewKey {
            throw ValidationError(
                "--expect-key and --accept-new-key exclude each other: the first trusts one key, the second any")
        }
        if background && !place.isLink {
            throw ValidationError(
                "--background sends to receivers on the link only; send to \(place.domain) in the foreground")
        }
    }

    func run() async throws {
        logging.apply(default: .warning)
        // A new configuration is a new identity, which receivers that know this device do not.
        var configuration = try config.loadSayingIfMade()
        if let name { try configuration.keepName(name) }
        // Standard input and --text become files first: in a folder of this send's own (the
        // daemon's outbox for a background send, which it empties once sent).
        let made = try madeFiles(configuration)
        if background { return try await queueForEachReceiver(made, configuration) }
        defer { if let folder = made.folder { try? FileManager.default.removeItem(atPath: folder) } }
        let jsonOutput = json || isatty(1) != 1 || isatty(2) != 1
        let shown = Locked(ProgressDisplay(json: jsonOutput, lookupSeconds: wait))
        // Ctrl-C (or SIGTERM, or a closed terminal's SIGHUP) ends the send with 128 + the
        // signal, as a shell shows it, saying how to resume it.
        // The receiver is told first (briefly: at most 2 s), so that it says "stopped" and
        // keeps what it has, rather than guessing at a lost link.
        let stopper = Locked(SendStopper())
        let madeFolder = made.folder
        // Set before the send is stopped: the handler says how the send ended, once.
        let signalled = Locked(false)
        let stops = Self.onStop { signal in
            signalled.withLock { $0 = true }
            let current = stopper.value
            current.stop(.interrupted)
            let told = current.waitUntilTold(seconds: 2)
            shown.value.interrupted(by: signal, told: told && current.toldTheReceiver)
            // The copy of standard input or --text goes too (the process ends without unwinding).
            if let madeFolder { try? FileManager.default.removeItem(atPath: madeFolder) }
        }
        defer { stops.forEach { $0.cancel() } }
        var outcomes: [(receiver: String, error: PeerTransferError?)] = []
        for to in receivers {
            let display = ProgressDisplay(json: jsonOutput, lookupSeconds: wait)
            shown.withLock { $0 = display }
            let stopping = SendStopper()
            stopper.withLock { $0 = stopping }
            if receivers.count > 1 { display.note("to \"\(Terminal.escape(to))\":") }
            do {
                try await send(made.paths, to: to, configuration, display: display, stopper: stopping)
                outcomes.append((to, nil))
            } catch let error as PeerTransferError {
                // Stopped by a signal: its handler tells how (with --json, as an "interrupted"
                // event, not an "error" one), and ends the process.
                if signalled.value { await Self.waitForTheSignalsEnd() }
                display.ended(by: error)  // scripts reading the JSON lines see why, not just a stop
                guard receivers.count > 1 else { throw error }
                printError("peerxfer: \(error.message)")
                outcomes.append((to, error))
            }
        }
        if receivers.count > 1 { try Self.summarize(outcomes) }
    }

    /// Queues the send for the daemon, once for each receiver: each has copies of its own of
    /// what `made` made (the daemon removes a send's copies once it ends); when nothing could be
    /// queued, nothing is kept.
    private func queueForEachReceiver(
        _ made: (paths: [String], folder: String?), _ configuration: PeerConfiguration
    ) async throws {
        var queuedAny = false
        do {
            for (index, to) in receivers.enumerated() {
                let own = index == 0 ? made : try Self.copied(made)
                try await queue(own.paths, to: to, configuration)
                queuedAny = true
            }
        } catch {
            if !queuedAny, let folder = made.folder { try? FileManager.default.removeItem(atPath: folder) }
            throw error
        }
    }

    /// One summary of a send to several receivers, a line a receiver.
    /// - Throws: the first failed send's exit status.
    private static func summarize(_ outcomes: [(receiver: String, error: PeerTransferError?)]) throws {
        for (to, error) in outcomes {
            let outcome = error.map {
                "\(DaemonStatus.Transfer.words(forState: $0.outcome, peer: to)) (exit \($0.exitCode))"
            }
            printError("  \"\(Terminal.escape(to))\": \(outcome ?? "delivered and verified")")
        }
        if let failed = outcomes.first(where: { $0.error != nil })?.error { throw ExitCode(failed.exitCode) }
    }

    /// Standard input (`-`) and `--text` as files, in a new folder of their own (for a
    /// background send, in the daemon's outbox, which it empties once they are sent); the
    /// paths to send, with those files in place of `-`.
    private func madeFiles(_ configuration: PeerConfiguration) throws -> (paths: [String], folder: String?) {
        guard paths.contains("-") || text != nil else { return (paths, nil) }
        let stamp = Date().formatted(
            .iso8601.year().month().day().dateSeparator(.omitted).time(includingFractionalSeconds: false).timeSeparator(
                .omitted))
        let base =
            background
            ? (URL(fileURLWithPath: configuration.directory).standardizedFileURL.path as NSString)
                .appendingPathComponent(Self.outboxName)
            : NSTemporaryDirectory()
        let folder = (base as NSString).appendingPathComponent("peerxfer-\(UUID().uuidString)")
        do {
            try FileManager.default.createDirectory(
                atPath: folder, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        } catch {
            throw PeerTransferError.runtime("cannot make a folder for what is sent: \(error)")
        }
        let name = storedName ?? (text != nil ? "text-\(stamp).txt" : "stdin-\(stamp)")
        let file = (folder as NSString).appendingPathComponent(name)
        do {
            if let text {
                try Data(text.utf8).write(to: URL(fileURLWithPath: file))
            } else {
                guard
                    FileManager.default.createFile(atPath: file, contents: nil, attributes: [.posixPermissions: 0o600]),
                    let out = FileHandle(forWritingAtPath: file)
                else { throw PeerTransferError.runtime("cannot create \(file)") }
                defer { try? out.close() }
                while let chunk = try FileHandle.standardInput.read(upToCount: 1 << 20), !chunk.isEmpty {
                    try out.write(contentsOf: chunk)
                }
            }
        } catch {
            try? FileManager.default.removeItem(atPath: folder)
            throw PeerTransferError.runtime(
                "cannot keep \(text != nil ? "the text" : "standard input") to send it: \(error)")
        }
        // First: a background send's description is its first path, by which the daemon knows
        // the copies to remove once it ends.
        let listed = [file] + paths.filter { $0 != "-" }
        return (listed, folder)
    }

    /// `made` again, its folder copied whole to a new one beside it (another receiver's copies).
    private static func copied(_ made: (paths: [String], folder: String?)) throws -> (paths: [String], folder: String?)
    {
        guard let folder = made.folder else { return made }
        let other = ((folder as NSString).deletingLastPathComponent as NSString)
            .appendingPathComponent("peerxfer-\(UUID().uuidString)")
        do {
            try FileManager.default.copyItem(atPath: folder, toPath: other)
        } catch {
            throw PeerTransferError.runtime("cannot copy what is sent for another receiver: \(error)")
        }
        return (made.paths.map { $0.hasPrefix(folder + "/") ? other + $0.dropFirst(folder.count) : $0 }, other)
    }

    /// The folder (in the configuration) whose files are copies made to be sent, removed by
    /// the daemon once sent: standard input and --text of background sends, the web page's
    /// uploads.
    static let outboxName = "outbox"

    /// The foreground send to `to`, its progress and outcome shown by `display`.
    private func send(
        _ paths: [String], to: String, _ configuration: PeerConfiguration, display: ProgressDisplay,
        stopper: SendStopper
    ) async throws {
        // The arguments are checked at once (a typo fails before anything else); their folders
        // are walked while the receiver is looked for, and each file is hashed as it is sent.
        try TransferPlan.checkArguments(paths)
        let walking = Task { [paths] in
            let plan = try await TransferPlan.prepare(paths: paths)
            display.planned(plan)
            guard !plan.manifest.entries.isEmpty else {
                throw PeerTransferError.usage(
                    "nothing to send: every path was left out (\(plan.skipped.map { Terminal.escape($0.description) }.joined(separator: "; ")))"
                )
            }
            return plan
        }
        // Unicast DNS needs no daemon. Bad arguments found by the walk are exit 2 either way:
        // they are reported before a missing daemon is.
        if place.nameServer == nil {
            do {
                try await requireDiscoveryDaemon()
            } catch {
                _ = try await walking.value
                throw error
            }
        }
        var sender = Sender(configuration: configuration, displayName: configuration.deviceName)
        sender.stopper = stopper
        sender.findTimeout = wait
        sender.domain = place.domain
        sender.wideArea = place.nameServer.map { WideAreaBrowsing(nameServer: $0) }
        sender.expectedKey = try expectKey.map { try KeyText.prefix($0, option: "--expect-key") }
        if acceptNewKey {
            sender.firstContact = .acceptNewKey
        } else if !json && isatty(0) == 1 && isatty(2) == 1 {
            sender.firstContact = .ask { receiver in await display.askToTrust(receiver) }
        }
        let report = try await sender.send(preparing: { try await walking.value }, to: to, events: { display.show($0) })
        display.finish(report)
        if !report.failed.isEmpty {
            throw PeerTransferError.fileFailed(
                "\(report.failed.count) file(s) failed verification: \(report.failed.prefix(5).joined(separator: "; "))"
            )
        }
        if !report.declined.isEmpty {
            // Named (the first ten), so the user knows what to send elsewhere or ask about.
            let named = report.declined.prefix(10).map(Terminal.escape).joined(separator: ", ")
            let more = report.declined.count > 10 ? " and \(report.declined.count - 10) more" : ""
            throw report.declineError(
                "the receiver declined \(report.declined.count) of \(display.entriesTotal) entries: \(named)\(more)")
        }
    }

    /// Runs `report` on SIGINT, SIGTERM or SIGHUP, then ends the process by that signal, at its
    /// default action: the parent sees a process the signal ended (a shell shows 130 for SIGINT
    /// and 143 for SIGTERM, stops a loop on Ctrl-C, and systemd counts a SIGTERM as a clean
    /// stop). Not `exit`: the other threads are still hashing and writing, and `exit`'s handlers
    /// (OpenSSL's clean-up among them) must not run under them; the output was written with
    /// `write(2)`, so nothing waits to be flushed. libdispatch takes each signal over for its
    /// source; the sources share one serial queue, so a second signal (systemd sends SIGHUP
    /// after SIGTERM) finds the first one's report made and the process on its way out. A signal
    /// that was ignored when the send started (SIGINT for a job started with `&` by a shell
    /// without job control, SIGHUP under `nohup`) is left ignored.
    private static func onStop(_ report: @escaping @Sendable (StopSignal) -> Void) -> [any DispatchSourceSignal] {
        let queue = DispatchQueue(label: "peerxfer.stop")
        return StopSignal.allCases.compactMap { stop -> (any DispatchSourceSignal)? in
            var earlier = sigaction()
            guard sigaction(stop.number, nil, &earlier) == 0 else {
                printError("cannot read \(stop.name)'s action: \(String(cString: strerror(errno)))")
                return nil
            }
            if unsafeBitCast(earlier.__sigaction_handler.sa_handler, to: Int.self)
                == unsafeBitCast(SIG_IGN, to: Int.self)
            {
                return nil
            }
            let source = DispatchSource.makeSignalSource(signal: stop.number, queue: queue)
            source.setEventHandler {
                report(stop)
                endBy(stop.number)
            }
            source.resume()
            return source
        }
    }

    /// Waits while a stop signal's handler reports and ends the process (the receiver is told
    /// within 2 s); returns after 10 s should it not.
    private static func waitForTheSignalsEnd() async {
        await withCheckedContinuation { (waited: CheckedContinuation<Void, Never>) in
            DispatchQueue.global().asyncAfter(deadline: .now() + 10) { waited.resume() }
        }
    }

    /// Ends the process by `signal` at its default action (which ends it), or with 128 + the
    /// signal if that fails.
    private static func endBy(_ signal: Int32) -> Never {
        var action = sigaction()
        action.__sigaction_handler.sa_handler = SIG_DFL
        sigemptyset(&action.sa_mask)
        var unblocked = sigset_t()
        sigemptyset(&unblocked)
        sigaddset(&unblocked, signal)
        if sigaction(signal, &action, nil) == 0 {
            pthread_sigmask(SIG_UNBLOCK, &unblocked, nil)
            raise(signal)  // delivered to this thread before raise returns
        }
        _exit(128 + signal)
    }

    /// Queues `paths` for the daemon as one background send to `to` (one task, one question at
    /// the receiver).
    private func queue(_ paths: [String], to: String, _ configuration: PeerConfiguration) async throws {
        // The same checks as a foreground send, now, while the user is here to see them.
        // What a folder holds that will not go is said now, while the user is here to see it
        // (the daemon only logs it).
        let lister = ProgressDisplay(json: json)
        for skipped in try TransferPlan.make(paths: paths).skipped { lister.skipped(skipped) }
        try await pairForBackground(to: to, configuration)
        let sessionConfiguration = configuration.backgroundSessionConfiguration(
            runsTasks: false, displayName: "peerxfer")
        let session = PeerSession(configuration: sessionConfiguration)
        let service = DiscoveredService(name: to, type: TransferLimits.serviceType)
        let whole = paths.map { URL(fileURLWithPath: $0).standardizedFileURL.path }
        let task =
            whole.count == 1
            ? session.uploadTask(to: service, fromFile: URL(fileURLWithPath: whole[0]))
            : session.uploadTask(to: service, from: PathList.encoded(whole))
        let description = PathList.description(of: whole)
        task.taskDescription = description
        task.resume()
        // Queued for the daemon: the task says so (not a delivery, not a failure).
        if let error = task.error, (error as? PeerSessionError)?.code != .queuedWithRunner {
            throw PeerTransferError.runtime("\(Terminal.escape(description)) was not queued: \(error)")
        }
        let queued = [TaskID.short(task.persistentIdentifier)]
        if json {
            var event: [String: Any] = [
                "event": "queued", "paths": whole, "peer": to, "task": task.persistentIdentifier,
            ]
            if whole.count == 1 { event["path"] = whole[0] }
            printJSON(event)
        } else {
            printLine(
                "queued \(Terminal.escape(description)) for \"\(Terminal.escape(to))\" (task \(TaskID.short(task.persistentIdentifier)))"
            )
        }
        let status = try? DaemonStatus.load(from: configuration.statusFile)
        if status?.daemonAlive != true {
            printError(
                "note: no peerxfer daemon runs with this configuration; the queue is delivered when `peerxfer serve\(configuration.configOption)` starts"
            )
        }
        // A mistyped name would be waited for, quietly, for a week: say so while the user is here.
        let cancel =
            "`peerxfer cancel \(queued.joined(separator: " "))\(configuration.configOption)` drops \(queued.count == 1 ? "it" : "them")"
        do {
            _ = try await service.resolve(timeout: Self.presenceCheck, settle: 0.02)
        } catch let error as DiscoveryError where error.code == .timedOut || error.code == .notFound {
            printError(
                "note: no receiver named \"\(Terminal.escape(to))\" answered on the link within \(Int(Self.presenceCheck)) s; the daemon waits for it to appear, for up to \(Wording.duration(sessionConfiguration.timeoutIntervalForResource)) (`peerxfer peers` lists the receivers there; \(cancel))"
            )
        } catch {
            printError(
                "note: could not look for \"\(Terminal.escape(to))\" on the link (\(Terminal.escape("\(error)"))); the daemon tries when it runs (\(cancel))"
            )
        }
    }

    /// A queued send runs in the daemon, with no one to ask: the receiver must be paired
    /// before it is queued, or the user must say now what to trust. `--expect-key` with a whole
    /// key pins it now (as `trust --pin`); with a shorter one the receiver must answer now so
    /// that its key is checked and pinned; `--accept-new-key` lets the daemon pin the key that
    /// answers first. Otherwise a name that is not paired is refused (exit 6).
    private func pairForBackground(to: String, _ configuration: PeerConfiguration) async throws {
        let file = configuration.knownPeersFile
        let known = try KnownPeers.load(from: file)
        let pinned = known.pinnedSpelling(of: to).flatMap { known.pins[$0] }
        if let expectKey {
            let expected = try KeyText.prefix(expectKey, option: "--expect-key")
            if let pinned {
                guard pinned.hasPrefix(expected) else {
                    throw PeerTransferError.trust(
                        "KEY CHANGED: \"\(Terminal.escape(to))\" is pinned to the key \(pinned), not the one you expect (\(expected)…); nothing was queued. If it really got a new key, run: peerxfer untrust \(ShellWord.quoted(to))\(configuration.configOption)"
                    )
                }
                return
            }
            var key = expected
            if expected.count < 64 {
                let advertised: String
                do {
                    advertised = try await Self.advertisedKeyNow(of: to, within: wait)
                } catch let error as PeerTransferError {
                    throw error
                } catch {
                    throw PeerTransferError.peerNotFound(
                        "\"\(Terminal.escape(to))\" did not answer within \(Int(wait)) s, so its key cannot be checked against \(expected)…; give all 64 hex digits to --expect-key to queue the send before the receiver appears"
                    )
                }
                guard advertised.hasPrefix(expected) else {
                    throw PeerTransferError.trust(
                        "\"\(Terminal.escape(to))\" answers with the key \(advertised), not the one you expected (\(expected)…); nothing was queued"
                    )
                }
                key = advertised
            }
            // Judged again under the lock: a pin made meanwhile by another command stands.
            try KnownPeers.update(at: file) { known in
                if case .keyChanged(let pinnedAs, let pinnedKey) = known.verdict(forReceiver: to, key: key) {
                    throw Sender.keyChanged(
                        name: to, key: key, pinnedAs: pinnedAs, pinnedKey: pinnedKey,
                        configOption: configuration.configOption)
                }
                known.pin(to, to: key)
            }
            printError("paired with \"\(Terminal.escape(to))\": its key \(key.prefix(16))… is pinned")
            return
        }
        if pinned != nil { return }
        if acceptNewKey {
            try KnownPeers.update(at: file) { $0.grantNewKey(to: to) }
            return
        }
        // A known device under a new name: the daemon pins the name when it connects.
        if let key = try? await Self.advertisedKeyNow(of: to, within: Self.presenceCheck),
            known.pinnedName(forKey: key) != nil || known.trusted[key] != nil
        {
            return
        }
        throw PeerTransferError.trust(
            """
            "\(Terminal.escape(to))" is not paired with this device, and a queued send has no one to ask: nothing was queued. \
            Pair first (peerxfer trust \(ShellWord.quoted(to))\(configuration.configOption) shows its key and code and asks), \
            or add --expect-key with the key `peerxfer identity` prints on the receiver, or --accept-new-key to trust whatever key answers first
            """)
    }

    /// The key `name` advertises on the link, if it answers within `seconds`.
    /// - Throws: a ``DiscoveryError`` when it does not answer; ``PeerTransferError`` when it
    ///   advertises no valid key.
    private static func advertisedKeyNow(of name: String, within seconds: TimeInterval) async throws -> String {
        let resolved = try await DiscoveredService(name: name, type: TransferLimits.serviceType).resolve(
            timeout: seconds, settle: 0.02)
        return try Sender.advertisedKey(resolved, name: name)
    }

    /// Seconds `send --background` looks for the receiver, only to warn when it is not there.
    static let presenceCheck: TimeInterval = 2
}
