import Foundation

/// Making strings from the network safe to print.
public enum Terminal {
    /// `text` with control characters (C0, DEL, C1), bidirectional marks and overrides,
    /// zero-width characters and line separators replaced by visible escapes, and backslashes doubled (so an escape in the
    /// output always stands for one character), so that a peer's name or path cannot move the
    /// cursor, recolour the terminal, reorder what is shown or pass for another name.
    public static func escape(_ text: String) -> String {
        // Printable ASCII but the backslash is shown as it is (none of the marks below is ASCII).
        if text.utf8.allSatisfy({ $0 >= 0x20 && $0 < 0x7f && $0 != 0x5c }) { return text }
        var out = ""
        out.reserveCapacity(text.utf8.count)
        for scalar in text.unicodeScalars {
            switch scalar.value {
            case 0x00..<0x20, 0x7f, 0x80..<0xa0:
                out += String(format: "\\x%02x", scalar.value)
            case 0x5c:
                // A backslash is doubled, so that a name holding "\x9b" as text never reads
                // the same as one holding the character U+009B.
                out += "\\\\"
            case 0x061c, 0x200b, 0x200e, 0x200f, 0x2028, 0x2029, 0x202a...0x202e, 0x2066...0x2069, 0xfeff:
                // Bidirectional marks and overrides, the zero-width space and byte-order mark, line or paragraph
                // separators: invisible, or able to reorder or split what is shown (the zero-width
                // joiners stay: Persian names and emoji need them).
                out += String(format: "\\u{%04x}", scalar.value)
            default:
                out.unicodeScalars.append(scalar)
            }
        }
        return out
    }
}
