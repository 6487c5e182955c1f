import ArgumentParser
import Foundation
import Glibc
import PeerTransferCore
import Salut
import SalutTools

/// `peerxfer`: send files to another machine on the LAN, verified and resumable.
@main
struct PeerXfer: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "peerxfer",
        abstract:
            "Send files and folders to peerxfer daemons on the LAN over TLS 1.3, verified by SHA-256 and resumable.",
        discussion: """
            A receiver runs `peerxfer serve`; it publishes itself by DNS-SD with the fingerprint of its key. A sender finds it by name, checks that the key it connects to is the one advertised and the one paired with (a receiver new to it is asked about, or refused without a terminal: see `send --help`), offers a manifest, and sends what the receiver accepts. Files arrive as NAME.<first 24 hex digits of the sender's key>.peerxfer-part (each sender has its own) and get their name only once their SHA-256 matches. Run the same `send` again after an interruption and only what is missing is sent.

            Exit codes:
                0  every file was verified by the receiver
                1  runtime error (I/O, connection lost, a file failed verification)
                2  usage error (bad arguments)
                3  the receiver was not found in time
                5  declined by the person at the receiver (all or part of the offer)
                6  trust failure (a receiver not paired yet and no terminal to ask, a changed key, a key other than the advertised or expected one)
                7  no answer: no one at the receiver answered in time (or it stopped first)
                8  the receiver cannot ask anyone (--accept ask with no terminal and no hook)
                9  declined by the receiver's accept hook (all or part of the offer)
               10  declined by the receiver's policy: it takes files only from senders it trusts (--accept known)
              130  `send` stopped with Ctrl-C (run it again to resume); 143 SIGTERM, 129 SIGHUP

            Examples:
              peerxfer serve --name Kitchen --inbox ~/Inbox --accept known
              peerxfer peers
              peerxfer send photos/ report.pdf --to Kitchen
              peerxfer trust Kitchen
              peerxfer status --follow
            """,
        version: "0.1.0",  // the package's version (CHANGELOG.md)
        subcommands: [
            Serve.self, Send.self, Peers.self, Status.self, Cancel.self, Trust.self, Untrust.self, Identity.self,
        ]
    )

    /// ArgumentParser's entry point, except that usage errors exit 2 (as documented) instead of
    /// sysexits' 64, and our own errors exit with their documented codes.
    static func main() async {
        var ignore = sigaction()
        ignore.__sigaction_handler.sa_handler = SIG_IGN
        if sigaction(SIGPIPE, &ignore, nil) != 0 {
            printError("cannot ignore SIGPIPE: \(String(cString: strerror(errno)))")
        }
        if let invalid = RawArguments.firstInvalid() {
            printError(
                "peerxfer: argument \(invalid.position) (\(invalid.shown)) is not valid UTF-8; names and paths are taken in UTF-8 only, so it is refused rather than read as another"
            )
            Foundation.exit(2)
        }
        // A mistyped command ("sned") or option ("--too") gets what it may be, before
        // ArgumentParser, which would first say what is missing instead. (Each command is named
        // after its type: Serve is `serve`.)
        let commands = configuration.subcommands.map { command in
            (
                name: command.configuration.commandName ?? String(describing: command).lowercased(),
                help: { command.helpMessage(includeHidden: true, columns: 10_000) }
            )
        }
        if let refusal = MistypedArguments.refusal(
            of: Array(CommandLine.arguments.dropFirst()), tool: "peerxfer", commands: commands)
        {
            printError(refusal)
            Foundation.exit(2)
        }
        do {
            var command = try parseAsRoot()
            if var asyncCommand = command as? AsyncParsableCommand {
                try await asyncCommand.run()
            } else {
                try command.run()
            }
        } catch let error as PeerTransferError {
            printError("peerxfer: \(error.message)")
            Foundation.exit(error.exitCode)
        } catch {
            if exitCode(for: error) == .validationFailure {
                printError(fullMessage(for: error))
                Foundation.exit(2)
            }
            exit(withError: error)
        }
    }
}

/// Options every subcommand that touches the configuration takes.
struct ConfigOptions: ParsableArguments {
    @Option(
        name: .customLong("config"),
        help: ArgumentHelp(
            "The configuration folder: this device's key and certificate, pinned and trusted peers.",
            discussion: "Default: $XDG_CONFIG_HOME/peerxfer, or ~/.config/peerxfer.", valueName: "dir"))
    var directory: String?

    func validate() throws {
        guard let directory else { return }
        guard !directory.isEmpty else { throw ValidationError("--config needs a folder") }
        var isDirectory: ObjCBool = false
        if FileManager.default.fileExists(atPath: directory, isDirectory: &isDirectory), !isDirectory.boolValue {
            throw ValidationError(
                "--config \(Terminal.escape(directory)) is a file, not a folder: give the configuration's folder (or a new one's)"
            )
        }
    }

    func load() throws -> PeerConfiguration {
        try PeerConfiguration(directory: directory ?? PeerConfiguration.defaultDirectory)
    }

    /// The configuration, for a command that only reads it or takes something out of it: a
    /// folder named with `--config` must exist already (a typo would otherwise make a new,
    /// empty configuration, and the command would report on that).
    /// - Throws: ``PeerTransferError/usage(_:)`` when the named folder does not exist.
    func loadExisting() throws -> PeerConfiguration {
        try requireExisting()
        return try load()
    }

