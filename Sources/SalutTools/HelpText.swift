/// Help text written in the source as it reads there, for ArgumentParser, which keeps every
/// line break and wraps each line again at the terminal's width: hard-wrapped prose came out
/// ragged ("first\nsighting;").
package enum HelpText {
    /// `text` with each paragraph's lines joined into one line (ArgumentParser wraps it), but
    /// indented lines (examples, tables), the line after a line ending in a colon, and empty
    /// lines kept as they are.
    package static func unwrapped(_ text: String) -> String {
        var lines: [String] = []
        for line in text.split(separator: "\n", omittingEmptySubsequences: false).map(String.init) {
            if let previous = lines.last, !previous.isEmpty, !line.isEmpty, !previous.hasPrefix(" "),
                !line.hasPrefix(" "), !previous.hasSuffix(":")
            {
                lines[lines.count - 1] = previous + " " + line
            } else {
                lines.append(line)
            }
        }
        return lines.joined(separator: "\n")
    }
}
