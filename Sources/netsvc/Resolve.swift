import ArgumentParser
import Foundation
import Salut
import SalutTools

struct Resolve: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Resolve one service to its host, port, addresses and TXT record.",
        discussion: HelpText.unwrapped(
            """
            Exits 1 when the service does not answer in time.

            Example:
              netsvc resolve "My Site" _http._tcp --timeout 3 --json
            """))

    @OptionGroup var target: ServiceArguments

    @Option(parsing: .unconditional, help: "Seconds to wait for an answer (0.001 to 3600).")
    var timeout: Seconds = 5

    @Flag(help: "Write one JSON object.")
    var json = false

    @OptionGroup var logging: LoggingOptions

    func run() async throws {
        do {
            try await requireDaemon()
            let result = try await target.service.resolve(timeout: timeout.value, settle: 0.5)
            if json {
                printJSON([
                    "event": "resolved", "name": result.service.name, "type": target.type, "domain": target.domain,
                    "host": result.hostName, "port": Int(result.port),
                    "addresses": result.addresses.map(\.host), "txt": jsonTXT(result.txtRecord),
                ])
            } else {
                emit(
                    "\(Terminal.escaped(result.service.name))  \(Terminal.escaped(target.type))  \(Terminal.escaped(target.domain))"
                )
                emit("  host       \(Terminal.escaped(result.hostName))")
                emit("  port       \(result.port)")
                emit("  addresses  \(result.addresses.map(\.host).joined(separator: ", "))")
                emit("  txt        \(Terminal.escaped(result.txtRecord.description))")
            }
        } catch let error as DiscoveryError where error.code == .timedOut {
            // Said with what did not answer and for how long, in JSON too with --json.
            let message =
                "\"\(target.name)\" \(target.type) in \(target.domain) did not resolve within \(String(format: "%g", timeout.value)) s (is it still published? `netsvc browse \(target.type) --terminate` lists what is)"
            if json {
                printJSON([
                    "event": "error", "name": target.name, "type": target.type, "domain": target.domain,
                    "message": message, "exit": Int(ExitStatus.notFound.rawValue),
                ])
            }
            note(Terminal.escaped(message))
            throw ExitStatus.notFound
        } catch {
            throw fail(error)
        }
    }
}

extension Resolve: LogLevelCommand {}
