import ArgumentParser
import Logging
import Salut

/// `--log-level` and `--verbose`, taken by every subcommand: what Salut's libraries log goes to
/// stderr as `netsvc: <level>: <message>`, escaped for the terminal. Warnings (a long service
/// type, an unreachable daemon) by default; `info` adds publications, `notice` name collisions
/// and refused TLS peers, `debug` the daemon's state, failed connection attempts and trusted
/// TLS peers.
struct LoggingOptions: ParsableArguments {
    @Option(
        name: .customLong("log-level"),
        help: ArgumentHelp(
            "How much of Salut's log to show on stderr: trace, debug, info, notice, warning, error or critical.",
            valueName: "level"))
    var level: Logger.Level = .warning

    @Flag(name: .shortAndLong, help: "Show the library's debug log (the same as --log-level debug).")
    var verbose = false

    /// Hands Salut's libraries a logger writing to stderr at the chosen level.
    func apply() {
        var logger = Logger(label: "netsvc") { _ in TerminalLogHandler() }
        logger.logLevel = verbose ? min(level, .debug) : level
        SalutLogging.logger = logger
    }
}

extension Logger.Level: @retroactive ExpressibleByArgument {}

/// A command whose log level the user can set.
protocol LogLevelCommand {
    var logging: LoggingOptions { get }
}

/// Writes log messages to stderr, one line each, escaped (they may carry names from the network).
struct TerminalLogHandler: LogHandler {
    var logLevel: Logger.Level = .warning
    var metadata: Logger.Metadata = [:]
    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        let merged = metadata.merging(event.metadata ?? [:]) { _, new in new }
        let details =
            merged.isEmpty
            ? "" : " " + merged.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: " ")
        note("\(event.level): " + Terminal.escaped(event.message.description + details))
    }
}
