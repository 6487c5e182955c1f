import Salut

/// `browse --resolve`'s lines, each resolved beside the others (at most ``limit`` at once) and
/// printed when its resolution ends: a service that does not answer no longer holds up the lines
/// of those found after it for the resolution's 5 s. A service's later line (its removal)
/// waits for its earlier one, so that no service is listed as removed before it was added.
actor ResolvingLines {
    /// At most this many resolutions at once (each is a resolver at avahi-daemon).
    let limit: Int
    private var running = 0
    private var waitingForPlace: [CheckedContinuation<Void, Never>] = []
    /// The last line of each service not printed yet, with its number.
    private var last: [DiscoveredService: (number: UInt64, line: Task<Void, Never>)] = [:]
    private var numbered: UInt64 = 0

    init(limit: Int = 16) { self.limit = limit }

    /// Queues a line for `service`: `print` runs once the service's earlier line is printed and
    /// a place is free.
    func add(_ service: DiscoveredService, _ print: @escaping @Sendable () async -> Void) {
        numbered += 1
        let number = numbered
        let before = last[service]?.line
        last[service] = (
            number,
            Task {
                await before?.value
                await self.takePlace()
                await print()
                self.leave(service, number)
            }
        )
    }

    /// Waits until every queued line is printed.
    func drain() async {
        while let pending = last.values.first?.line { await pending.value }
    }

    private func takePlace() async {
        if running < limit {
            running += 1
            return
        }
        await withCheckedContinuation { waitingForPlace.append($0) }
    }

    /// Gives the place to the next waiting line (the count stays), or frees it.
    private func leave(_ service: DiscoveredService, _ number: UInt64) {
        if waitingForPlace.isEmpty {
            running -= 1
        } else {
            waitingForPlace.removeFirst().resume()
        }
        if last[service]?.number == number { last[service] = nil }
    }
}
