import ArgumentParser
import Dispatch
import Foundation
import Salut
import SalutTools
import SalutStreams

struct Publish: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Publish a service until interrupted (SIGINT, SIGTERM or SIGHUP withdraws it).",
        discussion: HelpText.unwrapped(
            """
            Prints the final name, which differs from NAME after a collision unless --no-rename is given (then it exits 4).

            With --listen, netsvc itself listens on PORT (0 picks a free one) on IPv4 and IPv6, publishes that port, and serves each connection: by default it bridges the connection to its own stdin/stdout, one connection at a time (the others wait their turn); with --exec it runs CMD (through /bin/sh) for each connection, connected to the child's stdin/stdout. The child finds the peer's address in NETSVC_PEER.

            Every peer is bounded: it has --handshake-timeout seconds from connecting to finish the TLS handshake and to send its first byte (unless the service speaks first), and is cut after --idle-timeout seconds with nothing moving. At most --max-connections are served (or wait their turn) at once: a newcomer takes the place of the oldest one whose peer has sent nothing (connected and silent, or closed without a byte), or else is refused (with a reset, noted on stderr); an evicted connection counts until its child has ended, and at most --max-connections may be ending at once, so a flood cannot start children without bound. When a connection fails, or netsvc is stopped, its child gets SIGTERM, then SIGKILL 2 s later. Connection events go to stderr (or stdout with --json).

            Examples:
              netsvc publish "My Site" _http._tcp 8080 path=/index.html
              netsvc publish "Echo" _echo._tcp 0 --listen --exec cat
              netsvc publish "Inbox" _drop._tcp 0 --listen > received.bin
              netsvc publish "Secure" _echo._tcp 0 --listen --exec cat \\
                  --tls-cert c.pem --tls-key k.pem
              netsvc publish "Printer" _ipp._tcp 631 --txt-file status.txt
              kill -HUP <its pid>   # after changing status.txt: the TXT record follows
            """))

    @Argument(help: "The instance name (\"\" for this host's name).")
    var name: String

    @Argument(help: "The service type, for example _http._tcp or _printer._sub._http._tcp.")
    var type: String

    @Argument(help: "The port the service listens on.")
    var port: Int

    @Argument(help: "TXT attributes as KEY=VALUE, or KEY alone for a boolean attribute.")
    var txt: [String] = []

    @Option(
        help: ArgumentHelp(
            "More TXT attributes, one KEY=VALUE (or KEY alone) a line, # starting a comment line; read again on SIGHUP and the published record changed to match (a file that cannot be read or published then keeps the old record).",
            valueName: "FILE"))
    var txtFile: String?

    @Option(
        help:
            "The domain: local (the link, through avahi-daemon), or a wide-area DNS zone such as home.arpa (needs --tsig-key)."
    )
    var domain = "local"

    @Option(
        help: ArgumentHelp(
            "Publish in the wide-area --domain by DNS updates signed with this TSIG key (a file in BIND's tsig-keygen format; never give a secret on the command line).",
            valueName: "FILE"))
    var tsigKey: String?

    @Option(
        help: ArgumentHelp(
            "With --tsig-key: the name server to ask for the zone's primary, as ADDRESS or ADDRESS:PORT ([ADDRESS]:PORT for IPv6); default: /etc/resolv.conf.",
            valueName: "ADDRESS"))
    var dnsServer: String?

    @Flag(help: "Fail (exit 4) instead of renaming on a name collision.")
    var noRename = false

    @Flag(help: "Write one JSON object per line.")
    var json = false

    @Option(
        name: .customLong("subtype"),
        help: ArgumentHelp("Also publish under this subtype (repeatable), for example _printer.", valueName: "SUBTYPE"))
    var subtypes: [String] = []

    @Flag(help: "Listen on PORT and serve connections (see above).")
    var listen = false

    @Option(help: ArgumentHelp("With --listen: run this shell command for each connection.", valueName: "CMD"))
    var exec: String?

    @Option(help: ArgumentHelp("With --listen: serve TLS with this PEM certificate chain.", valueName: "FILE"))
    var tlsCert: String?

    @Option(help: ArgumentHelp("With --listen: the PEM private key of --tls-cert.", valueName: "FILE"))
    var tlsKey: String?

    @Option(
        help: ArgumentHelp(
            "With --listen: connections served at once, 1 to 10000; a newcomer then takes the place of the oldest peer that has sent nothing, or is refused.",
            valueName: "N"))
    var maxConnections: Int = 64

    @Option(
        parsing: .unconditional,
        help: ArgumentHelp(
            "With --listen: seconds a peer has to finish the TLS handshake and send its first byte (0.001 to 3600).",
            valueName: "SECONDS"))
    var handshakeTimeout: Seconds = 10

    @Option(
        parsing: .unconditional,
        help: ArgumentHelp(
            "With --listen: seconds a connection may stay idle, nothing moving either way, before it is cut (0.001 to 3600).",
            valueName: "SECONDS"))
    var idleTimeout: Seconds = 300

    func validate() throws {
        if !listen && (exec != nil || tlsCert != nil || tlsKey != nil) {
            throw ValidationError("--exec, --tls-cert and --tls-key need --listen")
        }
        if !(1...10000).contains(maxConnections) {
            throw ValidationError("--max-connections \(maxConnections) is outside 1…10000")
        }
        if (tlsCert == nil) != (tlsKey == nil) { throw ValidationError("--tls-cert and --tls-key go together") }
        if !listen && port == 0 {
            throw ValidationError("port 0 needs --listen (a published service must name its port)")
        }
        if !(0...65535).contains(port) { throw ValidationError("port \(port) is outside 0…65535") }
        let bare = domain.lowercased().trimmingCharacters(in: CharacterSet(charactersIn: "."))
        let local = bare == "local"
        if local && tsigKey != nil {
            throw ValidationError("--tsig-key is for a wide-area --domain; local is published through avahi-daemon")
        }
        if bare.hasSuffix(".local") {
            throw ValidationError(
                "\(domain) is under local, which is multicast DNS on the link, not a zone a name server holds; publish in local, or in a unicast zone such as home.arpa with --tsig-key"
            )
        }
        if !local && tsigKey == nil {
            throw ValidationError(
                "publishing in \(domain) needs --tsig-key FILE (avahi-daemon publishes only in local)")
        }
        if dnsServer != nil && tsigKey == nil { throw ValidationError("--dns-server goes with --tsig-key") }
        if let dnsServer, Self.nameServer(dnsServer) == nil {
            throw ValidationError("--dns-server \(dnsServer) is not an IP address, ADDRESS:PORT or [IPv6]:PORT")
        }
        try validateInput()
    }

    @OptionGroup var logging: LoggingOptions

    func run() async throws {
        // From the start, so that a SIGHUP sent early neither kills netsvc nor is lost: it is
        // applied once the service is published.
        let reloads = txtFile == nil ? nil : TXTReloads(command: self)
        do {
            let record = try txtRecord()
            Self.warnIfLarge(record)
            let wideArea = try tsigKey.map { path in
                if let warning = Self.exposure(ofKeyFile: path) { note(warning) }
                return WideAreaPublishing(
                    key: try SalutTSIGKey(contentsOfFile: path), nameServer: dnsServer.flatMap(Self.nameServer))
            }
            if wideArea == nil { try await requireDaemon() }
            let ad: ServiceAdvertisement
            if let wideArea {
                if listen, let problem = DescriptorLimit.raiseToHardLimit() { note(problem) }
                let tls = tlsCert.map { TLSConfiguration.server(certificateChainFile: $0, privateKeyFile: tlsKey!) }
                let limits = ConnectionLimits(
                    handshakeTimeout: handshakeTimeout.value, firstByteTimeout: handshakeTimeout.value,
                    idleTimeout: idleTimeout.value)
                ad =
                    listen
                    ? try await ServiceAdvertisement.listen(
                        name: name, type: type, domain: domain, port: port, txtRecord: record,
                        subtypes: subtypes, tls: tls, limits: limits, allowRename: !noRename,
                        wideArea: wideArea)
                    : try await ServiceAdvertisement.publish(
                        name: name, type: type, domain: domain, port: port, txtRecord: record,
                        subtypes: subtypes, allowRename: !noRename, wideArea: wideArea)
            } else if listen {
                let tls = tlsCert.map { TLSConfiguration.server(certificateChainFile: $0, privateKeyFile: tlsKey!) }
                let limits = ConnectionLimits(
                    handshakeTimeout: handshakeTimeout.value, firstByteTimeout: handshakeTimeout.value,
                    idleTimeout: idleTimeout.value)
                if let problem = DescriptorLimit.raiseToHardLimit() { note(problem) }
                ad = try await ServiceAdvertisement.listen(
                    name: name, type: type, domain: domain, port: port,
                    txtRecord: record, subtypes: subtypes, tls: tls, limits: limits,
                    allowRename: !noRename)
            } else {
                ad = try await ServiceAdvertisement.publish(
                    name: name, type: type, domain: domain, port: port,
                    txtRecord: record, subtypes: subtypes, allowRename: !noRename)
            }
            let finalPort = ad.listener.map { Int($0.port) } ?? port
            if json {
                printJSON([
                    "event": "published", "name": ad.name, "type": type, "domain": domain, "port": finalPort,
                    "subtypes": subtypes, "listening": listen,
                ])
            } else {
                emit(
                    "published \"\(Terminal.escaped(ad.name))\" \(type) port \(finalPort)"
                        + (listen ? " (listening)" : ""))
            }
            let server = listen ? ConnectionServer(command: exec, json: json, maxConnections: maxConnections) : nil
            let serving = server.map { server in Task { await server.serve(ad.connections) } }
            reloads?.published(ad)
            // Without --txt-file, a SIGHUP (a closed terminal) withdraws the service as SIGTERM
            // does, rather than killing netsvc with its records left in the zone.
            let signal = await Self.waitForTermination(hangUpEnds: txtFile == nil)
            var removal: (any Error)?
            if wideArea != nil {
                do { try await ad.withdrawReportingFailure() } catch { removal = error }
            } else {
                await ad.withdraw()
            }
            if let serving {
                // Every connection ends; children get SIGTERM, then SIGKILL after the grace.
                serving.cancel()
                await Self.wait(for: serving, seconds: ConnectionServer.grace + 1)
            }
            if let removal {
                // The exit status must not say "done" while the records may still be there.
                throw NotWithdrawn(name: ad.name, domain: domain, reason: "\(removal)")
            }
            try await Task.sleep(nanoseconds: 100_000_000)  // let the goodbye packets leave
            if json { printJSON(["event": "withdrawn", "name": ad.name, "signal": signal]) }
        } catch {
            // A script reading the JSON lines learns of a collision (and any other failure)
            // there too, not only from the exit status and standard error.
            if json, let discovery = error as? DiscoveryError {
                printJSON([
                    "event": discovery.code == .collision ? "collision" : "error", "name": name, "type": type,
                    "domain": domain, "message": discovery.description,
                ])
            }
            if noRename, let discovery = error as? DiscoveryError, discovery.code == .collision {
                Output.standardError(
                    "netsvc: \(Terminal.escaped(discovery.description)): something else on the link publishes it; pick another name, or leave out --no-rename to take the next free one (\"\(Terminal.escaped(name)) #2\")\n"
                )
                throw ExitStatus.collision
            }
            throw fail(error)
        }
    }

    /// Waits for `task` to finish, at most `seconds` (the task is left to itself after that:
    /// the process is about to exit).
    static func wait(for task: Task<Void, Never>, seconds: Double) async {
        let once = OnceFlag()
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            Task {
                await task.value
                if once.claim() { done.resume() }
            }
            DispatchQueue.global().asyncAfter(deadline: .now() + seconds) {
                if once.claim() { done.resume() }
            }
        }
    }

    /// Suspends until SIGINT or SIGTERM (or, with `hangUpEnds`, SIGHUP) arrives; returns its name.
    static func waitForTermination(hangUpEnds: Bool = false) async -> String {
        await withCheckedContinuation { continuation in
            let once = OnceFlag()
            var sources: [DispatchSourceSignal] = []
            let ending = [(SIGINT, "SIGINT"), (SIGTERM, "SIGTERM")] + (hangUpEnds ? [(SIGHUP, "SIGHUP")] : [])
            for (number, label) in ending {
                signal(number, SIG_IGN)
                let source = DispatchSource.makeSignalSource(signal: number, queue: .main)
                source.setEventHandler {
                    if once.claim() { continuation.resume(returning: label) }
                }
                source.resume()
                sources.append(source)
            }
            SignalSources.keep(sources)
        }
    }
}

