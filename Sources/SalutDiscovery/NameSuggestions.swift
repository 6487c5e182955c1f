/// The names a person probably meant when a name they typed is not there: "did you mean
/// Kitchen?" for `kitchn`, `Kitchen` for `kitchen` or `kit`.
///
/// For a service name looked up and not found (offer the names a browser lists), a command or
/// option mistyped on a command line, a peer name not paired. Suggestions are only worked out
/// within a small number of edits, so a long name from the network costs little:
///
/// ```swift
/// let near = NameSuggestions.closest(to: "kitchn", among: ["Kitchen", "Office PC"])
/// // ["Kitchen"]
/// ```
public enum NameSuggestions {
    /// The names in `candidates` close to `typed`, closest first (at most three): the same but
    /// for letter case, one that starts with what was typed, or one within a few edits (one for
    /// every four characters, at least one: an insertion, a deletion, a change or two
    /// neighbours swapped). `typed` itself is never suggested.
    public static func closest(to typed: String, among candidates: some Sequence<String>) -> [String] {
        let wanted = Array(typed.lowercased())
        guard !wanted.isEmpty else { return [] }
        let allowed = max(1, wanted.count / 4)
        var scored: [(name: String, score: Int)] = []
        for name in Set(candidates) where name != typed {
            let other = Array(name.lowercased())
            let score: Int
            if other == wanted {
                score = 0
            } else if wanted.count >= 3, other.starts(with: wanted) {
                score = 1
            } else {
                let distance = editDistance(wanted, other, giveUpAbove: allowed)
                guard distance <= allowed else { continue }
                score = 1 + distance
            }
            scored.append((name, score))
        }
        return scored.sorted { ($0.score, $0.name) < ($1.score, $1.name) }.prefix(3).map(\.name)
    }

    /// Optimal string alignment distance between `a` and `b` (Levenshtein with swaps of two
    /// neighbours), or `limit + 1` once it is known to be more than `limit` (names from the
    /// network may be long: no full table is worked out for a hopeless pair).
    static func editDistance(_ a: [Character], _ b: [Character], giveUpAbove limit: Int) -> Int {
        if abs(a.count - b.count) > limit { return limit + 1 }
        if a.isEmpty || b.isEmpty { return max(a.count, b.count) }
        var before = [Int](repeating: 0, count: b.count + 1)
        var previous = Array(0...b.count)
        var current = [Int](repeating: 0, count: b.count + 1)
        for i in 1...a.count {
            current[0] = i
            var best = i
            for j in 1...b.count {
                let cost = a[i - 1] == b[j - 1] ? 0 : 1
                var value = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + cost)
                if i > 1, j > 1, a[i - 1] == b[j - 2], a[i - 2] == b[j - 1] { value = min(value, before[j - 2] + 1) }
                current[j] = value
                best = min(best, value)
            }
            if best > limit { return limit + 1 }
            (before, previous, current) = (previous, current, before)
        }
        return previous[b.count]
    }
}
