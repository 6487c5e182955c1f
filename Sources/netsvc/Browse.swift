import ArgumentParser
import Foundation
import Salut
import SalutTools

struct Browse: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Show services as they appear (+) and disappear (-).",
        discussion: HelpText.unwrapped(
            """
            Lines are: +/-, name, type, domain, interface and protocol of the first sighting;
            with --resolve also host:port, addresses (IPv6 with %scope) and TXT; with --verify, a
            removal that is not the daemon's own says why ("stopped answering"). --terminate
            exits once the daemon's cache and the first network answers are in, like
            avahi-browse -t. --json writes one object per line instead (event, name, type,
            domain, interface, protocol, host, addresses, port, txt; with --resolve "resolved" (true or
            false) and "resolveError" (why not); and with --verify a
            line's reason, "not-answering" or "answering-again", with its sentence in
            "detail"; binary TXT values as "base64:…").

            Examples:
              netsvc browse _http._tcp
              netsvc browse _http._tcp --resolve --terminate --json
              netsvc browse --all --terminate
              netsvc browse _ipp._tcp --verify
              netsvc browse _ipp._tcp --interface eth1 --ipv4 --ignore-local
              netsvc browse _http._tcp --resolve --domain home.arpa --dns-server 198.18.1.1

            With --dns-server, a wide-area --domain is browsed with unicast DNS queries to that
            name server (PTR, then SRV, TXT and addresses), asked again when the records' TTL
            runs out; the interface column says "dns" (JSON: "interface":"dns",
            "protocol":"unicast"), the rest is as on the link.
            """))

    @Argument(help: "The service type, for example _http._tcp (omit with --all).")
    var type: String?

    @Option(help: "The domain to browse.")
    var domain = "local"

    @Flag(help: "Browse every service type on the network (_services._dns-sd._udp).")
    var all = false

    @Flag(
        help:
            "Resolve each service found: host, port, addresses and TXT. Up to 16 are resolved at once, each line printed when its resolution ends (one that does not answer within 5 s is printed with why)."
    )
    var resolve = false

    @Flag(help: "Exit once everything currently on the network has been listed.")
    var terminate = false

    @Flag(help: "Write one JSON object per line.")
    var json = false

    @Flag(help: "Only services seen over IPv4 mDNS (and only IPv4 addresses).")
    var ipv4 = false

    @Flag(help: "Only services seen over IPv6 mDNS (and only IPv6 addresses).")
    var ipv6 = false

    @Option(help: ArgumentHelp("Only services seen on this network interface.", valueName: "IF"))
    var interface: String?

    @Flag(help: "Leave out services published by this host.")
    var ignoreLocal = false

    @Flag(
        help: ArgumentHelp(
            "Show a service only while it answers a direct mDNS query, asked when it is found and every --verify-every seconds: one whose host left without its goodbye reaching us is listed as removed (\"stopped answering\") within about --verify-every + 6 seconds (12 by default), instead of staying listed until the daemon's record expires (up to 75 minutes); one that answers again is listed again; one that never answered is not shown (--log-level info names it). With --terminate, netsvc waits for each service's first check (about 3 s for a silent one; 128 services are checked at a time)."
        ))
    var verify = false

    @Option(
        parsing: .unconditional,
        help: ArgumentHelp(
            "With --verify, how often each listed service is asked again (1 to 3600, default 6; a check is a small multicast query on each interface and protocol the service is seen on, sent up to 4 times while it gets no answer).",
            valueName: "seconds"))
    var verifyEvery: Double?

    @Option(
        help: ArgumentHelp(
            "Browse the wide-area --domain by unicast DNS queries to this name server (ADDRESS, ADDRESS:PORT or [IPv6]:PORT) instead of through avahi-daemon.",
            valueName: "ADDRESS"))
    var dnsServer: String?

    func validate() throws {
        if ipv4 && ipv6 { throw ValidationError("--ipv4 and --ipv6 exclude each other") }
        if let dnsServer {
            guard Publish.nameServer(dnsServer) != nil else {
                throw ValidationError("--dns-server \(dnsServer) is not an IP address, ADDRESS:PORT or [IPv6]:PORT")
            }
            if all || interface != nil || ignoreLocal {
                throw ValidationError(
                    "--dns-server browses one TYPE; --all, --interface and --ignore-local are for the link")
            }
            if (try? ServiceNames.normaliseDomain(domain)).map(ServiceNames.isOnTheLink) ?? false {
                throw ValidationError(
                    "--dns-server is for a wide-area --domain (local is browsed through avahi-daemon)")
            }
        }
        if verify {
            if dnsServer != nil {
                throw ValidationError("--verify asks the link by mDNS; it does not go with --dns-server")
            }
            if !((try? ServiceNames.normaliseDomain(domain)).map(ServiceNames.isOnTheLink) ?? false) {
                throw ValidationError(
                    "--verify asks the link by mDNS: it needs --domain local (\(domain) is wide-area)")
            }
        } else if verifyEvery != nil {
            throw ValidationError("--verify-every needs --verify (add --verify, or leave out --verify-every)")
        }
        if let verifyEvery, !(verifyEvery.isFinite && (1...3600).contains(verifyEvery)) {
            throw ValidationError("--verify-every must be 1 to 3600 seconds")
        }
        if all == (type != nil) {
            throw ValidationError(all ? "give a TYPE or --all, not both" : "give a service TYPE, or --all")
        }
        if let type { try Input.requireUTF8(type, "the service type") }
        try Input.requireUTF8(domain, "--domain")
        try Input.check {  // the type, domain and interface, before the daemon is contacted
            if let type {
                _ = try ServiceBrowser(type: type, domain: domain, interface: interface, family: family)
            } else {
                _ = try ServiceBrowser.serviceTypes(domain: domain, interface: interface, family: family)
            }
        }
    }

    private var family: DiscoveryContext.AddressFamily { ipv4 ? .ipv4 : ipv6 ? .ipv6 : .any }

    @OptionGroup var logging: LoggingOptions

    func run() async throws {
        do {
            if let dnsServer, let type, let server = Publish.nameServer(dnsServer) {
                return try await browseUnicast(type: type, server: server)
            }
            try await requireDaemon()
            let printer = BrowsePrinter(json: json, resolve: resolve, family: family, interface: interface)
            let listing = Listing(
                printer: printer,
                watch: verify
                    ? LivenessWatch(
                        printer: printer, period: .seconds(verifyEvery ?? 6)) : nil)
            if let type {
                let browser = try ServiceBrowser(
                    type: type, domain: domain, interface: interface, family: family, includeLocal: !ignoreLocal)
                for try await update in browser {
                    await listing.follow(update)
                    for change in update.changes { await listing.report(change, in: update) }
                    if terminate && update.isComplete { return await listing.finish() }
                }
            } else {
                try await browseAll(listing)
            }
        } catch {
            throw fail(error)
        }
    }

    /// Browses the service types, and each type as it appears; with --terminate, ends when the
    /// type list and every type's browse are complete.
    private func browseAll(_ listing: Listing) async throws {
        enum Event: Sendable {
            case types(BrowseUpdate)
            case services(type: String, BrowseUpdate)
            case failed(any Error)
        }
        let (events, sink) = AsyncStream.makeStream(of: Event.self)
        let types = try ServiceBrowser.serviceTypes(
            domain: domain, interface: interface, family: family, includeLocal: !ignoreLocal)
        var producers: [Task<Void, Never>] = [
            Task {
                do { for try await update in types { sink.yield(.types(update)) } } catch { sink.yield(.failed(error)) }
            }
        ]
        defer { producers.forEach { $0.cancel() } }
        var started: Set<String> = [], complete: Set<String> = []
        var typesComplete = false
        for await event in events {
            switch event {
            case .failed(let error):
                throw error
            case .types(let update):
                for case .added(let found) in update.changes where started.insert(found.name).inserted {
                    let browser: ServiceBrowser
                    do {
                        browser = try ServiceBrowser(
                            type: found.name, domain: domain, interface: interface, family: family,
                            includeLocal: !ignoreLocal)
                    } catch {
                        // A type another host announces that cannot be browsed is left out; it
                        // does not end the browse of the others.
                        note(
                            TerminalText.escaped(
                                "not browsing the type \"\(found.name)\" another host announces: \(error)"))
                        complete.insert(found.name)
                        continue
                    }
                    producers.append(
                        Task {
                            do {
                                for try await typeUpdate in browser {
                                    sink.yield(.services(type: found.name, typeUpdate))
                                }
                            } catch {
                                sink.yield(.failed(error))
                            }
                        })
                }
                if update.isComplete { typesComplete = true }
            case .services(let type, let update):
                await listing.follow(update)
                for change in update.changes { await listing.report(change, in: update) }
                if update.isComplete { complete.insert(type) }
            }
            if terminate && typesComplete && complete.isSuperset(of: started) { return await listing.finish() }
        }
    }
}

