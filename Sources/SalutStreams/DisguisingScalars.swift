/// Characters that text from the network must not put on a terminal as they are: shown
/// there, they move the cursor, recolour or retitle the terminal, reorder what follows, or are
/// invisible, so that one name can pass for another. Salut's tools print each as an escape.
public enum DisguisingScalars {
    /// True for control characters (C0, DEL, C1: escape sequences start with them) and for
    /// format characters that are invisible or reorder or split text wherever they stand:
    /// bidirectional marks, embeddings, overrides and isolates; zero-width space, word joiner
    /// and invisible operators; line and paragraph separators; the byte-order mark; soft
    /// hyphen, combining grapheme joiner, Hangul fillers, Khmer and Mongolian invisible
    /// letters, deprecated format controls, interlinear annotation marks, shorthand format
    /// controls, invisible musical symbols, tag characters, and the variation selectors other
    /// than emoji's. For the joiners and emoji's selectors, which names need, see
    /// ``mustEscape(_:at:)``.
    public static func contains(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar.value {
        case 0x00..<0x20, 0x7f...0x9f:
            return true
        case 0x00ad, 0x034f, 0x061c, 0x115f, 0x1160, 0x17b4, 0x17b5, 0x180e, 0x200b, 0x200e, 0x200f,
            0x2028...0x202e, 0x2060...0x2064, 0x2066...0x206f, 0x3164, 0xfe00...0xfe0d, 0xfeff, 0xffa0,
            0xfff9...0xfffb, 0x1bca0...0x1bca3, 0x1d173...0x1d17a, 0xe0000...0xe007f, 0xe0100...0xe01ef:
            return true
        default:
            return false
        }
    }

    /// Whether the scalar at `index` of `scalars` must be shown as an escape: those of
    /// ``contains(_:)``, and the zero-width non-joiner and joiner and emoji's variation
    /// selectors where they cannot be doing their work. The joiners join two letters or emoji,
    /// so beside an ASCII character or at an end they only hide ("Kit<ZWJ>chen" shows as
    /// "Kitchen"); a selector varies the character before it, so after an ASCII character (but
    /// a keycap's digit, `#` or `*`) or at the start it only hides.
    public static func mustEscape(_ scalars: [Unicode.Scalar], at index: Int) -> Bool {
        let scalar = scalars[index]
        if contains(scalar) { return true }
        let before = index > 0 ? scalars[index - 1] : nil
        let after = index + 1 < scalars.count ? scalars[index + 1] : nil
        switch scalar.value {
        case 0x200c, 0x200d:
            return before?.isASCII ?? true || after?.isASCII ?? true
        case 0xfe0e, 0xfe0f:
            guard let before else { return true }
            return before.isASCII && after?.value != 0x20e3
        default:
            return false
        }
    }
}
