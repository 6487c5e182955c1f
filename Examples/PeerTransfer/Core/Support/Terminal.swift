import Foundation
import SalutStreams

/// Making strings from the network safe to print.
public enum Terminal {
    /// `text` with control characters (C0, DEL, C1) as `\xHH`, the invisible and reordering
    /// format characters of `DisguisingScalars` as `\u{HHHH}`, and backslashes doubled (so an
    /// escape in the output always stands for one character), so that a peer's name or path
    /// cannot move the cursor, recolour the terminal, reorder what is shown or pass for another
    /// name.
    public static func escape(_ text: String) -> String {
        // Printable ASCII but the backslash is shown as it is (none of the marks below is ASCII).
        if text.utf8.allSatisfy({ $0 >= 0x20 && $0 < 0x7f && $0 != 0x5c }) { return text }
        var out = ""
        out.reserveCapacity(text.utf8.count)
        let scalars = Array(text.unicodeScalars)
        for (index, scalar) in scalars.enumerated() {
            switch scalar.value {
            case 0x00..<0x20, 0x7f, 0x80..<0xa0:
                out += String(format: "\\x%02x", scalar.value)
            case 0x5c:
                // A backslash is doubled, so that a name holding "\x9b" as text never reads
                // the same as one holding the character U+009B.
                out += "\\\\"
            default:
                // Invisible, or able to reorder or split what is shown (see DisguisingScalars).
                if DisguisingScalars.mustEscape(scalars, at: index) {
                    out += String(format: "\\u{%04x}", scalar.value)
                } else {
                    out.unicodeScalars.append(scalar)
                }
            }
        }
        return out
    }
}
