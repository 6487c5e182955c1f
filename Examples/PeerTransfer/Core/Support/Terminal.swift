import Foundation
import SalutStreams

/// Making strings from the network safe to print (the library's ``TerminalText``).
public enum Terminal {
    /// `text` as ``TerminalText/escaped(_:)`` writes it: control characters as `\xHH`,
    /// invisible and reordering characters as `\u{HHHH}`, backslashes doubled.
    public static func escape(_ text: String) -> String { TerminalText.escaped(text) }
}
