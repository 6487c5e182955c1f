/// What a person typed at a receiver's question about an offer.
public enum OfferAnswer: Sendable, Equatable {
    /// Accept everything offered (`y`, `yes`).
    case yes
    /// Decline everything (`n`, `no`, or nothing: the question's default).
    case no
    /// Accept, and trust the sender's key from now on (`a`, `always`).
    case always
    /// Choose which entries to accept (`p`, `pick`).
    case pick
    /// Anything else: asked again, never taken as a no.
    case unclear

    /// Reads `line` (letter case and surrounding spaces do not matter).
    public init(_ line: String) {
        switch line.trimmingCharacters(in: .whitespaces).lowercased() {
        case "y", "yes": self = .yes
        case "", "n", "no": self = .no
        case "a", "always": self = .always
        case "p", "pick": self = .pick
        default: self = .unclear
        }
    }

    /// The entries (0-based) a pick names: numbers from 1 to `count` and ranges (`1 3-5, 8`),
    /// separated by spaces or commas; empty for an empty line. Nil when anything in it is not
    /// such a number or range, or is out of 1…`count`.
    public static func picked(_ line: String, count: Int) -> Set<Int>? {
        var chosen = Set<Int>()
        for word in line.split(whereSeparator: { $0 == " " || $0 == "," || $0 == "\t" }) {
            let bounds = word.split(separator: "-", omittingEmptySubsequences: false)
            guard bounds.count <= 2, let low = Int(bounds[0]), let high = Int(bounds.last!), low >= 1, low <= high,
                high <= count
            else { return nil }
            chosen.formUnion((low - 1)...(high - 1))
        }
        return chosen
    }
}
