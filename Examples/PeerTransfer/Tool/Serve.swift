import ArgumentParser
import Foundation
import Logging
import PeerTransferCore
import Salut
import SalutStreams
import ServiceLifecycle

/// `peerxfer serve`: the receiving daemon, in the foreground.
struct Serve: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Receive files: publish this device and take transfers into the inbox.",
        discussion: """
            Runs in the foreground until SIGINT, SIGTERM or SIGHUP (a closed terminal), then withdraws the service and lets transfers in progress stop (their part files stay and the senders resume them). For systemd, see Examples/PeerTransfer/peerxfer.service. One daemon per --config folder (its key, background queue and status): a second is refused with exit 1.

            For senders on other subnets, publish in a wide-area DNS zone whose server takes signed updates (docs/wide-area.md): --domain home.arpa --tsig-key FILE [--dns-server ADDRESS].

            --accept ask puts each offer to the person at this terminal, who has 120 s to answer y (yes), n (no, the default), a (yes, and always trust this sender's key) or p (pick which files to accept), or, with --hook, to a command: it runs under `sh -c` with PEERXFER_KEY (the sender's key, proven in the handshake: decide on this), PEERXFER_TRUSTED (yes/no), PEERXFER_LABEL (the name you trusted that key under, empty if not), PEERXFER_SENDER (the name the sender claims: anyone can claim any name), PEERXFER_FILES and PEERXFER_BYTES set and the offered paths on its standard input, one per line (escaped as they would be shown); exit status 0 accepts the offer (only the paths it prints on its standard output, one per line, when it prints any), anything else declines it. The hook has 120 s, in a process group of its own; once it exits, anything it left running in that group is killed. With neither a terminal nor a hook, no offer can be put to anyone: senders are told so (exit 8 there), not that someone declined.
            """
    )

    @Option(
        help: ArgumentHelp(
            "This device's name: published for senders to find (another is picked if it is taken), and told to receivers when this device sends. Kept for later commands; default: the name given last, else the host name.",
            valueName: "name"))
    var name: String?

    @Option(help: ArgumentHelp("Where received files land (created if missing).", valueName: "dir"))
    var inbox: String = (NSHomeDirectory() as NSString).appendingPathComponent("peerxfer-inbox")

    @OptionGroup var config: ConfigOptions

    @OptionGroup var place: DomainOptions

    @Option(
        name: .customLong("tsig-key"),
        help: ArgumentHelp(
            "For a wide-area --domain: publish there by DNS updates signed with this TSIG key (a file in BIND's tsig-keygen format; never give a secret on the command line).",
            valueName: "file"))
    var tsigKey: String?

    @OptionGroup var logging: LoggingOptions

    @Option(
        help: ArgumentHelp(
            "Which offers to take: ask, known (only senders trusted with `peerxfer trust`) or all.", valueName: "policy"
        ))
    var accept: AcceptMode = .ask

    @Option(
        help: ArgumentHelp("For --accept ask: a command that decides each offer (see above).", valueName: "command"))
    var hook: String?

    // `.unconditional` on numbers: `--port -1` is a port that is out of range, not a missing one.
    @Option(
        parsing: .unconditional,
        help: ArgumentHelp("The TCP port to listen on (0: one the system picks).", valueName: "port"))
    var port: Int = 0

    @Option(
        name: .customLong("minimum-rate"), parsing: .unconditional,
        help: ArgumentHelp(
            "Cut an accepted transfer that averages fewer bytes per second than this, counted after its first 120 s (0: never). Default 65536: far below any LAN, far above a sender that trickles data to hold its place.",
            valueName: "bytes"))
    var minimumRate: UInt64 = 65_536

    @Option(
        name: .customLong("slow-grace"), parsing: .unconditional,
        help: ArgumentHelp("Seconds before --minimum-rate counts.", visibility: .hidden))
    var slowGrace: Double = 120

    @Option(
        name: .customLong("idle-timeout"), parsing: .unconditional,
        help: ArgumentHelp(
            "Drop a sender's connection after this many seconds without progress (1…3600). Its part files stay: the same send resumes.",
            valueName: "seconds"))
    var idleTimeout: Double = 60

    @Flag(
        name: .customLong("keep-execute-bits"),
        help:
            "Keep the execute bits senders give their files. By default they are cleared: nothing a peer sends is runnable here until you make it so."
    )
    var keepExecuteBits = false

    @Option(
        name: .customLong("keep-parts"), parsing: .unconditional,
        help: ArgumentHelp(
            "Days an unfinished file's part may wait for its sender to resume before it is removed (checked at start and hourly).",
            valueName: "days"))
    var keepParts: Double = 7

    @Option(
        name: .customLong("reserve"), parsing: .unconditional,
        help: ArgumentHelp(
            "Percent of the inbox's disk to keep free by removing the oldest part files first.", valueName: "percent"))
    var reserve: Double = 5

    @Option(
        name: .customLong("parts-per-sender"), parsing: .unconditional,
        help: ArgumentHelp(
            "Percent of the inbox's disk that one sender's unfinished files (left by cut transfers) and the files over 1 MiB of its next offer may hold together; past it the offer is refused, saying so (exit 1 at the sender). A sender with none is held only to the free space; files of 1 MiB or less never leave unfinished files.",
            valueName: "percent"))
    var partsPerSender: Double = 50

    @Option(
        help: ArgumentHelp(
            "Serve a web page on this machine to send files (drop them on it), answer offers and watch transfers: PORT on 127.0.0.1, or ADDRESS:PORT (0 picks a free port). The address to open, with its secret token, is printed and given by `peerxfer status --json` as webURL. With --accept ask, offers are answered on the page.",
            valueName: "[address:]port"))
    var web: String?

    @Flag(
        name: .customLong("web-remote"),
        help:
            "Let --web listen on an address other than loopback: anyone who can reach it and learns the token can send as this device and answer its offers. Prefer an SSH tunnel."
    )
    var webRemote = false

    enum AcceptMode: String, ExpressibleByArgument, CaseIterable {
        case ask, known, all
    }

    func validate() throws {
        guard (0...65_535).contains(port) else { throw ValidationError("--port must be 0…65535, not \(port)") }
        if let name {
            guard !name.isEmpty, name.utf8.count <= 63 else { throw ValidationError("--name must be 1 to 63 bytes") }
            try PeerNameRule.check(name, option: "--name")
        }
        if hook != nil && accept != .ask { throw ValidationError("--hook applies only to --accept ask") }
        guard slowGrace.isFinite, slowGrace >= 0, slowGrace <= 86_400 else {
            throw ValidationError("--slow-grace must be 0…86400 seconds")
        }
        guard idleTimeout.isFinite, idleTimeout >= 1, idleTimeout <= 3600 else {
            throw ValidationError("--idle-timeout must be 1…3600 seconds, not \(idleTimeout)")
        }
        guard keepParts.isFinite, keepParts > 0, keepParts <= 3650 else {
            throw ValidationError("--keep-parts must be a number of days above 0, at most 3650")
        }
        guard reserve.isFinite, reserve >= 0, reserve < 100 else {
            throw ValidationError("--reserve must be a percentage from 0 to under 100")
        }
        guard partsPerSender.isFinite, partsPerSender > 0, partsPerSender <= 100 else {
            throw ValidationError("--parts-per-sender must be a percentage above 0, at most 100, not \(partsPerSender)")
        }
        if let web {
            let (host, _) = try Self.webAddress(web)
            if !Self.isLoopback(host) && !webRemote {
                throw ValidationError(
                    "--web \(web) listens beyond this machine; add --web-remote if that is meant (anyone who reaches it with the token can send as this device), or give a port alone for 127.0.0.1"
                )
            }
        } else if webRemote {
            throw ValidationError("--web-remote applies to --web")
        }
        try place.check()
        if place.isLink && tsigKey != nil {
            throw ValidationError("--tsig-key is for a wide-area --domain; local is published through avahi-daemon")
        }
        if !place.isLink && tsigKey == nil {
            throw ValidationError(
                "publishing in \(place.domain) needs --tsig-key FILE (avahi-daemon publishes only in local)")
        }
    }

    func run() async throws {
        // First: malloc set up so that the daemon's heap comes back down after a flood.
        let mallocSet = MemoryTrim.configureMalloc(arenas: 2)
        let logger = logging.apply(default: .info, timestamps: true)
        if !mallocSet {
            logger.debug(
                "malloc is left as the environment (MALLOC_ARENA_MAX, MALLOC_MMAP_THRESHOLD_) or the C library sets it")
        }
        try await requireDiscoveryDaemon()
        // Part files, folders and connections: room beyond the usual soft limit of 1,024.
        if let problem = DescriptorLimit.raiseToHardLimit() { logger.warning("\(problem)") }
        // An inbox that cannot be used is refused before a configuration is made for nothing.
        try ReceiverService.checkInbox(inbox)
        // Before the configuration is read or made, and anything published: a second daemon
        // on this configuration would share its key and queue and overwrite its status.
        let lock = try DaemonLock(directory: config.directory ?? PeerConfiguration.defaultDirectory)
        defer { withExtendedLifetime(lock) {} }
        var configuration = try config.load()
        if let name { try configuration.keepName(name) }
        let questions = WebQuestions()
        let status = StatusBook(file: configuration.statusFile)
        let service = try await ReceiverService.start(
            name: configuration.deviceName, inbox: inbox, configuration: configuration,
            policy: policy(configuration: configuration, questions: questions, logger: logger),
            port: port,
            pace: TransferPace(minimumRate: minimumRate, grace: .seconds(slowGrace), idleBound: .seconds(idleTimeout)),
            domain: place.domain, wideArea: try wideAreaPublishing(logger: logger), keepsExecuteBits: keepExecuteBits,
            logger: logger, events: { status.record($0) })
        // (Said once the inbox and the port are known to be good: a refusal comes first.)
        if case .ask = accept, hook == nil && web == nil && isatty(0) != 1 {
            logger.warning(
                "--accept ask with no terminal to ask on and no --hook: no offer can be put to anyone, and each sender is told so (use --accept known or all, or a --hook)"
            )
        }
        sweepParts(of: service)
        status.started(
            name: service.name, port: service.port, inbox: service.inboxPath,
            key: configuration.identity.publicKeySHA256)
        // Absolute: a send's path is compared with it when the send ends.
        let outbox = URL(fileURLWithPath: configuration.directory).standardizedFileURL
            .appendingPathComponent(Send.outboxName).path
        let background = backgroundSession(configuration: configuration, outbox: outbox, status: status, logger: logger)
        // "serving" is said once the group traps its signals (before it runs its services): a
        // SIGHUP or SIGTERM right after the line stops the daemon gracefully, never kills it.
        let serving =
            "serving \"\(service.name)\" on port \(service.port), inbox \(service.inboxPath), key \(configuration.identity.publicKeySHA256)"
        var services: [any Service] = [ReceiverLifecycle(service: service, ready: { printLine(serving) })]
        if let web {
            services += try webServices(
                web, receiving: service, background: background, outbox: outbox, configuration: configuration,
                status: status, questions: questions, logger: logger)
        }
        var groupConfiguration = ServiceGroupConfiguration(
            services: services, gracefulShutdownSignals: [.sigterm, .sigint, .sighup], logger: logger)
        // A stop never hangs on a client that holds on (a web page open in a browser, a
        // transfer that does not end): after this long, what still runs is cancelled.
        groupConfiguration.maximumGracefulShutdownDuration = .seconds(30)
        let group = ServiceGroup(configuration: groupConfiguration)
        // However the group ends (a stop cut short at its bound throws): queued sends stay
        // queued for the next start (a stop is not a cancel), and the status says stopped.
        defer {
            background.invalidateLeavingBackgroundTasks()
            // Their receivers hear that the sends stopped (and keep what they have) before
            // this process ends: briefly, a receiver that does not read is not waited for.
            PeerTransferUpload.waitForStoppedSendsToTellTheirReceivers(seconds: 3)
            status.stopped()
            status.flush()
            logger.info("stopped")
        }
        try await group.run()
    }

    /// What `--accept` (and `--hook`, `--web`) make of each offer.
    private func policy(configuration: PeerConfiguration, questions: WebQuestions, logger: Logger) -> AcceptPolicy {
        switch accept {
        case .all: return .all
        case .known: return .known
        case .ask:
            var judge = OfferJudge(hook: hook, logger: logger, knownPeersFile: configuration.knownPeersFile)
            if web != nil && hook == nil { judge.web = questions }
            return .ask(judge.judge)
        }
    }

    /// The wide-area publishing `--tsig-key` asks for, or nil on the link.
    private func wideAreaPublishing(logger: Logger) throws -> WideAreaPublishing? {
        guard let tsigKey else { return nil }
        if let warning = SalutTSIGKey.exposureWarning(forFile: tsigKey) { logger.warning("\(warning)") }
        do {
            return WideAreaPublishing(key: try SalutTSIGKey(contentsOfFile: tsigKey), nameServer: place.nameServer)
        } catch {
            throw PeerTransferError.runtime("--tsig-key: \(error)")
        }
    }

    /// Clears the inbox's old and oversized part files now and from time to time.
    private func sweepParts(of service: ReceiverService) {
        var sweeper = PartSweeper()
        sweeper.maximumAge = .seconds(Int64(keepParts * 86_400))
        sweeper.reserve = reserve / 100
        sweeper.shareOfOneSender = partsPerSender / 100
        service.clearParts(with: sweeper)
    }

    /// The user's own background session: it sends what `send --background` queued.
    private func backgroundSession(
        configuration: PeerConfiguration, outbox: String, status: StatusBook, logger: Logger
    ) -> PeerSession {
        let background = PeerSession(
            configuration: configuration.backgroundSessionConfiguration(
                runsTasks: true, displayName: configuration.deviceName, logger: logger, status: status),
            delegate: BackgroundSendLog(logger: logger, status: status, copiesFolder: outbox))
        if !background.runsBackgroundTasks {
            logger.warning(
                "this daemon cannot run the background queue (\(Terminal.escape(configuration.directory))/background is not writable, or another process holds its runner lock); it only receives"
            )
        }
        return background
    }

    /// The web page `--web` asks for, and the watch of the link's receivers it shows.
    private func webServices(
        _ web: String, receiving service: ReceiverService, background: PeerSession, outbox: String,
        configuration: PeerConfiguration, status: StatusBook, questions: WebQuestions, logger: Logger
    ) throws -> [any Service] {
        let (host, port) = try Self.webAddress(web)
        if !Self.isLoopback(host) {
            logger.warning(
                "the web page listens on \(host), beyond this machine: anyone who reaches it and learns its token can send as this device and answer its offers"
            )
        }
        let receivers = LinkReceivers(excluding: { service.name })
        Self.sweepStaleUploads(in: outbox, queued: background)
        let page = WebPage(
            configuration: configuration, status: status, questions: questions, receivers: receivers,
            queue: { files, to in
                let service = DiscoveredService(name: to, type: TransferLimits.serviceType)
                let task =
                    files.count == 1
                    ? background.uploadTask(to: service, fromFile: files[0])
                    : background.uploadTask(to: service, from: PathList.encoded(files.map(\.path)))
                task.taskDescription = PathList.description(of: files.map(\.path))
                task.resume()
                // Queued for the daemon that runs the queue (not a failure, not a delivery).
                if let error = task.error, !task.isQueuedElsewhere { throw error }
                return task.persistentIdentifier
            }, outbox: outbox, token: WebPage.makeToken(), logger: logger)
        let shownHost = host.contains(":") ? "[\(host)]" : host
        return [
            page.application(host: host, port: port) { port in
                let url = "http://\(shownHost):\(port)/?token=\(page.token)"
                status.webPage(url)
                printLine("web page: \(url)")
            },
            BackgroundWork { await receivers.run() },
        ]
    }

    /// Removes the page's uploads a daemon stopped before it queued them (killed mid-upload,
    /// say): those of no queued send, untouched for ten minutes (another command may be writing
    /// its own; those of the command line are not the page's to sweep).
    private static func sweepStaleUploads(in outbox: String, queued background: PeerSession) {
        let queuedPaths = background.allTasks.compactMap { ($0 as? PeerUploadTask)?.taskDescription }
        for entry in (try? FileManager.default.contentsOfDirectory(atPath: outbox)) ?? []
        where entry.hasPrefix("web-") || entry.hasPrefix(".incoming-") {
            let path = (outbox as NSString).appendingPathComponent(entry)
            let modified = (try? FileManager.default.attributesOfItem(atPath: path))?[.modificationDate] as? Date
            guard let modified, modified.timeIntervalSinceNow < -600,
                !queuedPaths.contains(where: { $0.hasPrefix(path + "/") })
            else { continue }
            try? FileManager.default.removeItem(atPath: path)
        }
    }
}

