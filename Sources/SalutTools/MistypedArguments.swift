import SalutDiscovery
import SalutStreams

/// A command line's mistyped words, found before ArgumentParser reads it: ArgumentParser
/// reports a missing argument or a failed validation before an unknown option, so
/// `gateway --domian x` would otherwise be told "missing --domain", never "did you mean --domain".
package enum MistypedArguments {
    /// A word of the command line that is not what the tool takes, and what was probably meant.
    package struct Finding: Equatable, Sendable {
        /// The word as typed.
        package var typed: String
        /// The closest names the tool does take (at most three, closest first; may be empty).
        package var suggestions: [String]

        package init(typed: String, suggestions: [String]) {
            self.typed = typed
            self.suggestions = suggestions
        }
    }

    /// The long options a command takes, and which of them take a value.
    package struct Options: Equatable, Sendable {
        /// Every long option (`--name`).
        package var names: Set<String>
        /// Those followed by a value (`--name <value>` in the help).
        package var takingValues: Set<String>

        package init(names: Set<String>, takingValues: Set<String>) {
            self.names = names
            self.takingValues = takingValues
        }

        /// ArgumentParser's own options, which every command takes (the root's `--version`
        /// included) though its help may not list them.
        package static let builtIn = Options(
            names: [
                "--help", "--help-hidden", "--version", "--experimental-dump-help", "--generate-completion-script",
            ],
            takingValues: ["--generate-completion-script"])

        /// These options and `other`'s.
        package func union(_ other: Options) -> Options {
            Options(names: names.union(other.names), takingValues: takingValues.union(other.takingValues))
        }
    }

    /// The first word of `words` (the arguments after the command's name) that looks like a
    /// long option (`--name` or `--name=value`) but is none of `options`. The word after an
    /// option that takes a value is that value (`--text "--x"`), and everything after `--` is an
    /// operand: neither is checked. A word that starts with a long dash and then names an option
    /// (`—json`, as pasted from a formatted page) is one too.
    package static func firstUnknownOption(in words: [String], options: Options) -> Finding? {
        var expectingValue = false
        for word in words {
            if word == "--" { return nil }
            if expectingValue {
                expectingValue = false
                continue
            }
            // A dash that a word processor or a web page made long: `—terminate` for `--terminate`.
            // (Only when it names an option: a name or a file may start with such a dash.)
            if let first = word.first, first == "\u{2014}" || first == "\u{2013}" {
                let meant = "--" + word.dropFirst().prefix { $0 != "=" }
                if options.names.contains(meant) { return Finding(typed: word, suggestions: [meant]) }
                continue
            }
            guard word.hasPrefix("--"), word.count > 2 else { continue }
            let parts = word.split(separator: "=", maxSplits: 1)
            let name = String(parts.first ?? "")
            guard options.names.contains(name) else {
                return Finding(typed: name, suggestions: NameSuggestions.closest(to: name, among: options.names))
            }
            expectingValue = parts.count == 1 && options.takingValues.contains(name)
        }
        return nil
    }

    /// The long options of a command's help text, as ArgumentParser lays it out: the rows of
    /// its OPTIONS section (two spaces, then `-`), up to the two spaces before each row's
    /// description, so that an option a description or the discussion mentions is not taken
    /// for one of this command's. `--name <value>` takes a value, a bare `--name` is a flag
    /// (`--x/--no-x` names both). Give the help unwrapped (`helpMessage(columns:)` with a large
    /// width): a wrapped row is only partly read.
    package static func options(inHelp help: String) -> Options {
        var names = Set<String>()
        var takingValues = Set<String>()
        for line in help.split(separator: "\n") where line.hasPrefix("  -") {
            let row = line.dropFirst(2)
            let specification = row.range(of: "  ").map { row[..<$0.lowerBound] } ?? row
            let words = specification.split(whereSeparator: { $0 == " " || $0 == "," || $0 == "/" })
            for (index, word) in words.enumerated() where word.hasPrefix("--") && word.count > 2 {
                let name = String(word.prefix { $0.isLetter || $0.isNumber || $0 == "-" })
                names.insert(name)
                if name.count == word.count, index + 1 < words.count, words[index + 1].hasPrefix("<") {
                    takingValues.insert(name)
                }
            }
        }
        return Options(names: names, takingValues: takingValues)
    }

    /// The line that refuses a mistyped command or option of `tool` (netsvc, peerxfer), or nil
    /// when there is none to refuse: `arguments` are the words after the tool's name, and
    /// `commands` its subcommands, each with its help text (asked for only when the command is
    /// the one typed). `help COMMAND` checks the command's name only.
    package static func refusal(
        of arguments: [String], tool: String, commands: [(name: String, help: () -> String)]
    ) -> String? {
        var words = arguments[...]
        // `help COMMAND`, and `--help COMMAND` as people also type it.
        let asksForHelp = ["help", "--help", "-h"].contains(words.first) && words.count > 1
        if asksForHelp { words = words.dropFirst() }
        let names = commands.map(\.name)
        if let typed = words.first, typed.hasPrefix("-") {
            return rootOption(typed, before: Array(words.dropFirst()), tool: tool, commands: commands)
        }
        guard let typed = words.first else { return nil }
        if let mistyped = unknownCommand(typed, commands: names) {
            let hint = mistyped.suggestions.first.map { " Did you mean '\($0)'?" } ?? ""
            return
                "\(tool): '\(TerminalText.escaped(typed))' is not a command.\(hint) The commands: \(names.joined(separator: ", ")) (see '\(tool) --help')"
        }
        guard !asksForHelp, let help = commands.first(where: { $0.name == typed })?.help,
            let mistyped = firstUnknownOption(
                in: Array(words.dropFirst()), options: options(inHelp: help()).union(.builtIn))
        else { return nil }
        let hint = mistyped.suggestions.first.map { "; did you mean \($0)?" } ?? ""
        return
            "\(tool) \(typed): unknown option \(TerminalText.escaped(mistyped.typed))\(hint) (see '\(tool) \(typed) --help')"
    }

    /// The line that refuses `typed`, an option written before any command, when the tool
    /// itself does not take it: options go after their command, and the command named later
    /// (if any) says whether it takes that option, or one like it.
    private static func rootOption(
        _ typed: String, before rest: [String], tool: String, commands: [(name: String, help: () -> String)]
    ) -> String? {
        let name = String(typed.prefix { $0 != "=" })
        guard name != "-h", name != "--", !Options.builtIn.names.contains(name) else { return nil }
        let shown = TerminalText.escaped(name)
        let command = rest.lazy.compactMap({ word in commands.first { $0.name == word } }).first
        if !name.hasPrefix("--") {  // a short option: no name to suggest from
            return
                "\(tool): \(shown) is not an option of \(tool) itself: options go after the command (see '\(tool) \(command?.name ?? "COMMAND") --help')"
        }
        guard let command else {
            return
                "\(tool): \(shown) is not an option of \(tool) itself: options go after the command (see '\(tool) COMMAND --help')"
        }
        let options = options(inHelp: command.help()).union(.builtIn)
        if options.names.contains(name) {
            return "\(tool): \(shown) goes after the command: \(tool) \(command.name) \(shown) …"
        }
        let near = NameSuggestions.closest(to: name, among: Array(options.names)).first
        let hint = near.map { "; did you mean \(tool) \(command.name) \($0)?" } ?? ""
        return
            "\(tool): unknown option \(shown)\(hint) (options go after the command; see '\(tool) \(command.name) --help')"
    }

    /// `typed` when it is not one of `commands` (nor `help`), with the commands it may be.
    package static func unknownCommand(_ typed: String, commands: [String]) -> Finding? {
        guard !commands.contains(typed), typed != "help" else { return nil }
        return Finding(typed: typed, suggestions: NameSuggestions.closest(to: typed, among: commands))
    }
}