extension Browse {
    /// Lists the type's instances in a wide-area domain by unicast queries, again at each TTL
    /// (`ServiceBrowser(type:domain:wideArea:)`).
    private func browseUnicast(type: String, server: SocketAddress) async throws {
        let wideArea = WideAreaBrowsing(nameServer: server)
        var failures = 0
        while true {
            do {
                for try await update in try ServiceBrowser(type: type, domain: domain, wideArea: wideArea) {
                    for change in update.changes {
                        switch change {
                        case .added(let service):
                            let resolved = resolve ? try? await service.resolve(wideArea: wideArea) : nil
                            report("add", service.name, type: type, resolved: resolved)
                        case .removed(let service):
                            report("remove", service.name, type: type, resolved: nil)
                        }
                    }
                    if terminate { return }
                }
                return
            } catch let error as DiscoveryError where error.code == .serverUnreachable && !terminate {
                // Only the first look ends the browse; a live one outlasts a silent server:
                // try again, less and less often.
                failures += 1
                note("\(error); trying again")
                try await Task.sleep(for: WideAreaBrowsing.backOff(afterFailures: failures))
            }
        }
    }

    private func report(_ event: String, _ name: String, type: String, resolved: ResolvedService?) {
        let addresses =
            resolved?.addresses.filter { family == .ipv4 ? !$0.isIPv6 : family == .ipv6 ? $0.isIPv6 : true } ?? []
        // The same TXT shapes as on the link (an object in JSON, binary values as base64).
        if json {
            var object: [String: Any] = [
                "event": event, "name": name, "type": type, "domain": domain, "interface": "dns", "protocol": "unicast",
            ]
            if let resolved {
                object["host"] = resolved.hostName
                object["port"] = Int(resolved.port)
                object["addresses"] = addresses.map(\.host)
                object["txt"] = jsonTXT(resolved.txtRecord)
            }
            if resolve && event == "add" { object["resolved"] = resolved != nil }
            printJSON(object)
        } else {
            let sign = event == "add" ? Terminal.green("+") : Terminal.red("-")
            var line =
                "\(sign) \(Terminal.bold(Terminal.pad(Terminal.escaped(name), 32))) \(Terminal.pad(Terminal.escaped(type), 24))"
                + " \(Terminal.pad(Terminal.escaped(domain), 8)) \(Terminal.pad("dns", 8)) \(Terminal.pad("", 4))"
            if let resolved {
                line +=
                    "  \(Terminal.escaped(resolved.hostName)):\(resolved.port)  \(addresses.map(\.host).joined(separator: ","))"
                if !resolved.txtRecord.entries.isEmpty {
                    line += "  " + Terminal.dim(Terminal.escaped(resolved.txtRecord.description))
                }
            } else if resolve && event == "add" {
                line += "  (not resolved)"
            }
            emit(line)
        }
    }
}

