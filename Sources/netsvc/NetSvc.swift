import ArgumentParser
import Foundation
import SalutStreams
import Glibc
import Salut
import SalutTools

/// `netsvc`: publish, browse, resolve and look up DNS-SD services from the command line.
@main
struct NetSvc: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "netsvc",
        abstract: "Publish, browse and resolve DNS-SD (mDNS) services through the avahi-daemon.",
        discussion: HelpText.unwrapped(
            """
            Exit codes: 0 success, 1 not found, timed out, refused or not trusted, 2 usage error (bad arguments), 3 avahi-daemon unavailable, 4 name collision with --no-rename. When the daemon is not running: `Scripts/avahi-sandbox start` in a Salut checkout, or `sudo systemctl start avahi-daemon` on a normal system.

            Human output has aligned columns, coloured only on a terminal without NO_COLOR; --json writes one object per line for scripts.

            Shell completion: `netsvc --generate-completion-script bash > /etc/bash_completion.d/netsvc` (also zsh and fish; see docs/netsvc.md).

            Examples:
              netsvc browse _http._tcp --terminate
              netsvc browse --all --resolve --terminate --json
              netsvc publish "My Site" _http._tcp 8080 path=/ --json
              netsvc publish Echo _echo._tcp 0 --listen --exec cat
              echo hello | netsvc connect Echo _echo._tcp
              netsvc resolve "My Site" _http._tcp --timeout 3
              netsvc monitor "My Site" _http._tcp
              netsvc lookup myhost.local --ipv4
              netsvc domains
              netsvc gateway --domain home.arpa --tsig-key gw.key --link-label lab-a
            """),
        version: "0.1.0",  // the package's version (CHANGELOG.md)
        subcommands: [
            Browse.self, Publish.self, Resolve.self, Lookup.self, Connect.self, Monitor.self, Domains.self,
            Gateway.self,
        ]
    )

    /// ArgumentParser's own entry point, except that usage errors exit 2 (as documented) instead
    /// of sysexits' 64.
    static func main() async {
        // A write to a pipe whose reader is gone (an --exec child that exited, `| head`) is an
        // EPIPE error to handle, not a signal that kills netsvc. Sockets use MSG_NOSIGNAL.
        var ignore = sigaction()
        ignore.__sigaction_handler.sa_handler = SIG_IGN
        if sigaction(SIGPIPE, &ignore, nil) != 0 { note("cannot ignore SIGPIPE: \(String(cString: strerror(errno)))") }
        refuseMistypedArguments()
        do {
            // The log level is read from the arguments on their own: the parsed command is
            // handed whole to its `run`.
            (try? parseAsRoot() as? LogLevelCommand)?.logging.apply()
            var command = try parseAsRoot()
            if var asyncCommand = command as? AsyncParsableCommand {
                try await asyncCommand.run()
            } else {
                try command.run()
            }
        } catch {
            let code = exitCode(for: error)
            if code == .validationFailure {
                Output.standardError(fullMessage(for: error) + "\n")
                Foundation.exit(ExitStatus.usage.rawValue)
            }
            exit(withError: error)
        }
    }
}

extension NetSvc {
    /// Refuses a mistyped subcommand (`brwose`) or option (`--domian`), saying what it may be
    /// and exiting 2, before ArgumentParser, which says first what is missing instead.
    static func refuseMistypedArguments() {
        let commands = configuration.subcommands.map { command in
            (
                name: command.configuration.commandName ?? String(describing: command).lowercased(),
                help: { command.helpMessage(includeHidden: true, columns: 10_000) }
            )
        }
        if let refusal = MistypedArguments.refusal(
            of: Array(CommandLine.arguments.dropFirst()), tool: "netsvc", commands: commands)
        {
            Output.standardError(refusal + "\n")
            Foundation.exit(ExitStatus.usage.rawValue)
        }
    }
}

