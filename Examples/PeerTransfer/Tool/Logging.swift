import ArgumentParser
import Foundation
import Logging
import PeerTransferCore
import Salut

/// `--log-level` and `--verbose` for the commands that go on the network (`serve`, `send`,
/// `peers`): peerxfer's own log and Salut's libraries' log go to stderr, one escaped line each
/// (messages may carry names from the network).
///
/// The level is the first of: `--verbose` (debug), `--log-level`, the `PEERXFER_LOG_LEVEL`
/// environment variable, the command's default (`info` for `serve`, a daemon whose log is its
/// record; `warning` otherwise).
struct LoggingOptions: ParsableArguments {
    @Option(
        name: .customLong("log-level"),
        help: ArgumentHelp(
            "How much to log on stderr: trace, debug, info, notice, warning, error or critical (default: info for serve, warning otherwise; PEERXFER_LOG_LEVEL sets it too).",
            valueName: "level"))
    var level: Logger.Level?

    @Flag(name: .shortAndLong, help: "Log what happens on the network in detail (the same as --log-level debug).")
    var verbose = false

    func validate() throws {
        if level == nil, let text = ProcessInfo.processInfo.environment["PEERXFER_LOG_LEVEL"],
            Logger.Level(rawValue: text) == nil
        {
            throw ValidationError(
                "PEERXFER_LOG_LEVEL=\(Terminal.escape(text)) is not a level: trace, debug, info, notice, warning, error or critical"
            )
        }
    }

    /// The level the options and the environment ask for, or `fallback`.
    func resolvedLevel(
        default fallback: Logger.Level,
        environment: [String: String] = ProcessInfo.processInfo.environment
    ) -> Logger.Level {
        if verbose { return min(level ?? .debug, .debug) }
        if let level { return level }
        return environment["PEERXFER_LOG_LEVEL"].flatMap(Logger.Level.init(rawValue:)) ?? fallback
    }

    /// Sends every log (peerxfer's and Salut's) to stderr at the chosen level, and returns the
    /// command's logger. `timestamps` prefixes each line with the time, for a daemon's log.
    @discardableResult
    func apply(default fallback: Logger.Level, timestamps: Bool = false) -> Logger {
        let level = resolvedLevel(default: fallback)
        LoggingSystem.bootstrap { label in EscapingLogHandler(label: label, level: level, timestamps: timestamps) }
        SalutLogging.logger = Logger(label: "salut")
        return Logger(label: "peerxfer")
    }
}

extension Logger.Level: @retroactive ExpressibleByArgument {}

/// Writes log messages to stderr as `peerxfer: <level>: <message>` (with the time first for a
/// daemon), with control and bidirectional characters escaped. Messages escape what they quote
/// from the network already; this is the last line of defence, so it leaves backslashes alone
/// (an escape made earlier stays readable, not doubled).
struct EscapingLogHandler: LogHandler {
    let label: String
    var logLevel: Logger.Level
    let timestamps: Bool
    var metadata: Logger.Metadata = [:]

    init(label: String, level: Logger.Level, timestamps: Bool) {
        self.label = label
        self.logLevel = level
        self.timestamps = timestamps
    }

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        let merged = metadata.merging(event.metadata ?? [:]) { _, new in new }
        let details = merged.sorted { $0.key < $1.key }.map { " \($0.key)=\($0.value)" }.joined()
        let time = timestamps ? Date().formatted(.iso8601) + " " : ""
        let line = "\(time)peerxfer: \(event.level): " + Self.defused(event.message.description + details) + "\n"
        QuestionGate.write(line)
    }

    /// `text` with each character the terminal would act on escaped, and nothing else changed.
    static func defused(_ text: String) -> String {
        var out = ""
        for scalar in text.unicodeScalars {
            let one = String(scalar)
            out += scalar == "\\" ? one : Terminal.escape(one)
        }
        return out
    }
}
