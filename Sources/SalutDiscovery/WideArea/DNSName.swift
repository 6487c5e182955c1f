/// A domain name as DNS carries it: a sequence of labels, each up to 63 bytes of any value, at
/// most 255 bytes on the wire.
///
/// DNS-SD instance names may hold dots, spaces and any UTF-8 (`My Printer.2nd floor`), so a
/// label is raw bytes, not text split at dots. Written as text (``description``), a dot or
/// backslash inside a label is escaped with a backslash and other bytes outside printable ASCII as
/// `\DDD`, the way zone files and `dig` write them. Names compare without regard to ASCII case,
/// as DNS compares them.
struct DNSName: Hashable, Sendable, CustomStringConvertible {
    /// The labels, first (leftmost) to last; the root is no labels.
    let labels: [[UInt8]]

    /// The root name (`.`).
    static let root = DNSName(checked: [])

    /// A name from its labels.
    /// - Throws: ``DNSWireError`` when a label is empty or over 63 bytes, or the name is over 255
    ///   bytes on the wire.
    init(labels: [[UInt8]]) throws(DNSWireError) {
        for label in labels {
            guard !label.isEmpty else { throw .invalidName("an empty label") }
            guard label.count <= 63 else { throw .invalidName("a label of \(label.count) bytes (at most 63)") }
        }
        let wire = labels.reduce(1) { $0 + 1 + $1.count }
        guard wire <= 255 else { throw .invalidName("\(wire) bytes on the wire (at most 255)") }
        self.labels = labels
    }

    private init(checked labels: [[UInt8]]) { self.labels = labels }

    /// A name written as text: labels separated by dots, a final dot optional, `\.`, `\\` and
    /// `\DDD` (three decimal digits) for bytes inside a label.
    /// - Throws: ``DNSWireError`` for a malformed escape, an empty label or a name too long.
    init(parsing text: String) throws(DNSWireError) {
        var labels: [[UInt8]] = []
        var label: [UInt8] = []
        var bytes = Array(text.utf8)[...]
        if bytes == [UInt8(ascii: ".")] { bytes = [] }
        while let byte = bytes.popFirst() {
            switch byte {
            case UInt8(ascii: "\\"):
                guard let next = bytes.popFirst() else { throw .invalidName("a name ending in a lone backslash") }
                if next >= UInt8(ascii: "0"), next <= UInt8(ascii: "9") {
                    guard bytes.count >= 2 else { throw .invalidName("a \\DDD escape needs three digits") }
                    let digits = [next, bytes.removeFirst(), bytes.removeFirst()]
                    guard digits.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }),
                        let value = Int(String(decoding: digits, as: UTF8.self)), value <= 255
                    else {
                        throw .invalidName("a \\DDD escape needs three digits up to 255")
                    }
                    label.append(UInt8(value))
                } else {
                    label.append(next)
                }
            case UInt8(ascii: "."):
                labels.append(label)
                label = []
            default:
                label.append(byte)
            }
        }
        if !label.isEmpty { labels.append(label) }
        try self.init(labels: labels)
    }

    /// `label` put in front of this name (a service instance in front of its type and domain).
    /// - Throws: ``DNSWireError`` when the label is empty or too long, or the name too long.
    func prepending(_ label: [UInt8]) throws(DNSWireError) -> DNSName {
        try DNSName(labels: [label] + labels)
    }

    /// This name under `parent` (`_http._tcp` under `home.arpa`).
    /// - Throws: ``DNSWireError`` when the result is too long.
    func appending(_ parent: DNSName) throws(DNSWireError) -> DNSName {
        try DNSName(labels: labels + parent.labels)
    }

    /// Whether this name is `other` or lies under it.
    func isWithin(_ other: DNSName) -> Bool {
        guard labels.count >= other.labels.count else { return false }
        return DNSName(checked: Array(labels.suffix(other.labels.count))) == other
    }

    /// The uncompressed wire form.
    func encode(into out: inout [UInt8]) {
        for label in labels {
            out.append(UInt8(label.count))
            out += label
        }
        out.append(0)
    }

    /// The wire form with ASCII letters in lower case: what TSIG signs (RFC 8945 §4.3.3).
    var canonicalWire: [UInt8] {
        var out: [UInt8] = []
        DNSName(checked: labels.map { $0.map(Self.lowered) }).encode(into: &out)
        return out
    }

    /// The name as people write it, without the root's final dot (`lab-a.home.arpa`; empty
    /// for the root).
    var text: String { labels.isEmpty ? "" : String(description.dropLast()) }

    var description: String {
        guard !labels.isEmpty else { return "." }
        return labels.map { label in
            label.map { byte -> String in
                switch byte {
                case UInt8(ascii: "."), UInt8(ascii: "\\"): return "\\" + String(UnicodeScalar(byte))
                case 0x21...0x7E: return String(UnicodeScalar(byte))
                default:
                    let digits = String(byte)
                    return "\\" + String(repeating: "0", count: 3 - digits.count) + digits
                }
            }.joined()
        }.joined(separator: ".") + "."
    }

    static func == (a: DNSName, b: DNSName) -> Bool {
        guard a.labels.count == b.labels.count else { return false }
        return zip(a.labels, b.labels).allSatisfy {
            $0.count == $1.count && zip($0, $1).allSatisfy { lowered($0) == lowered($1) }
        }
    }

    func hash(into hasher: inout Hasher) {
        for label in labels {
            hasher.combine(label.count)
            for byte in label { hasher.combine(Self.lowered(byte)) }
        }
    }

    private static func lowered(_ byte: UInt8) -> UInt8 {
        byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z") ? byte + 32 : byte
    }
}
