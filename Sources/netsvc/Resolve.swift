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
            // Said with what did not answer, for how long and why (a browse tells a service that
            // is not there from one whose host does not answer), in JSON too with --json.
            var message =
                "\"\(target.name)\" \(target.type) in \(target.domain) did not resolve within \(String(format: "%g", timeout.value)) s"
            let listing = "`netsvc browse \(target.type) --terminate` lists what is"
            switch await Self.listedNames(of: target) {
            case .some(let names) where names.contains(target.name):
                message +=
                    ": it is published, but its host gave no address in time (it may have left, or not be reachable from here)"
            case .some(let names):
                let near = NameSuggestions.closest(to: target.name, among: names).first
                message +=
                    ": no service of that name is published\(near.map { " (did you mean \"\($0)\"?)" } ?? ""); \(listing)"
            case .none:
                message += " (is it still published? \(listing))"
            }
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

extension Resolve {
    /// The names a browse of the service's type lists within 2 s (the daemon's cache and the
    /// first answers); nil when the browse could not say in time.
    static func listedNames(of target: ServiceArguments) async -> Set<String>? {
        await withTaskGroup(of: Set<String>?.self) { group in
            group.addTask {
                // (The user asked to resolve, not to browse: a long type is not warned about.)
                guard let browser = try? ServiceBrowser.withoutTypeNote(type: target.type, domain: target.domain)
                else { return nil }
                var names = Set<String>()
                do {
                    for try await update in browser {
                        for case .added(let service) in update.changes { names.insert(service.name) }
                        if update.isComplete { return names }
                    }
                } catch {}
                return nil
            }
            group.addTask {
                try? await Task.sleep(for: .seconds(2))
                return nil
            }
            let first = await group.next() ?? nil
            group.cancelAll()
            return first
        }
    }
}

extension Resolve: LogLevelCommand {}