extension Serve {
    /// `--web`'s address and port: "8080" is 127.0.0.1:8080; "ADDRESS:PORT", with an IPv6
    /// address in brackets.
    static func webAddress(_ text: String) throws -> (host: String, port: Int) {
        var host = "127.0.0.1"
        var portText = Substring(text)
        if let colon = text.lastIndex(of: ":") {
            host = String(text[..<colon])
            portText = text[text.index(after: colon)...]
            if host.hasPrefix("[") && host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        }
        guard let port = Int(portText), (0...65_535).contains(port) else {
            throw ValidationError("--web: \"\(text)\" is not a port (0…65535) or ADDRESS:PORT")
        }
        var v4 = in_addr(), v6 = in6_addr()
        guard host == "localhost" || inet_pton(AF_INET, host, &v4) == 1 || inet_pton(AF_INET6, host, &v6) == 1 else {
            throw ValidationError("--web: \"\(host)\" is not an IP address")
        }
        guard host != "0.0.0.0" && host != "::" else {
            throw ValidationError(
                "--web: give the address of the interface to listen on (browsers name it, and the page answers only to its own address), not \(host)"
            )
        }
        return (host == "localhost" ? "127.0.0.1" : host, port)
    }

    /// True for 127.0.0.0/8 and ::1.
    static func isLoopback(_ host: String) -> Bool {
        host.hasPrefix("127.") || host == "::1"
    }
}

/// Work that runs beside the daemon's services until graceful shutdown.
struct BackgroundWork: Service {
    let work: @Sendable () async -> Void

    func run() async throws {
        await cancelWhenGracefulShutdown { await work() }
    }
}

/// The receiver as a swift-service-lifecycle service: runs until graceful shutdown.
struct ReceiverLifecycle: Service {
    let service: ReceiverService
    /// Called as the service starts, its group's signals already trapped.
    let ready: @Sendable () -> Void

    func run() async throws {
        ready()
        await cancelWhenGracefulShutdown { [service] in await service.run() }
    }
}
