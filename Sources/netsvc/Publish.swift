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

            With --listen, netsvc itself listens on PORT (0 picks a free one) on IPv4 and IPv6,
            publishes that port, and serves each connection: by default it bridges the
            connection to its own stdin/stdout, one connection at a time; with --exec it runs
            CMD (through /bin/sh) for each connection, connected to the child's stdin/stdout.
            The child finds the peer's address in NETSVC_PEER.

            Examples:
              netsvc publish "My Site" _http._tcp 8080 path=/index.html
              netsvc publish "Echo" _echo._tcp 0 --listen --exec cat
              netsvc publish "Inbox" _drop._tcp 0 --listen > received.bin
              netsvc publish "Secure" _echo._tcp 0 --listen --exec cat --tls-cert c.pem --tls-key k.pem
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

    @Option(name: .customLong("subtype"), help: ArgumentHelp("Also publish under this subtype (repeatable), for example _printer.", valueName: "SUBTYPE"))
    var subtypes: [String] = []

    @Flag(help: "Listen on PORT and serve connections (see above).")
    var listen = false

    @Option(help: ArgumentHelp("With --listen: run this shell command for each connection.", valueName: "CMD"))
    var exec: String?

    @Option(help: ArgumentHelp("With --listen: serve TLS with this PEM certificate chain.", valueName: "FILE"))
    var tlsCert: String?

    @Option(help: ArgumentHelp("With --listen: the PEM private key of --tls-cert.", valueName: "FILE"))
    var tlsKey: String?

    func validate() throws {
        if !listen && (exec != nil || tlsCert != nil || tlsKey != nil) {
            throw ValidationError("--exec, --tls-cert and --tls-key need --listen")
        }
        if (tlsCert == nil) != (tlsKey == nil) { throw ValidationError("--tls-cert and --tls-key go together") }
        if !listen && port == 0 { throw ValidationError("port 0 needs --listen (a published service must name its port)") }
        if !(0...65535).contains(port) { throw ValidationError("port \(port) is outside 0…65535") }
        try validateInput()
    }

    func run() async throws {
        do {
            let record = try txtRecord()
            Self.warnIfLarge(record)
            try await requireDaemon()
            let ad: ServiceAdvertisement
            if listen {
                let tls = tlsCert.map { TLSConfiguration.server(certificateChainFile: $0, privateKeyFile: tlsKey!) }
                ad = try await ServiceAdvertisement.listen(name: name, type: type, domain: domain, port: port,
                                                           txtRecord: record, subtypes: subtypes, tls: tls,
                                                           allowRename: !noRename)
            } else {
                ad = try await ServiceAdvertisement.publish(name: name, type: type, domain: domain, port: port,
                                                            txtRecord: record, subtypes: subtypes, allowRename: !noRename)
            }
            let finalPort = ad.listener.map { Int($0.port) } ?? port
            if json {
                printJSON(["event": "published", "name": ad.name, "type": type, "domain": domain, "port": finalPort,
                           "subtypes": subtypes, "listening": listen])
            } else {
                emit("published \"\(Terminal.escaped(ad.name))\" \(type) port \(finalPort)" + (listen ? " (listening)" : ""))
            }
            let server = listen ? Task { await ConnectionServer(command: exec, json: json).serve(ad.connections) } : nil
            let signal = await Self.waitForTermination()
            server?.cancel()
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
