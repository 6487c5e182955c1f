/// Text compared, ordered and hashed by its UTF-8 bytes, as DNS and avahi-daemon compare names.
///
/// Swift's own string comparison is by canonical equivalence: it takes a look-alike written with
/// other code points (a Kelvin sign for a `K`, an `e` and a combining accent for `é`) for the text
/// it looks like, and a set of strings keeps the two once. On the network they are two names.
package struct ExactText: Sendable, Hashable, Comparable, ExpressibleByStringLiteral {
    /// The text.
    package var text: String

    package init(_ text: String) { self.text = text }
    package init(stringLiteral text: String) { self.text = text }

    /// Equal byte for byte.
    package static func == (a: Self, b: Self) -> Bool { a.text.utf8.elementsEqual(b.text.utf8) }

    /// Before, byte by byte.
    package static func < (a: Self, b: Self) -> Bool { a.text.utf8.lexicographicallyPrecedes(b.text.utf8) }

    /// Hashes the bytes (as `==` compares them).
    package func hash(into hasher: inout Hasher) {
        hasher.combine(text.utf8.count)
        for byte in text.utf8 { hasher.combine(byte) }
    }
}
