import Foundation
import SalutStreams

/// Text as one shell word that a user can paste back into bash, and that is safe to print on
/// a terminal: for commands the tool suggests (`peerxfer cancel … --config FOLDER`).
public enum ShellWord {
    /// `text` in single quotes (each `'` closed, escaped and reopened) when it holds nothing a
    /// terminal must not show; otherwise in bash's `$'…'` quotes, with control and invisible
    /// characters (`DisguisingScalars`) as `\xHH`, `\uHHHH` or `\UHHHHHHHH`, backslashes and
    /// quotes escaped, so that the word shows safely and still means `text`.
    public static func quoted(_ text: String) -> String {
        guard text.unicodeScalars.contains(where: DisguisingScalars.contains) else {
            return "'" + text.replacingOccurrences(of: "'", with: "'\\''") + "'"
        }
        var out = "$'"
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\\": out += "\\\\"
            case "'": out += "\\'"
            case _ where DisguisingScalars.contains(scalar):
                switch scalar.value {
                case ..<0x80: out += String(format: "\\x%02x", scalar.value)
                case ..<0x10000: out += String(format: "\\u%04x", scalar.value)
                default: out += String(format: "\\U%08x", scalar.value)
                }
            default:
                out.unicodeScalars.append(scalar)
            }
        }
        return out + "'"
    }
}
