import ArgumentParser
import Dispatch
import Foundation
import Salut

struct Publish: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Publish a service until interrupted (SIGINT or SIGTERM withdraws it).",
        discussion: """
            Prints the final name, which differs from NAME after a collision unless
            --no-rename is given (then it exits 4).

            Example:
              netsvc publish "My Site" _http._tcp 8080 path=/index.html
            """)

    @Argument(help: "The instance name (\"\" for this host's name).")
    var name: String

    @Argument(help: "The service type, for example _http._tcp or _printer._sub._http._tcp.")
    var type: String

    @Argument(help: "The port the service listens on.")
    var port: Int

    @Argument(help: "TXT attributes as KEY=VALUE, or KEY alone for a boolean attribute.")
    var txt: [String] = []

    @Option(help: "The domain.")
    var domain = "local"

    @Flag(help: "Fail (exit 4) instead of renaming on a name collision.")
    var noRename = false

    @Flag(help: "Write one JSON object per line.")
    var json = false

    func run() async throws {
        do {
            var record = TXTRecord()
            for item in txt {
                if let eq = item.firstIndex(of: "=") {
                    try record.set(String(item[..<eq]), to: Data(item[item.index(after: eq)...].utf8))
                } else {
                    try record.set(item, to: nil)
                }
            }
            try await requireDaemon()
            let ad = try await ServiceAdvertisement.publish(name: name, type: type, domain: domain, port: port,
                                                            txtRecord: record, allowRename: !noRename)
            if json {
                printJSON(["event": "published", "name": ad.name, "type": type, "domain": domain, "port": port])
            } else {
                emit("published \"\(ad.name)\" \(type) port \(port)")
            }
            let signal = await Self.waitForTermination()
            await ad.withdraw()
            try await Task.sleep(nanoseconds: 100_000_000)   // let the goodbye packets leave
            if json { printJSON(["event": "withdrawn", "name": ad.name, "signal": signal]) }
        } catch {
            throw fail(error)
        }
    }

    /// Suspends until SIGINT or SIGTERM arrives; returns its name.
    static func waitForTermination() async -> String {
        await withCheckedContinuation { continuation in
            let once = OnceFlag()
            var sources: [DispatchSourceSignal] = []
            for (number, label) in [(SIGINT, "SIGINT"), (SIGTERM, "SIGTERM")] {
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

/// True the first time only.
final class OnceFlag: @unchecked Sendable {
    // @unchecked: `done` is guarded by `lock`.
    private let lock = NSLock()
    private var done = false
    func claim() -> Bool {
        lock.lock(); defer { lock.unlock() }
        if done { return false }
        done = true
        return true
    }
}

/// Keeps signal sources alive for the life of the process.
enum SignalSources {
    nonisolated(unsafe) private static var kept: [DispatchSourceSignal] = []
    static func keep(_ sources: [DispatchSourceSignal]) { kept.append(contentsOf: sources) }
}
