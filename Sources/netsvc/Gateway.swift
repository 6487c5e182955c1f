import ArgumentParser
import Foundation
import Salut
import SalutTools
import SalutStreams

/// `netsvc gateway`: this link's services, mirrored into a DNS zone (see ``DiscoveryGateway``).
struct Gateway: AsyncParsableCommand, LogLevelCommand {
    static let configuration = CommandConfiguration(
        abstract: "Mirror this link's services into a DNS zone, for clients on other links (until interrupted).",
        discussion: HelpText.unwrapped(
            """
            A discovery proxy without avahi's reflector: the services found on this link by mDNS are written by signed DNS updates under LABEL.ZONE (for example "Office Printer._ipp._tcp.lab-a.home.arpa"), with the SRV record naming HOST.LABEL.ZONE and that host's addresses beside it (never 169.254/16, IPv6 link-local or loopback addresses, which route nowhere else). TXT records follow changes, and a service that leaves the link leaves the zone. LABEL.ZONE is listed as a browsing domain of ZONE, so wide-area clients find it (`avahi-browse -d lab-a.home.arpa -a`, `netsvc browse _ipp._tcp --domain lab-a.home.arpa --dns-server …`, `dig`). Run one gateway per link, each with its own --link-label; two on one link write the same records. With --announce-remote, the services the other links' gateways wrote are also announced on this link by mDNS, so that a phone here sees another link's printer as one of its own link's (on a host HOST.LABEL.local, at its routed address).

            On start the gateway reads what the zone holds under its label and, once the link has had --settle seconds to show its services, removes those that left while it was not running. A server that does not answer is tried again, waiting twice as long each time (at most a minute); a key or zone the server refuses ends the gateway (exit 1). SIGINT, SIGTERM or SIGHUP stop it; the zone keeps what it mirrored (the next start reconciles it).

            Its status (how many services of this link the zone holds, how many wait for a place, what it announces from each other label, and the last error) is printed to standard output on SIGUSR1 (`kill -USR1 PID`; under a systemd unit, `systemctl kill -s USR1 --kill-whom=main netsvc-gateway`, and the line is in `journalctl -u netsvc-gateway`), and with --json written as a "status" line whenever it changes (at most once a second).

            Exit codes: 0 stopped by a signal, 1 the server refused the updates or could not be found, 2 bad arguments (a label that is not a DNS label, a type that is not _name._tcp or _name._udp, a key file that cannot be read), 3 avahi-daemon unavailable.

            Examples:
              netsvc gateway --domain home.arpa --tsig-key gw.key --link-label lab-a
              netsvc gateway --domain home.arpa --tsig-key gw.key --link-label lab-b \\
                  --announce-remote
              netsvc gateway --domain home.arpa --tsig-key gw.key \\
                  --types _ipp._tcp,_airplay._tcp --dry-run
            """))

    @Option(
        help: ArgumentHelp("The DNS domain the services go under (a zone, or a name inside one).", valueName: "ZONE"))
    var domain: String

    @Option(
        help: ArgumentHelp(
            "The TSIG key the zone takes updates with (a file in BIND's tsig-keygen format).", valueName: "FILE"))
    var tsigKey: String

    @Option(
        help: ArgumentHelp(
            "This link's label: its services go under LABEL.ZONE. Every link's gateway needs a label of its own (two gateways under one label overwrite each other's services). Default: this host's mDNS name (its first line, \"mirroring this link into LABEL.ZONE\", says which).",
            valueName: "LABEL"))
    var linkLabel: String?

    @Option(
        parsing: .upToNextOption,
        help: ArgumentHelp(
            "Only these service types (comma-separated or repeated), for example _ipp._tcp,_airplay._tcp. Default: every type on the link.",
            valueName: "TYPES"))
    var types: [String] = []

    @Flag(
        help:
            "Every service type on the link. This is the default; the flag only says so explicitly (it cannot go with --types)."
    )
    var allTypes = false

    @Option(
        parsing: .upToNextOption,
        help: ArgumentHelp("Never these service types (comma-separated or repeated).", valueName: "TYPES"))
    var excludeTypes: [String] = []

    @Option(
        help: ArgumentHelp(
            "At most this many services are mirrored, first come first served (1 to 100000).", valueName: "N"))
    var maxServices = 1000

