import Foundation
import SalutStreams

/// Text as one shell word that a user can paste back into bash, and that is safe to print on
/// a terminal: for commands the tool suggests (`peerxfer cancel … --config FOLDER`).
public enum ShellWord {
    /// `text` in single quotes (each `'` closed, escaped and reopened) when it holds nothing a
    /// terminal must not show; otherwise in bash's `$'…'` quotes, with each control or
    /// invisible character (`DisguisingScalars`) as its UTF-8 bytes in `\xHH` (which bash reads
    /// alike in every locale) and backslashes and quotes escaped, so that the word shows safely
    /// and still means `text`.
    public static func quoted(_ text: String) -> String {
        let scalars = Array(text.unicodeScalars)
        guard scalars.indices.contains(where: { DisguisingScalars.mustEscape(scalars, at: $0) }) else {
            return "'" + text.replacingOccurrences(of: "'", with: "'\\''") + "'"
        }
        var out = "$'"
        for (index, scalar) in scalars.enumerated() {
            switch scalar {
            case "\\": out += "\\\\"
            case "'": out += "\\'"
            case _ where DisguisingScalars.mustEscape(scalars, at: index):
                for byte in String(scalar).utf8 { out += String(format: "\\x%02x", byte) }
            default:
                out.unicodeScalars.append(scalar)
            }
        }
        return out + "'"
    }
}
