import Foundation

/// Text from the network made safe to print on a terminal.
///
/// A service name, a TXT value, a peer's file name or any other string a peer chose can hold
/// control characters (escape sequences that move the cursor, clear or retitle the terminal)
/// and invisible or reordering characters (so that "invoice<U+202E>fdp.exe" shows as
/// "invoiceexe.pdf", or "Kit<U+3164>chen" passes for "Kitchen"). Print it through
/// ``escaped(_:)``:
///
/// ```swift
/// print("found", TerminalText.escaped(service.name))
/// ```
public enum TerminalText {
    /// `text` with control characters (C0, DEL, C1) written as `\xHH`, the invisible and
    /// reordering format characters (bidirectional controls, zero-width characters, Hangul
    /// fillers, tag characters…) as `\u{HHHH}`, and backslashes doubled, so that an escape in
    /// the output always stands for one character and the text cannot move the cursor,
    /// recolour the terminal, reorder what is shown or pass for another name. Printable text,
    /// whatever its script, is left as it is when it is in Unicode's composed form (NFC);
    /// emoji keep their joiners. Text that is not (a name from the network rarely is) can
    /// look exactly like other text yet be another name: a Kelvin sign for `K`, an `e` and a
    /// combining accent for `é`, two Hangul jamo for a syllable. In each character (grapheme)
    /// that is not in NFC, what makes the difference is shown as escapes too: its first scalar
    /// when NFC writes that one otherwise, and every scalar after the first.
    public static func escaped(_ text: String) -> String {
        // Printable ASCII but the backslash is shown as it is (none of the marks below is ASCII).
        if text.utf8.allSatisfy({ $0 >= 0x20 && $0 < 0x7f && $0 != 0x5c }) { return text }
        let disguised = Self.uncomposedScalars(of: text)
        var out = ""
        out.reserveCapacity(text.utf8.count)
        let scalars = Array(text.unicodeScalars)
        for (index, scalar) in scalars.enumerated() {
            switch scalar.value {
            case 0x00..<0x20, 0x7f, 0x80..<0xa0:
                out += String(format: "\\x%02x", scalar.value)
            case 0x5c:
                // Doubled, so that a name holding "\x9b" as text never reads the same as one
                // holding the character U+009B.
                out += "\\\\"
            default:
                if DisguisingScalars.mustEscape(scalars, at: index) || disguised.contains(index) {
                    out += String(format: "\\u{%04x}", scalar.value)
                } else {
                    out.unicodeScalars.append(scalar)
                }
            }
        }
        return out
    }

    /// Whether `text` is in Unicode's composed form (NFC), byte for byte: text that is not can
    /// look exactly like other text yet be another name.
    package static func isComposed(_ text: String) -> Bool {
        text.precomposedStringWithCanonicalMapping.utf8.elementsEqual(text.utf8)
    }

    /// The positions (among `text`'s scalars) that keep a character (grapheme) from being in
    /// NFC: in each such character, its first scalar when NFC writes that one otherwise alone
    /// (a Kelvin sign), and every scalar after it (a combining accent, a jamo). Empty, after
    /// one look, for text in NFC.
    private static func uncomposedScalars(of text: String) -> Set<Int> {
        guard !isComposed(text) else { return [] }
        var positions: Set<Int> = [], offset = 0
        for character in text {
            let count = character.unicodeScalars.count
            if !isComposed(String(character)) {
                let first = character.unicodeScalars.first!
                if !first.isASCII && !isComposed(String(Character(first))) { positions.insert(offset) }
                positions.formUnion(offset + 1..<offset + count)
            }
            offset += count
        }
        return positions
    }
}