    @Option(
        help: ArgumentHelp(
            "Without --types: at most this many service types are watched at a time; more wait until types leave the link (1 to 500).",
            valueName: "N"))
    var maxTypes = 200

    @Option(
        parsing: .unconditional,
        help: ArgumentHelp(
            "Seconds the link has at the start to show its services before the zone's leftovers are removed (0.1 to 600).",
            valueName: "SECONDS"))
    var settle: Seconds = 3

    @Option(
        help: ArgumentHelp(
            "The name server to ask for the zone and its primary, as ADDRESS or ADDRESS:PORT; default: /etc/resolv.conf.",
            valueName: "ADDRESS"))
    var dnsServer: String?

    @Flag(help: "Send nothing: print each update as nsupdate lines (the zone is still read).")
    var dryRun = false

    @Flag(
        help: ArgumentHelp(
            "Also announce the other links' services, as their gateways wrote them into the zone, on this link by mDNS (for phones and other clients that speak only mDNS).",
            discussion:
                "Each is announced on a host HOST.LABEL.local with its routed addresses, and withdrawn when it leaves the zone or the gateway stops; the zone's serial is asked every quarter second and the zone read again when it changed (at most 400 services, of the types --types and --exclude-types allow). A gateway never writes such hosts' services back into the zone."
        ))
    var announceRemote = false

    @Flag(help: "Write one JSON object per line.")
    var json = false

    @OptionGroup var logging: LoggingOptions

    /// The types named, split at commas.
    private static func split(_ values: [String]) -> [String] {
        values.flatMap { $0.split(separator: ",") }.map { $0.trimmingCharacters(in: .whitespaces) }.filter {
            !$0.isEmpty
        }
    }

    func validate() throws {
        if allTypes && !types.isEmpty { throw ValidationError("--all-types and --types do not go together") }
        for type in Self.split(types) + Self.split(excludeTypes) {
            let parts = type.split(separator: ".")
            guard parts.count == 2, DiscoveryGateway.mayMirror(type: type) else {
                throw ValidationError(
                    "\"\(Terminal.escaped(type))\" is not a service type such as _ipp._tcp or _name._udp (nor DNS-SD's own _dns-sd._udp)"
                )
            }
        }
        if !(1...100_000).contains(maxServices) {
            throw ValidationError("--max-services \(maxServices) is outside 1…100000")
        }
        // (Each type is a browser on one connection to avahi-daemon, which allows 1,024 objects.)
        if !(1...500).contains(maxTypes) {
            throw ValidationError("--max-types \(maxTypes) is outside 1…500")
        }
        if !(0.1...600).contains(settle.value) { throw ValidationError("--settle \(settle.value) is outside 0.1…600") }
        if let dnsServer, WideAreaBrowsing.nameServerAddress(dnsServer) == nil {
            throw ValidationError("--dns-server \(dnsServer) is not an IP address, ADDRESS:PORT or [IPv6]:PORT")
        }
        if let label = linkLabel, !DiscoveryGateway.isLinkLabel(label) {
            throw ValidationError(
                "--link-label \"\(Terminal.escaped(label))\" is not a DNS label (1 to 63 bytes, no dots, spaces or control characters)"
            )
        }
        let bare = domain.lowercased().trimmingCharacters(in: CharacterSet(charactersIn: "."))
        if bare == "local" || bare.hasSuffix(".local") {
            throw ValidationError("--domain \(domain) is multicast DNS on the link, not a zone a name server holds")
        }
    }

    /// This host's name up to its first dot.
    private static func hostLabel() -> String {
        String(ProcessInfo.processInfo.hostName.split(separator: ".").first ?? "")
    }

