import ArgumentParser
import Foundation
import Salut

struct Browse: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Show services of a type as they appear and disappear.",
        discussion: """
            Examples:
              netsvc browse _http._tcp
              netsvc browse _http._tcp --resolve --terminate --json
            """)

    @Argument(help: "The service type, for example _http._tcp.")
    var type: String

    @Option(help: "The domain to browse.")
    var domain = "local"

    @Flag(help: "Resolve each service found: host, port, addresses and TXT.")
    var resolve = false

    @Flag(help: "Exit once everything currently on the network has been listed.")
    var terminate = false

    @Flag(help: "Write one JSON object per line.")
    var json = false

    func run() async throws {
        do {
            try await requireDaemon()
            for try await update in try ServiceBrowser(type: type, domain: domain) {
                for change in update.changes { try await report(change) }
                if terminate && update.isComplete { return }
            }
        } catch {
            throw fail(error)
        }
    }

    private func report(_ change: BrowseChange) async throws {
        let (event, service): (String, DiscoveredService) = switch change {
        case .added(let s): ("add", s)
        case .removed(let s): ("remove", s)
        }
        var resolved: ResolvedService?
        if resolve, event == "add" { resolved = try? await service.resolve(timeout: 5) }
        if json {
            var object: [String: Any] = ["event": event, "name": service.name, "type": service.type, "domain": service.domain]
            if let resolved {
                object["host"] = resolved.hostName
                object["port"] = Int(resolved.port)
                object["addresses"] = resolved.addresses.map(\.host)
                object["txt"] = jsonTXT(resolved.txtRecord)
            }
            printJSON(object)
        } else {
            var line = "\(event == "add" ? "+" : "-") \(service.name)  \(service.type)  \(service.domain)"
            if let resolved {
                line += "  \(resolved.hostName):\(resolved.port)  [\(resolved.addresses.map(\.host).joined(separator: ", "))]  \(resolved.txtRecord)"
            }
            emit(line)
        }
    }
}
