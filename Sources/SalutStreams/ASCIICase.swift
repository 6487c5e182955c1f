/// Names folded to one case as DNS folds them (RFC 1035 section 2.3.3, RFC 6762 section 16):
/// ASCII capitals made small, every other byte as it is. Not Foundation's case folding, which
/// folds the rest of Unicode too (a Kelvin sign would match `k`), nor Swift's string comparison,
/// which takes canonically equivalent text for the same: the folded bytes are compared.
package enum ASCIICase {
    /// `text`'s UTF-8 bytes with ASCII capitals made small.
    package static func folded(_ text: String) -> [UInt8] {
        text.utf8.map { (0x41...0x5A).contains($0) ? $0 | 0x20 : $0 }
    }

    /// `text` with ASCII capitals made small (its other characters untouched).
    package static func foldedText(_ text: String) -> String {
        String(decoding: folded(text), as: UTF8.self)
    }

    /// Whether `a` and `b` are the same once ASCII capitals are made small, byte for byte.
    package static func same(_ a: String, _ b: String) -> Bool {
        a.utf8.count == b.utf8.count && folded(a) == folded(b)
    }
}
