import Foundation
import Glibc
import SalutStreams

/// How human output looks: colour only on a terminal and without `NO_COLOR`; columns padded
/// so that names, types and domains line up.
enum Terminal {
    static let isColourful: Bool = isatty(1) == 1 && ProcessInfo.processInfo.environment["NO_COLOR"] == nil

    static func green(_ text: String) -> String { paint(text, "32") }
    static func red(_ text: String) -> String { paint(text, "31") }
    static func bold(_ text: String) -> String { paint(text, "1") }
    static func dim(_ text: String) -> String { paint(text, "2") }

    private static func paint(_ text: String, _ code: String) -> String {
        isColourful ? "\u{1B}[\(code)m\(text)\u{1B}[0m" : text
    }

    /// A string that came from the network, made safe to print (``TerminalText/escaped(_:)``).
    static func escaped(_ text: String) -> String { TerminalText.escaped(text) }

    /// `text` padded with spaces to `width` characters (never cut).
    static func pad(_ text: String, _ width: Int) -> String {
        text.count >= width ? text : text + String(repeating: " ", count: width - text.count)
    }
}