/// Where browse changes go: straight to the printer, or through the liveness watch (--verify).
struct Listing: Sendable {
    let printer: BrowsePrinter
    let watch: LivenessWatch?

    /// Where the listed services are seen now (an update may say so without changes).
    func follow(_ update: BrowseUpdate) async {
        await watch?.seen(update.sightings)
    }

    func report(_ change: BrowseChange, in update: BrowseUpdate) async {
        guard let watch else { return await printer.report(change, in: update) }
        switch change {
        case .added(let service): await watch.found(service, sightings: update.sightings[service] ?? [])
        case .removed(let service): await watch.lost(service, sightings: update.sightings[service] ?? [])
        }
    }

    /// Before --terminate exits: every service listed has been checked and printed.
    func finish() async {
        await watch?.finish()
        await printer.finish()
    }
}

/// Prints browse changes as columns or JSON lines.
struct BrowsePrinter: Sendable {
    let json: Bool
    let resolve: Bool
    let family: DiscoveryContext.AddressFamily
    let interface: String?
    /// With --resolve, the lines waiting for their resolution.
    private let resolving = ResolvingLines()

    init(json: Bool, resolve: Bool, family: DiscoveryContext.AddressFamily, interface: String?) {
        (self.json, self.resolve, self.family, self.interface) = (json, resolve, family, interface)
    }

