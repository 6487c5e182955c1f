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

    /// A string that came from the network, made safe to print: control characters (C0, DEL,
    /// C1, which is how escape sequences retitle or clear a terminal) and the invisible or
    /// reordering format characters of `DisguisingScalars` are shown as escapes (`\e`, `\n`,
    /// `\u{9B}`, `\u{3164}`, …), and a backslash is doubled so that an escape always stands for
    /// one character.
    static func escaped(_ text: String) -> String {
        var out = ""
        let scalars = Array(text.unicodeScalars)
        for (index, scalar) in scalars.enumerated() {
            switch scalar.value {
            case 0x1B: out += "\\e"
            case 0x0A: out += "\\n"
            case 0x0D: out += "\\r"
            case 0x09: out += "\\t"
            case 0x5C: out += "\\\\"   // doubled: a name holding "\e" as text never reads as one holding ESC
            default:
                // The rest of the controls, and what is invisible or reorders text.
                if DisguisingScalars.mustEscape(scalars, at: index) {
                    out += "\\u{" + String(scalar.value, radix: 16, uppercase: true) + "}"
                } else {
                    out.unicodeScalars.append(scalar)
                }
            }
        }
        return out
    }

    /// `text` padded with spaces to `width` characters (never cut).
    static func pad(_ text: String, _ width: Int) -> String {
        text.count >= width ? text : text + String(repeating: " ", count: width - text.count)
    }
}
