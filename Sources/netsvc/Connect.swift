import ArgumentParser
import Foundation
import Glibc
import Salut
import SalutTools

/// TLS choices for a connecting client.
struct ClientTLSOptions: ParsableArguments {
    @Flag(help: "Use TLS. The server must present a certificate that --pin or --ca accepts, or one the system trusts.")
    var tls = false

    @Option(
        name: .customLong("pin"),
        help: ArgumentHelp(
            "Accept the server whose certificate or public key has this SHA-256 fingerprint (hex or base64; repeatable). Implies --tls.",
            valueName: "SHA256"))
    var pins: [String] = []

    @Option(
        help: ArgumentHelp(
            "Trust the roots in this PEM file instead of the system's. Implies --tls.", valueName: "FILE"))
    var ca: String?

    /// Checks the pins and the CA file's name while the command line is read, so that a bad
    /// one is answered with this command's usage, not the root's.
    func validate() throws { _ = try configuration() }

    /// The configuration, or nil for plain TCP.
    func configuration() throws -> TLSConfiguration? {
        guard tls || !pins.isEmpty || ca != nil else { return nil }
        var configuration = TLSConfiguration.client
        configuration.pinnedSHA256 = pins
        if let ca { configuration.trustRoots = .file(ca) }
        do { try configuration.validate() } catch { throw ValidationError("\(error)") }
        return configuration
    }
}

struct Connect: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Connect to a service by name and pipe stdin/stdout through it (netcat by service name).",
        discussion: HelpText.unwrapped(
            """
            Resolves the service, connects (IPv6 and IPv4, Happy Eyeballs), then copies stdin to the service and the service's answer to stdout. At the end of stdin the sending side is closed (a half-close), and netsvc exits once the service closes its side. Exit code 0 means the service's answer ended cleanly and is all on stdout, and all of stdin that was read was handed to the network. When the service ends its side while stdin still has bytes waiting, the rest is still sent while the service takes it; if the service goes away instead (or takes nothing for 30 s), that is a failure. When stdin is idle (a terminal nobody types into), netsvc exits with the service. Exit codes: 0 done, 1 not found, refused, TLS refused, or the connection failed before both directions were done (the message says which), 2 usage, 3 no avahi-daemon.

            Examples:
              echo hello | netsvc connect "Echo" _echo._tcp
              netsvc connect "Files" _salut._tcp --pin 3f1c…e9 < request.bin > reply.bin
            """))

    @OptionGroup var target: ServiceArguments

    @Option(parsing: .unconditional, help: "Seconds to wait for the service to resolve (0.001 to 3600).")
    var timeout: Seconds = 5

    @OptionGroup var tlsOptions: ClientTLSOptions

    @OptionGroup var logging: LoggingOptions

    func run() async throws {
        let tls = try tlsOptions.configuration()
        do {
            try await requireDaemon()
            let service = target.service
            let pair = try await service.connect(tls: tls, resolveTimeout: timeout.value)
            let upload = StandardInputUpload(to: pair.output)
            var failures: [String] = []
            do {
                try await Bridge.drain(pair.input, to: 1)
            } catch let error as POSIXError where error.code == .EPIPE {
                Output.endAsBrokenPipe()  // stdout's reader is gone (`netsvc connect … | head -1`)
            } catch {
                failures.append("receiving: \(error)")
            }
            if let lost = await upload.outcome(of: pair) { failures.append("sending: \(UploadFailure(reason: lost))") }
            pair.input.close()
            // A service that speaks TLS closes a plain connection without a word: said, with
            // what to do, whenever a plain connection that sent something heard nothing back.
            let tlsHint =
                tls == nil && !pair.hasReceivedBytes && upload.sentAnything
                ? "; if it expects TLS, try again with --tls (and --pin SHA256 or --ca FILE)" : ""
            if !failures.isEmpty {
                // Nothing came back at all: most often a service that turned us away.
                let cause =
                    pair.hasReceivedBytes
                    ? ""
                    : "the service sent nothing back (a service at its connection limit turns newcomers away so\(tlsHint)); "
                note(
                    "connection to \"\(Terminal.escaped(target.name))\" failed: " + cause
                        + failures.joined(separator: "; "))
                throw ExitCode.failure
            }
            if !tlsHint.isEmpty {
                note("\"\(Terminal.escaped(target.name))\" closed the connection without answering" + tlsHint)
            }
        } catch let exit as ExitCode {
            throw exit
        } catch {
            throw fail(error)
        }
    }
}

extension Connect: LogLevelCommand {}
