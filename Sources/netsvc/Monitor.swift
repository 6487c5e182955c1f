import ArgumentParser
import Foundation
import Salut
import SalutTools

struct Monitor: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Print a service's TXT record now and at every change, until interrupted.",
        discussion: HelpText.unwrapped(
            """
            Each line is the whole record (KEY=VALUE, in wire order); --json writes
            {"event":"txt","name":…,"type":…,"domain":…,"txt":{…}} per change.

            With --dns-server, a service in a wide-area --domain is watched with unicast DNS
            queries to that server (asked again at the record's TTL: a change shows within
            one TTL, 120 s for what netsvc publishes); a record that is gone prints (empty).

            Examples:
              netsvc monitor "Living Room" _airplay._tcp --json
              netsvc monitor Printer _ipp._tcp --domain home.arpa --dns-server 198.18.1.1
            """))

    @OptionGroup var target: ServiceArguments

    @Flag(help: "Write one JSON object per line.")
    var json = false

    @Option(
        name: .customLong("dns-server"),
        help: ArgumentHelp(
            "Watch a wide-area --domain by unicast DNS queries to this server (ADDRESS, ADDRESS:PORT or [IPv6]:PORT).",
            valueName: "address"))
    var dnsServer: String?

    @OptionGroup var logging: LoggingOptions

    func validate() throws {
        guard let dnsServer else { return }
        guard Publish.nameServer(dnsServer) != nil else {
            throw ValidationError("--dns-server \(dnsServer) is not an IP address, ADDRESS:PORT or [IPv6]:PORT")
        }
        if (try? ServiceNames.normaliseDomain(target.domain)).map(ServiceNames.isOnTheLink) ?? false {
            throw ValidationError("--dns-server is for a wide-area --domain (local is watched through avahi-daemon)")
        }
    }

    func run() async throws {
        do {
            let service = target.service
            let updates: AsyncThrowingStream<TXTRecord, any Error>
            if let dnsServer, let server = Publish.nameServer(dnsServer) {
                updates = try service.txtRecordUpdates(wideArea: WideAreaBrowsing(nameServer: server))
            } else {
                try await requireDaemon()
                let link = try service.txtRecordUpdates()
                updates = AsyncThrowingStream { continuation in
                    let relay = Task {
                        for await record in link { continuation.yield(record) }
                        continuation.finish()
                    }
                    continuation.onTermination = { _ in relay.cancel() }
                }
            }
            for try await record in updates {
                if json {
                    printJSON([
                        "event": "txt", "name": target.name, "type": target.type, "domain": target.domain,
                        "txt": jsonTXT(record),
                    ])
                } else {
                    emit(record.entries.isEmpty ? "(empty)" : Terminal.escaped(record.description))
                }
            }
        } catch {
            throw fail(error)
        }
    }
}

struct Domains: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "List the browsing (or registration) domains the network announces.",
        discussion: HelpText.unwrapped(
            """
            "local" always comes first; others come from the network's DNS-SD announcements.
            Exits once the daemon has answered (like avahi-browse -D -t).

            Examples:
              netsvc domains
              netsvc domains --registration --json
            """))

    @Flag(help: "Registration domains instead of browsing domains.")
    var registration = false

    @Flag(help: "Write one JSON object per line.")
    var json = false

    @Option(parsing: .unconditional, help: "Seconds to wait for the network's answers (0.001 to 3600).")
    var timeout: Seconds = 3

    @OptionGroup var logging: LoggingOptions

    func run() async throws {
        do {
            try await requireDaemon()
            var found = ["local"]
            let browser = ServiceBrowser.domains(registration: registration)
            let deadline = timeout
            let others = try await withThrowingTaskGroup(of: [String]?.self) { group -> [String] in
                group.addTask {
                    for try await update in browser where update.isComplete {
                        return update.services.map(\.name).sorted()
                    }
                    return []
                }
                group.addTask {
                    try await Task.sleep(nanoseconds: deadline.nanoseconds)
                    return nil
                }
                let first = try await group.next() ?? nil
                group.cancelAll()
                return first ?? []
            }
            found += others.filter { $0 != "local" }
            for domain in found {
                if json {
                    printJSON(["event": "domain", "domain": domain, "registration": registration])
                } else {
                    emit(Terminal.escaped(domain))
                }
            }
        } catch {
            throw fail(error)
        }
    }
}

extension Monitor: LogLevelCommand {}

extension Domains: LogLevelCommand {}
