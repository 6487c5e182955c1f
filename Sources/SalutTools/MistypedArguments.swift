import SalutDiscovery

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

    /// The first word of `words` (the arguments after the command's name) that looks like a
    /// long option (`--name` or `--name=value`) but is none of `options`. A word right after a
    /// known option may be that option's value (`--text "--x"`), and everything after `--` is
    /// an operand: neither is checked.
    package static func firstUnknownOption(in words: [String], options: Set<String>) -> Finding? {
        let checked = words.prefix { $0 != "--" }
        for (index, word) in zip(checked.indices, checked) where word.hasPrefix("--") && word.count > 2 {
            let name = String(word.split(separator: "=", maxSplits: 1).first ?? "")
            if options.contains(name) { continue }
            if index > checked.startIndex, options.contains(checked[index - 1]) { continue }
            return Finding(typed: name, suggestions: NameSuggestions.closest(to: name, among: options))
        }
        return nil
    }

    /// The long options (`--name`) a command's help text names.
    package static func options(inHelp help: String) -> Set<String> {
        let words = help.split { !$0.isLetter && !$0.isNumber && $0 != "-" }
        return Set(words.filter { $0.hasPrefix("--") && $0.count > 2 }.map(String.init))
    }

    /// `typed` when it is not one of `commands`, with the commands it may be.
    package static func unknownCommand(_ typed: String, commands: [String]) -> Finding? {
        guard !commands.contains(typed) else { return nil }
        return Finding(typed: typed, suggestions: NameSuggestions.closest(to: typed, among: commands))
    }
}