/// Exit codes that scripts can rely on.
enum ExitStatus {
    static let notFound = ExitCode(1)
    static let usage = ExitCode(2)
    static let daemonUnavailable = ExitCode(3)
    static let collision = ExitCode(4)
}

/// Turns a discovery error into a one-line message on stderr and the matching exit code.
func fail(_ error: any Error) -> ExitCode {
    let (message, code) = failure(of: error)
    Output.standardError("netsvc: \(Terminal.escaped(message))\n")
    return code
}

/// What `fail` says of `error` (unescaped) and the exit code it gives.
func failure(of error: any Error) -> (message: String, code: ExitCode) {
    let message: String
    let code: ExitCode
    switch error {
    case let error as DiscoveryError:
        message = error.description
        switch error.code {
        case .timedOut, .notFound: code = ExitStatus.notFound
        case .daemonUnavailable: code = ExitStatus.daemonUnavailable
        case .collision: code = ExitStatus.collision
        case .invalidServiceType, .invalidServiceName, .invalidDomain, .invalidHostName, .invalidPort,
            .invalidTXTRecord,
            .unknownInterface, .invalidKey:
            code = ExitStatus.usage
        default: code = .failure
        }
    default:
        message = "\(error)"
        code = .failure
    }
    return (message, code)
}

/// Checks that the daemon answers, so a missing daemon is exit code 3 with a hint, not a hang.
func requireDaemon() async throws {
    do {
        _ = try await DiscoveryContext.shared.daemonInfo(timeout: 3)
    } catch {
        throw DiscoveryError.daemonUnavailable("no answer on the D-Bus system bus within 3 s")
    }
}

/// Writes one line to stdout at once (unbuffered), so scripts and pipes see each event as it
/// happens.
func emit(_ line: String) {
    Output.standardOutput(line + "\n")
}

/// Prints one JSON object per line. Strings keep their exact value; besides the C0 controls
/// that JSON itself escapes, DEL, the C1 controls and the invisible or reordering format
/// characters (`DisguisingScalars`: bidirectional overrides, line separators, Hangul fillers,
/// …) are written as `\uXXXX` too (a surrogate pair beyond U+FFFF), so a line printed on a
/// terminal can neither drive it nor hide a character.
func printJSON(_ object: [String: Any]) {
    guard
        let data = try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes])
    else { return }
    var line = ""
    let scalars = Array(String(decoding: data, as: UTF8.self).unicodeScalars)
    for (index, scalar) in scalars.enumerated() {
        // Only non-ASCII (and DEL) can be left: JSON's syntax is ASCII, and it escapes C0 itself.
        if scalar.value >= 0x7F && DisguisingScalars.mustEscape(scalars, at: index) {
            for unit in String(scalar).utf16 { line += String(format: "\\u%04x", unit) }
        } else {
            line.unicodeScalars.append(scalar)
        }
    }
    Output.standardOutput(line + "\n")
}

/// TXT attributes for JSON: UTF-8 text where it is text, else `base64:` and the bytes.
func jsonTXT(_ record: TXTRecord) -> [String: Any] {
    var out: [String: Any] = [:]
    for entry in record.entries {
        guard let value = entry.value else { out[entry.key] = true; continue }
        if let text = String(data: value, encoding: .utf8) {
            out[entry.key] = text
        } else {
            out[entry.key] = "base64:" + value.base64EncodedString()
        }
    }
    return out
}

/// The NAME TYPE [--domain D] that names one service instance.
struct ServiceArguments: ParsableArguments {
    @Argument(help: "The instance name.")
    var name: String

    @Argument(help: "The service type, for example _http._tcp.")
    var type: String

    @Option(help: "The domain.")
    var domain = "local"

    var service: DiscoveredService { DiscoveredService(name: name, type: type, domain: domain) }

    /// The name, type and domain are checked here, before the daemon is contacted.
    func validate() throws {
        try Input.requireUTF8(name, "the service name")
        try Input.requireUTF8(type, "the service type")
        try Input.requireUTF8(domain, "--domain")
        try Input.check { try service.validate() }
    }
}
