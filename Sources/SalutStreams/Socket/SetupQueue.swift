/// The connections a listener has accepted that are still setting up (handshake, first byte),
/// oldest first, at most `capacity` of them: admitting one more cuts the oldest, so that a flood
/// of silent peers delays a prompt one by no more than its own set-up.
final class SetupQueue: Sendable {
    private struct Entry {
        let id: UInt64
        weak var pump: SocketPump?
    }

    private let capacity: Int
    private let entries = Locked<(next: UInt64, waiting: [Entry])>((0, []))

    init(capacity: Int) {
        self.capacity = max(1, capacity)
    }

    /// How many connections are setting up now.
    var count: Int { entries.value.waiting.count }

    /// Counts `pump` as setting up, cutting the oldest connection if there is no room. Returns
    /// what the pump calls when its set-up ends (set up, failed or cut).
    func admit(_ pump: SocketPump) -> @Sendable () -> Void {
        let (id, evicted) = entries.withLock { state -> (UInt64, SocketPump?) in
            state.next += 1
            var evicted: SocketPump?
            if state.waiting.count >= capacity {
                evicted = state.waiting.removeFirst().pump
            }
            state.waiting.append(Entry(id: state.next, pump: pump))
            return (state.next, evicted)
        }
        evicted?.cutIfSettingUp(
            .limitExceeded(
                "\(capacity) connections were already setting up; this one, the oldest, made room for a new one"))
        return { [weak self] in self?.remove(id) }
    }

    private func remove(_ id: UInt64) {
        entries.withLock { state in
            if let index = state.waiting.firstIndex(where: { $0.id == id }) { state.waiting.remove(at: index) }
        }
    }
}