    func run() async throws {
        if let warning = Publish.exposure(ofKeyFile: tsigKey) { note(warning) }
        let key: SalutTSIGKey
        do {
            key = try SalutTSIGKey(contentsOfFile: tsigKey)
        } catch {
            Output.standardError("netsvc: --tsig-key \(Terminal.escaped(tsigKey)): \(error)\n")
            tellFailure("--tsig-key \(tsigKey): \(error)", exit: ExitStatus.usage)
            throw ExitStatus.usage
        }
        try await requireDaemonOrFail()
        let label: String
        if let linkLabel {
            label = linkLabel
        } else {
            // avahi-daemon's name for this host is unique on the link (mDNS sees to it); the
            // kernel's may be the same on every machine ("raspberrypi").
            let mdnsName = (try? await DiscoveryContext.shared.daemonInfo(timeout: 3))?.hostName
            label = mdnsName ?? Self.hostLabel()
            guard DiscoveryGateway.isLinkLabel(label) else {
                Output.standardError(
                    "netsvc: this host's name \"\(Terminal.escaped(label))\" is not a DNS label: give one with --link-label\n"
                )
                tellFailure("this host's name \"\(label)\" is not a DNS label", exit: ExitStatus.usage)
                throw ExitStatus.usage
            }
            note(
                "no --link-label: this link's services go under \"\(label)\" (this host's \(mdnsName == nil ? "name" : "mDNS name")); every link's gateway needs a label of its own, as two under one label overwrite each other's services"
            )
        }
        let configuration = DiscoveryGateway.Configuration(
            domain: domain, label: label, key: key,
            nameServer: dnsServer.flatMap(WideAreaBrowsing.nameServerAddress), types: Self.split(types),
            excludedTypes: Self.split(excludeTypes), maximumServices: maxServices, maximumTypes: maxTypes,
            settleTime: .milliseconds(Int(settle.value * 1000)), dryRun: dryRun, announceRemote: announceRemote)
        // (Said when --max-services asks for more: the default, 1,000, goes without saying.)
        let askedForMore = CommandLine.arguments.contains { $0 == "--max-services" || $0.hasPrefix("--max-services=") }
        if announceRemote && askedForMore && maxServices > DiscoveryGateway.maximumAnnouncedServices {
            note(
                "--announce-remote announces at most \(DiscoveryGateway.maximumAnnouncedServices) of the zone's services on this link (avahi-daemon's limit per client), whatever --max-services says, shared evenly among the other links"
            )
        }
        let json = self.json
        let gateway = DiscoveryGateway(configuration: configuration) { report in Self.show(report, json: json) }
        Self.printStatusOnSIGUSR1(of: gateway, json: json)
        let running = Task { try await gateway.run() }
        let stopped = Task {
            let signal = await Publish.waitForTermination(hangUpEnds: true)
            running.cancel()
            return signal
        }
        do {
            try await running.value
        } catch is CancellationError {
        } catch {
            stopped.cancel()
            throw failing(error)
        }
        let signal = await stopped.value
        if json { printJSON(["event": "stopped", "signal": signal]) } else { emit("stopped (\(signal))") }
    }

    private func requireDaemonOrFail() async throws {
        do { try await requireDaemon() } catch { throw failing(error) }
    }

    /// `fail`, and with --json the same as the log's last line.
    private func failing(_ error: any Error) -> ExitCode {
        let code = fail(error)
        tellFailure(failure(of: error).message, exit: code)
        return code
    }

    /// With --json, a failure that ends the gateway is the last line of the log too
    /// (`{"event": "error", "message": …, "exit": N}`), not only a line on standard error: a
    /// script or log collector that reads the JSON learns why it stopped.
    private func tellFailure(_ message: String, exit code: ExitCode) {
        guard json else { return }
        printJSON(["event": "error", "message": message, "exit": Int(code.rawValue)])
    }

    /// On each SIGUSR1, `gateway`'s status as it is now: a line on standard output (a JSON
    /// object with --json), as an admin asks a running daemon (`kill -USR1 PID`).
    private static func printStatusOnSIGUSR1(of gateway: DiscoveryGateway, json: Bool) {
        signal(SIGUSR1, SIG_IGN)
        let source = DispatchSource.makeSignalSource(signal: SIGUSR1, queue: .main)
        source.setEventHandler {
            guard let status = gateway.status else {
                if json {
                    printJSON(["event": "status", "starting": true])
                } else {
                    emit("status: starting (the zone and its server are not found yet)")
                }
                return
            }
            if json { printJSON(statusObject(status)) } else { emit("status: \(describe(status))") }
        }
        source.resume()
        SignalSources.keep([source])
    }