/// `publish --txt-file`: on each SIGHUP, the TXT record is read again (arguments and file) and
/// the published one changed to match, one change at a time; a SIGHUP before the service is
/// published is applied once it is. A record that cannot be read or published is reported, and
/// the old one stays.
final class TXTReloads: @unchecked Sendable {
    // @unchecked: `advertisement` and `pending` are touched only on the main queue (the signal
    // source's queue, and `published(_:)` hops there).
    private let command: Publish
    private var advertisement: ServiceAdvertisement?
    private var pending = false
    private var changing = false

    init(command: Publish) {
        self.command = command
        signal(SIGHUP, SIG_IGN)
        let source = DispatchSource.makeSignalSource(signal: SIGHUP, queue: .main)
        source.setEventHandler { [self] in hangUp() }
        source.resume()
        SignalSources.keep([source])
    }

    /// The service is published: a SIGHUP that came before is applied now.
    func published(_ ad: ServiceAdvertisement) {
        DispatchQueue.main.async { [self] in
            advertisement = ad
            if pending { hangUp() }
        }
    }

    private func hangUp() {
        pending = true
        guard let ad = advertisement, !changing else { return }
        pending = false
        changing = true
        let command = self.command
        Task { @MainActor [self] in
            do {
                let record = try command.txtRecord()
                try await ad.changeTXTRecord(to: record)
                if command.json {
                    printJSON(["event": "txt", "name": ad.name, "txt": jsonTXT(record)])
                } else {
                    emit(
                        "TXT record of \"\(Terminal.escaped(ad.name))\" changed: \(Terminal.escaped(record.description))"
                    )
                }
            } catch {
                note("the TXT record was not changed: \(error)")
            }
            changing = false
            if pending { hangUp() }
        }
    }
}

/// A wide-area service whose removal the zone's server did not confirm.
struct NotWithdrawn: Error, CustomStringConvertible {
    var name: String
    var domain: String
    var reason: String
    var description: String {
        "\"\(name)\" may still be listed in \(domain): removing it failed (\(reason)); its records go when their update lease runs out, or remove them with nsupdate (docs/wide-area.md)"
    }
}

extension Publish {
    /// A warning when the key file can be read by others than its owner; nil when it cannot.
    static func exposure(ofKeyFile path: String) -> String? {
        SalutTSIGKey.exposureWarning(forFile: path).map { "warning: \($0)" }
    }

    /// `ADDRESS`, `ADDRESS:PORT` or `[IPv6]:PORT` (port 53 when not given).
    static func nameServer(_ text: String) -> SocketAddress? {
        WideAreaBrowsing.nameServerAddress(text)
    }
}

/// Keeps signal sources alive for the life of the process.
enum SignalSources {
    nonisolated(unsafe) private static var kept: [DispatchSourceSignal] = []
    static func keep(_ sources: [DispatchSourceSignal]) { kept.append(contentsOf: sources) }
}

extension Publish: LogLevelCommand {}
