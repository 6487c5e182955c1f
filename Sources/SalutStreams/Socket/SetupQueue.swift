/// The connections a listener has accepted that are still setting up (handshake, first byte),
/// oldest first, at most `capacity` of them: admitting one more cuts the oldest connection of the
/// address that has the most setting up, so that a flood of silent peers delays a prompt one by
/// no more than its own set-up, and one address flooding cuts its own connections, not another's.
final class SetupQueue: Sendable {
    private struct Entry {
        let id: UInt64
        /// The peer's address (without its port); nil when unknown.
        let source: String?
        weak var pump: SocketPump?
    }

    private let capacity: Int
    private let entries = Locked<(next: UInt64, waiting: [Entry])>((0, []))

    init(capacity: Int) {
        self.capacity = max(1, capacity)
    }

    /// How many connections are setting up now.
    var count: Int { entries.value.waiting.count }

    /// The address a connection counts under: its IP address (an IPv4-mapped IPv6 address as
    /// its IPv4 address; an IPv6 link-local one with its interface). Whole addresses, not
    /// prefixes: on a LAN every host of the link shares the link's IPv6 /64, and counting them as
    /// one would make the neighbours one "busy address" that a flood from elsewhere cuts first.
    static func source(of address: SocketAddress?) -> String? {
        guard let address else { return nil }
        guard address.isIPv6 else { return address.host }
        let bytes = address.rawBytes
        if bytes.prefix(12) == [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff] {
            return bytes.suffix(4).map(String.init).joined(separator: ".")
        }
        return bytes.map { String($0, radix: 16) }.joined(separator: ":") + "%\(address.scopeID)"
    }

    /// Counts `pump`, from the address `source`, as setting up; when there is no room, cuts the
    /// oldest connection of the address with the most setting up (see ``indexToCut(sources:)``).
    /// Returns what the pump calls when its set-up ends (set up, failed or cut).
    func admit(_ pump: SocketPump, from source: String? = nil) -> @Sendable () -> Void {
        let (id, evicted) = entries.withLock { state -> (UInt64, SocketPump?) in
            state.next += 1
            var evicted: SocketPump?
            if state.waiting.count >= capacity {
                let index = Self.indexToCut(sources: state.waiting.map(\.source) + [source])
                evicted = state.waiting.remove(at: index).pump
            }
            state.waiting.append(Entry(id: state.next, source: source, pump: pump))
            return (state.next, evicted)
        }
        evicted?.cutIfSettingUp(
            .limitExceeded(
                "\(capacity) connections were already setting up; this one, the oldest of the address with the most, made room for a new one"
            ))
        return { [weak self] in self?.remove(id) }
    }

    /// Which connection to cut, given the addresses of those setting up (oldest first, the
    /// newcomer last, so one more than the room): the oldest of the address with the most
    /// connections (unknown addresses count as one address); between addresses with as many,
    /// the one whose oldest is older. The newcomer's index never comes back: it is let in.
    static func indexToCut(sources: [String?]) -> Int {
        var counts: [String?: Int] = [:]
        for source in sources { counts[source, default: 0] += 1 }
        let most = counts.values.max() ?? 0
        let candidates = sources.indices.dropLast()
        return candidates.first { counts[sources[$0]] == most } ?? candidates.first ?? 0
    }

    private func remove(_ id: UInt64) {
        entries.withLock { state in
            if let index = state.waiting.firstIndex(where: { $0.id == id }) { state.waiting.remove(at: index) }
        }
    }
}