    /// `status` as a JSON log line.
    static func statusObject(_ status: DiscoveryGateway.Status) -> [String: Any] {
        var object: [String: Any] = [
            "event": "status", "domain": status.labelDomain, "mirrored": status.mirrored, "waiting": status.waiting,
            "announced": status.announced, "retrying": status.retrying,
        ]
        if let error = status.lastError { object["lastError"] = error }
        if let date = status.lastErrorDate { object["lastErrorAt"] = ISO8601DateFormatter().string(from: date) }
        return object
    }

    /// `status` as words: "3 services of this link in lab-a.home.arpa; announcing 2 from
    /// lab-b; the server takes its updates, no error so far".
    static func describe(_ status: DiscoveryGateway.Status) -> String {
        func services(_ count: Int) -> String { "\(count) service\(count == 1 ? "" : "s")" }
        var words = "\(services(status.mirrored)) of this link in \(Terminal.escaped(status.labelDomain))"
        if status.waiting > 0 { words += " (\(status.waiting) more wait for a place: --max-services)" }
        if !status.announced.isEmpty {
            words +=
                "; announcing "
                + status.announced.sorted { $0.key < $1.key }.map { "\($0.value) from \(Terminal.escaped($0.key))" }
                .joined(separator: ", ")
        }
        let error = status.lastError.map { reason in
            let when = status.lastErrorDate.map { ", at \(ISO8601DateFormatter().string(from: $0))" } ?? ""
            return "the last error\(when): \(Terminal.escaped(reason))"
        }
        if status.retrying {
            words += "; the zone is behind the link: an update waits to be tried again"
            if let error { words += " (\(error))" }
        } else {
            words += "; the server takes its updates" + (error.map { " (\($0))" } ?? ", no error so far")
        }
        return words
    }

    private static func show(_ report: DiscoveryGateway.Report, json: Bool) {
        switch report {
        case .status(let status):
            if json { printJSON(statusObject(status)) }
        case .started(let zone, let labelDomain, let server):
            if json {
                printJSON(["event": "started", "zone": zone, "domain": labelDomain, "server": server])
            } else {
                emit("mirroring this link into \(Terminal.escaped(labelDomain)) (zone \(zone), updates to \(server))")
            }
        case .listed(let count):
            if json {
                printJSON(["event": "listed", "services": count])
            } else {
                emit("the zone holds \(count) service\(count == 1 ? "" : "s") of this label")
            }
        case .mirrored(let key):
            if json {
                printJSON(["event": "mirrored", "name": key.name, "type": key.type])
            } else {
                emit("mirrored \"\(Terminal.escaped(key.name))\" \(key.type)")
            }
        case .removed(let key):
            if json {
                printJSON(["event": "removed", "name": key.name, "type": key.type])
            } else {
                emit("removed \"\(Terminal.escaped(key.name))\" \(key.type)")
            }
        case .skipped(let key, let reason):
            if json {
                printJSON(["event": "skipped", "name": key.name, "type": key.type, "reason": reason])
            } else {
                emit("skipped \"\(Terminal.escaped(key.name))\" \(key.type): \(Terminal.escaped(reason))")
            }
        case .retrying(let reason, let seconds):
            if json {
                printJSON(["event": "retrying", "reason": reason, "seconds": seconds])
            } else {
                note("\(Terminal.escaped(reason)); trying again in \(Int(seconds)) s")
            }
        case .wouldSend(let lines):
            if json {
                printJSON(["event": "would-send", "update": lines])
            } else {
                // Already safe to print: names and TXT strings in master-file form write every
                // byte outside printable ASCII as \DDD.
                emit(lines)
            }
        case .announced(let key, let label, let name):
            if json {
                printJSON(["event": "announced", "name": key.name, "type": key.type, "from": label, "as": name])
            } else {
                let renamed = name == key.name ? "" : " as \"\(Terminal.escaped(name))\" (the name is taken here)"
                emit(
                    "announced \"\(Terminal.escaped(key.name))\" \(key.type) from \(Terminal.escaped(label)) on this link\(renamed)"
                )
            }
        case .unannounced(let key, let label):
            if json {
                printJSON(["event": "unannounced", "name": key.name, "type": key.type, "from": label])
            } else {
                emit(
                    "no longer announcing \"\(Terminal.escaped(key.name))\" \(key.type) from \(Terminal.escaped(label))"
                )
            }
        }
    }
}