    /// Waits until every line is printed (with --resolve, each after its resolution).
    func finish() async { await resolving.drain() }

    func report(_ change: BrowseChange, in update: BrowseUpdate) async {
        let (event, service): (String, DiscoveredService) =
            switch change {
            case .added(let s): ("add", s)
            case .removed(let s): ("remove", s)
            }
        await report(event, service, sightings: update.sightings[service] ?? [])
    }

    /// Prints one line: `event` is "add" or "remove"; `reason` says why when it is not the
    /// daemon's own news (a service that stopped answering, with --verify). With --resolve the
    /// line is queued: it is printed once its resolution ends, beside the others'.
    func report(
        _ event: String, _ service: DiscoveredService, sightings: [ServiceSighting], reason: LivenessWatch.Reason? = nil
    )
        async
    {
        guard resolve else { return await print(event, service, sightings: sightings, reason: reason) }
        await resolving.add(service) { await print(event, service, sightings: sightings, reason: reason) }
    }

    /// Resolves the service (with --resolve, for an addition) and prints its line.
    private func print(
        _ event: String, _ service: DiscoveredService, sightings: [ServiceSighting], reason: LivenessWatch.Reason?
    ) async {
        let first = sightings.first
        let interface = first?.interface ?? "", proto = first.map { $0.isIPv6 ? "IPv6" : "IPv4" } ?? ""
        var resolved: ResolvedService?
        var failure: String?
        if resolve, event == "add" {
            do {
                var result = try await service.resolve(timeout: 5)
                result.addresses = result.addresses.filter(keep)
                resolved = result
            } catch {
                // Said, not left to look like a browse without --resolve.
                failure = (error as? DiscoveryError)?.description ?? "\(error)"
            }
        }
        if json {
            var object: [String: Any] = [
                "event": event, "name": service.name, "type": service.type, "domain": service.domain,
                "interface": interface, "protocol": proto,
            ]
            if let resolved {
                object["host"] = resolved.hostName
                object["port"] = Int(resolved.port)
                object["addresses"] = resolved.addresses.map(\.host)
                object["txt"] = jsonTXT(resolved.txtRecord)
            }
            if resolve && event == "add" {
                object["resolved"] = resolved != nil
                if let failure { object["resolveError"] = failure }
            }
            if let reason {
                object["reason"] = reason.rawValue
                object["detail"] = reason.sentence
            }
            printJSON(object)
        } else {
            let sign = event == "add" ? Terminal.green("+") : Terminal.red("-")
            let name = Terminal.escaped(service.name), type = Terminal.escaped(service.type),
                domain = Terminal.escaped(service.domain)
            var line =
                "\(sign) \(Terminal.bold(Terminal.pad(name, 32))) \(Terminal.pad(type, 24)) \(Terminal.pad(domain, 8))"
                + " \(Terminal.pad(interface, 8)) \(Terminal.pad(proto, 4))"
            if let resolved {
                line +=
                    "  \(Terminal.escaped(resolved.hostName)):\(resolved.port)  \(resolved.addresses.map(\.host).joined(separator: ","))"
                if !resolved.txtRecord.entries.isEmpty {
                    line += "  " + Terminal.dim(Terminal.escaped(resolved.txtRecord.description))
                }
            } else if let failure {
                line += "  (not resolved: \(Terminal.escaped(failure)))"
            }
            if let reason { line += "  " + Terminal.dim("(\(reason.sentence))") }
            emit(line)
        }
    }

    /// Addresses the family and interface choices allow (IPv4 addresses carry no interface).
    private func keep(_ address: SocketAddress) -> Bool {
        switch family {
        case .ipv4 where address.isIPv6, .ipv6 where !address.isIPv6: return false
        default: break
        }
        if let interface, address.isIPv6, address.scopeID != 0,
            address.host.split(separator: "%").last.map(String.init) != interface
        {
            return false
        }
        return true
    }
}

extension Browse: LogLevelCommand {}
