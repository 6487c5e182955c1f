import ArgumentParser
import Foundation
import Salut
import SalutTools

struct Lookup: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Print the addresses of an mDNS host name.",
        discussion: HelpText.unwrapped(
            """
            Example:
              netsvc lookup myhost.local --ipv6
            """))

    @Argument(help: "The host name, for example myhost.local.")
    var host: String

    @Flag(help: "IPv4 addresses only.")
    var ipv4 = false

    @Flag(help: "IPv6 addresses only.")
    var ipv6 = false

    @Option(parsing: .unconditional, help: "Seconds to wait for an answer (0.001 to 3600).")
    var timeout: Seconds = 5

    func validate() throws {
        if ipv4 && ipv6 { throw ValidationError("--ipv4 and --ipv6 exclude each other") }
        try Input.requireUTF8(host, "the host name")
        try Input.check { try DiscoveryContext.validate(hostName: host) }
    }

    @OptionGroup var logging: LoggingOptions

    func run() async throws {
        do {
            try await requireDaemon()
            let family: DiscoveryContext.AddressFamily = ipv4 ? .ipv4 : ipv6 ? .ipv6 : .any
            for address in try await DiscoveryContext.shared.addresses(
                ofHost: host, family: family, timeout: timeout.value)
            {
                emit(address.host)
            }
        } catch let error as DiscoveryError where error.code == .timedOut {
            let family = ipv4 ? "IPv4 " : ipv6 ? "IPv6 " : ""
            note(
                "no \(family)address for \(Terminal.escaped(host)) within \(String(format: "%g", timeout.value)) s (is the machine on, and on this network? `netsvc browse --all --terminate` lists the services, with their hosts, that answer here)"
            )
            throw ExitStatus.notFound
        } catch {
            throw fail(error)
        }
    }
}

extension Lookup: LogLevelCommand {}
