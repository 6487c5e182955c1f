extension DiscoveryGateway {
    /// Runs `body` for each item, at most `atOnce` at a time (a task group); the results in the
    /// items' order. The gateway's bounded fan-outs: names published through avahi-daemon,
    /// instances resolved when the zone is read.
    static func inTurns<Item: Sendable, Value: Sendable>(
        _ items: [Item], atOnce: Int, _ body: @escaping @Sendable (Item) async -> Value
    ) async -> [(Item, Value)] {
        var results: [(Int, Item, Value)] = []
        var next = items.startIndex
        await withTaskGroup(of: (Int, Item, Value).self) { group in
            func add() {
                guard next < items.endIndex else { return }
                let (index, item) = (next, items[next])
                next += 1
                group.addTask { (index, item, await body(item)) }
            }
            for _ in 0..<max(1, atOnce) { add() }
            for await result in group {
                results.append(result)
                add()
            }
        }
        return results.sorted { $0.0 < $1.0 }.map { ($0.1, $0.2) }
    }
}
