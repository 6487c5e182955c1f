import Foundation
import SalutStreams

/// What a name looks like to a person: the form two names share when a person could take one
/// for the other (case, compatibility forms, accents, and the Cyrillic and Greek letters that are
/// drawn like Latin ones). "KITCHEN", "Kitchen", "Kіtchen" (Cyrillic і) and "Ｋｉｔｃｈｅｎ"
/// (full-width) have one skeleton, so a pin made under one holds the others to its key.
///
/// A reduced form of Unicode's confusable skeletons (UTS #39): enough for the letters that pass
/// for ASCII ones; it does not claim to catch every look-alike, which is why trust is by key.
public enum NameSkeleton {
    /// The skeleton of `name`.
    public static func of(_ name: String) -> String {
        // Look-alikes mapped before and after folding (folding turns some into others: an
        // upper-case Cherokee letter into its lower-case form), invisible marks dropped, every
        // kind of space made one, runs of spaces collapsed and the ends trimmed ("Kitchen " and
        // "Kitchen\u{A0}" show as "Kitchen").
        let folded = String(String.UnicodeScalarView(name.unicodeScalars.flatMap(mapped)))
            .precomposedStringWithCompatibilityMapping
            .folding(options: [.caseInsensitive, .diacriticInsensitive, .widthInsensitive], locale: nil)
        var out = String.UnicodeScalarView()
        for scalar in folded.unicodeScalars {
            if DisguisingScalars.contains(scalar) || [0x200c, 0x200d, 0xfe0e, 0xfe0f].contains(scalar.value)
                || scalar.properties.generalCategory == .nonspacingMark
            {
                continue
            }
            for latin in mapped(scalar) {
                if latin.properties.isWhitespace {
                    if let last = out.last, last != " " { out.append(" ") }
                } else {
                    out.append(latin)
                }
            }
        }
        while out.last == " " { out.removeLast() }
        return String(out)
    }

    /// `scalar` as the Latin letters it passes for, or itself.
    private static func mapped(_ scalar: Unicode.Scalar) -> [Unicode.Scalar] {
        if scalar.properties.isWhitespace { return [" "] }
        if scalar == "I" { return ["l"] }  // a capital I and a small l are drawn alike
        guard let latin = lookAlikes[scalar.value] else { return [scalar] }
        return Array(latin.unicodeScalars)
    }

    /// True when a person could take `a` for `b`.
    public static func looksAlike(_ a: String, _ b: String) -> Bool { of(a) == of(b) }

    /// Lower-case Cyrillic and Greek letters (and a few symbols) drawn like Latin letters or
    /// digits, mapped to those.
    private static let lookAlikes: [UInt32: String] = [
        // Cyrillic
        0x0430: "a", 0x0432: "b", 0x0435: "e", 0x043A: "k", 0x043C: "m", 0x043D: "h", 0x043E: "o", 0x0440: "p",
        0x0441: "c", 0x0442: "t", 0x0443: "y", 0x0445: "x", 0x0455: "s", 0x0456: "i", 0x0458: "j", 0x04BB: "h",
        0x0501: "d", 0x04CF: "l", 0x051B: "q", 0x051D: "w", 0x0457: "i", 0x0454: "e",
        // Greek
        0x03B1: "a", 0x03B2: "b", 0x03B5: "e", 0x03B7: "n", 0x03B9: "i", 0x03BA: "k", 0x03BD: "v", 0x03BF: "o",
        0x03C1: "p", 0x03C4: "t", 0x03C5: "u", 0x03C7: "x", 0x03C9: "w",
        // Latin letters and digits that pass for others
        0x0131: "i", 0x0269: "i", 0x0261: "g", 0x01C0: "l", 0x2113: "l", 0x0030: "o", 0x0031: "l", 0x0069: "l",
        0x01AD: "t", 0x0271: "m", 0x028D: "w", 0x0475: "v", 0x0474: "v",
        // Small capitals
        0x1D00: "a", 0x0299: "b", 0x1D04: "c", 0x1D05: "d", 0x1D07: "e", 0x0262: "g", 0x029C: "h", 0x026A: "l",
        0x1D0A: "j", 0x1D0B: "k", 0x029F: "l", 0x1D0D: "m", 0x0274: "n", 0x1D0F: "o", 0x1D18: "p", 0x0280: "r",
        0xA731: "s", 0x1D1B: "t", 0x1D1C: "u", 0x1D20: "v", 0x1D21: "w", 0x028F: "y", 0x1D22: "z",
        // Cherokee letters drawn as Latin capitals (upper case; folding may give the lower case,
        // which is mapped before folding)
        0x13A0: "d", 0x13A1: "r", 0x13A2: "t", 0x13A9: "y", 0x13AA: "a", 0x13AB: "j", 0x13AC: "e", 0x13B3: "w",
        0x13B7: "m", 0x13BB: "h", 0x13C0: "g", 0x13C2: "h", 0x13CF: "b", 0x13D2: "r", 0x13D5: "s", 0x13D9: "v",
        0x13DA: "s", 0x13DD: "l", 0x13DE: "l", 0x13DF: "c", 0x13E2: "p", 0x13E6: "k", 0x13F4: "b",
    ]
}
