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
        // Compatibility forms folded (full-width, ligatures), accents and invisible marks
        // dropped, then case.
        let folded = name.precomposedStringWithCompatibilityMapping
            .folding(options: [.caseInsensitive, .diacriticInsensitive, .widthInsensitive], locale: nil)
        var out = String.UnicodeScalarView()
        for scalar in folded.unicodeScalars {
            if DisguisingScalars.contains(scalar) || [0x200c, 0x200d, 0xfe0e, 0xfe0f].contains(scalar.value)
                || scalar.properties.generalCategory == .nonspacingMark { continue }
            if let latin = lookAlikes[scalar.value] {
                out.append(contentsOf: latin.unicodeScalars)
            } else {
                out.append(scalar)
            }
        }
        return String(out)
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
        0x0131: "i", 0x0269: "i", 0x0261: "g", 0x01C0: "l", 0x2113: "l", 0x0030: "o", 0x0031: "l",
    ]
}