    /// The configuration, made if missing (a device's first use), saying on standard error when
    /// a folder named with `--config` was not one yet: a typo, often, which leaves the usual
    /// configuration unused.
    /// - Throws: ``PeerTransferError/runtime(_:)`` when the folder or identity cannot be made.
    func loadSayingIfMade() throws -> PeerConfiguration {
        let made = (try? requireExisting()) == nil
        let configuration = try load()
        if made {
            // (A typo in --config must not pass unseen: it is a device of its own from now on.)
            printError(
                "note: made a new peerxfer configuration in \(Terminal.escape(configuration.directory)), with a new key for this device"
            )
        }
        return configuration
    }

    /// Throws when a folder named with `--config` holds no peerxfer configuration (the default
    /// may be missing: nothing has run yet). A configuration is a folder with this device's id
    /// in it (`device.json`): any other folder is a typo, and is not made into one.
    /// - Throws: ``PeerTransferError/usage(_:)`` naming the folder.
    func requireExisting() throws {
        guard let directory else { return }
        var isDirectory: ObjCBool = false
        let exists = FileManager.default.fileExists(atPath: directory, isDirectory: &isDirectory)
        let device = (directory as NSString).appendingPathComponent("device.json")
        guard exists, isDirectory.boolValue, FileManager.default.fileExists(atPath: device) else {
            let what = !exists ? "no such folder" : !isDirectory.boolValue ? "not a folder" : "the folder holds none"
            throw PeerTransferError.usage(
                "there is no peerxfer configuration at \(Terminal.escape(directory)): \(what) (peerxfer serve or peerxfer identity with --config makes one)"
            )
        }
    }
}

/// Where peers are published and found: the link, or a wide-area DNS zone.
struct DomainOptions: ParsableArguments {
    @Option(
        help: ArgumentHelp(
            "The DNS-SD domain: local (the link, through avahi-daemon), or a wide-area DNS zone such as home.arpa, for peers on other subnets.",
            valueName: "domain"))
    var domain = "local"

    @Option(
        name: .customLong("dns-server"),
        help: ArgumentHelp(
            "For a wide-area --domain: the name server to ask (ADDRESS, ADDRESS:PORT or [IPv6]:PORT).",
            discussion:
                "send: peers are then found by unicast DNS queries to it instead of through avahi-daemon; serve: it is asked for the zone's primary (default: /etc/resolv.conf).",
            valueName: "address"))
    var dnsServer: String?

    /// The domain without a final dot, in lower case.
    private var bare: String { domain.hasSuffix(".") ? String(domain.lowercased().dropLast()) : domain.lowercased() }

    /// True for the link (`local`, `local.`).
    var isLink: Bool { bare == "local" }

    /// The name server --dns-server names.
    var nameServer: SocketAddress? { dnsServer.flatMap(WideAreaBrowsing.nameServerAddress) }

    /// Checks the options together.
    func check() throws {
        guard !domain.isEmpty else { throw ValidationError("--domain needs a domain, such as local or home.arpa") }
        if !isLink && bare.hasSuffix(".local") {
            throw ValidationError(
                "\(domain) is under local, which is multicast DNS on the link, not a zone a name server holds")
        }
        if let dnsServer {
            guard nameServer != nil else {
                throw ValidationError("--dns-server \(dnsServer) is not an IP address, ADDRESS:PORT or [IPv6]:PORT")
            }
            if isLink {
                throw ValidationError(
                    "--dns-server is for a wide-area --domain (local is reached through avahi-daemon)")
            }
        }
    }
}

/// Checks that avahi-daemon answers, so that a missing daemon is said as such (exit 1), not
/// taken for a receiver that is not there.
/// - Throws: ``PeerTransferError/runtime(_:)`` naming the daemon and how to start it.
func requireDiscoveryDaemon() async throws {
    do {
        _ = try await DiscoveryContext.shared.daemonInfo(timeout: 3)
    } catch {
        throw PeerTransferError.runtime(
            "avahi-daemon does not answer on the D-Bus system bus within 3 s, and peerxfer finds peers through it; start it with your system's service manager (for example: sudo systemctl start avahi-daemon)"
        )
    }
}

/// A line on standard error.
func printError(_ line: String) {
    writeAll(line + "\n", to: 2)
}

/// A line on standard output, flushed (scripts and tests read it as it comes).
func printLine(_ line: String) {
    writeAll(line + "\n", to: 1)
}

/// Writes all of `text` to `fd`, going on after interrupted and partial writes. An error (a
/// reader that went away, a closed descriptor) ends the write quietly: there is nowhere left to
/// say so, and a broken stderr must not stop a daemon (`FileHandle.write` would trap).
func writeAll(_ text: String, to fd: Int32) {
    let bytes = Array(text.utf8)
    var offset = 0
    while offset < bytes.count {
        let n = bytes.withUnsafeBytes { write(fd, $0.baseAddress! + offset, $0.count - offset) }
        if n > 0 { offset += n; continue }
        if n < 0 && errno == EINTR { continue }
        return
    }
}

/// One JSON object on a line of standard output, keys sorted (see `JSONLine`).
func printJSON(_ object: [String: Any]) {
    printLine(JSONLine.object(object))
}
