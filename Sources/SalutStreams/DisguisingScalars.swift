/// Characters that text from the network must not put on a terminal as they are: shown
/// there, they move the cursor, recolour or retitle the terminal, reorder what follows, or are
/// invisible, so that one name can pass for another. Salut's tools print each as an escape.
package enum DisguisingScalars {
    /// True for control characters (C0, DEL, C1: escape sequences start with them) and for
    /// format characters that are invisible or reorder or split text: bidirectional marks,
    /// embeddings, overrides and isolates; zero-width space, word joiner and invisible
    /// operators; line and paragraph separators; the byte-order mark; soft hyphen, combining
    /// grapheme joiner, Hangul fillers, Khmer and Mongolian invisible letters, deprecated
    /// format controls, interlinear annotation marks and invisible musical symbols. The
    /// zero-width joiner and non-joiner and the variation selectors stay: Persian and Indic
    /// names and emoji need them.
    package static func contains(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar.value {
        case 0x00..<0x20, 0x7f...0x9f:
            return true
        case 0x00ad, 0x034f, 0x061c, 0x115f, 0x1160, 0x17b4, 0x17b5, 0x180e, 0x200b, 0x200e, 0x200f,
             0x2028...0x202e, 0x2060...0x2064, 0x2066...0x206f, 0x3164, 0xfeff, 0xffa0, 0xfff9...0xfffb,
             0x1d173...0x1d17a:
            return true
        default:
            return false
        }
    }
}
