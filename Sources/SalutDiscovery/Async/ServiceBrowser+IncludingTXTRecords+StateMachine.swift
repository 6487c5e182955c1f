extension ServiceBrowser.IncludingTXTRecords {
    /// Joins a browser's updates with the TXT records of the services they list, as a value:
    /// events in (an update, a TXT record, a deadline), actions out (watch or stop watching a
    /// service's TXT record, hand an update to the application, start a deadline). The shell
    /// (``ServiceBrowser/IncludingTXTRecords``) performs the actions; nothing here does I/O.
    ///
    /// An update that adds services is held until the TXT record of each added service it
    /// watches is known, or until its deadline passes, so that the application usually sees a
    /// service together with its record. Updates that come while one is held join it. A TXT
    /// record that arrives or changes while nothing is held is handed over as an update with no
    /// changes. At most `maximumWatched` services are watched at a time; the others are listed
    /// without a record until a place frees (then they are watched, oldest name first). Each
    /// watch has a number, so that a record from a watch already stopped is told apart.
    struct StateMachine {
        enum Action: Hashable {
            /// Start following the service's TXT record; its records come with this number.
            case watch(DiscoveredService, Int)
            /// Stop following it (the service is gone).
            case stopWatching(DiscoveredService)
            /// Hand this update to the application.
            case deliver(BrowseUpdate)
            /// Call ``deadlinePassed(_:)`` with this number once the wait is over.
            case startDeadline(Int)
        }

        let maximumWatched: Int
        private var services: Set<DiscoveredService> = []
        private var records: [DiscoveredService: TXTRecord] = [:]
        /// The services followed, with their watches' numbers.
        private var watched: [DiscoveredService: Int] = [:]
        private var watches = 0
        private var isComplete = false
        /// The update being held, and the added services whose records it waits for.
        private var held: BrowseUpdate?
        private var awaited: Set<DiscoveredService> = []
        /// Numbers the holds, so that the deadline of an update already delivered does nothing.
        private var hold = 0

        init(maximumWatched: Int) {
            self.maximumWatched = Swift.max(0, maximumWatched)
        }

        /// The browser reported `update`.
        mutating func browsed(_ update: BrowseUpdate) -> [Action] {
            var actions: [Action] = []
            for change in update.changes {
                switch change {
                case .added(let service):
                    guard watched[service] == nil, watched.count < maximumWatched else { continue }
                    awaited.insert(service)
                    actions.append(watch(service))
                case .removed(let service):
                    records[service] = nil
                    awaited.remove(service)
                    if watched.removeValue(forKey: service) != nil { actions.append(.stopWatching(service)) }
                }
            }
            services = update.services
            // Places freed by removals go to listed services that waited for one.
            if watched.count < maximumWatched {
                let waiting = services.filter { watched[$0] == nil }.sorted { $0.description < $1.description }
                for service in waiting.prefix(maximumWatched - watched.count) { actions.append(watch(service)) }
            }
            isComplete = update.isComplete
            if var joined = held {
                joined.changes += update.changes
                joined.sightings.merge(update.sightings) { _, newer in newer }
                joined.services = update.services
                joined.isComplete = update.isComplete
                held = joined
            } else {
                held = update
                if !awaited.isEmpty {
                    hold += 1
                    actions.append(.startDeadline(hold))
                }
            }
            if awaited.isEmpty { actions.append(deliverHeld()) }
            return actions
        }

        /// The watch numbered `number` says the TXT record of `service` is `record` (first
        /// seen, or changed).
        mutating func received(_ record: TXTRecord, for service: DiscoveredService, watch number: Int) -> [Action] {
            // Late: the service went (and maybe came back, watched anew) while this record was
            // on the way (documented: no action).
            guard watched[service] == number else { return [] }
            guard records[service] != record else { return [] }
            records[service] = record
            if held != nil {
                awaited.remove(service)
                return awaited.isEmpty ? [deliverHeld()] : []
            }
            return [
                .deliver(
                    BrowseUpdate(
                        changes: [], services: services, isComplete: isComplete, txtRecords: currentRecords))
            ]
        }

        /// The deadline numbered `number` has passed: the update held then goes as it is.
        mutating func deadlinePassed(_ number: Int) -> [Action] {
            // Late: that hold was delivered once its records came (documented: no action).
            guard number == hold, held != nil else { return [] }
            awaited.removeAll()
            return [deliverHeld()]
        }

        /// The browser ended: an update still held goes as it is.
        mutating func browsingEnded() -> [Action] {
            guard held != nil else { return [] }
            awaited.removeAll()
            return [deliverHeld()]
        }

        private mutating func watch(_ service: DiscoveredService) -> Action {
            watches += 1
            watched[service] = watches
            return .watch(service, watches)
        }

        private var currentRecords: [DiscoveredService: TXTRecord] {
            records.filter { services.contains($0.key) }
        }

        private mutating func deliverHeld() -> Action {
            guard var update = held else {
                assertionFailure("deliverHeld with nothing held")
                return .deliver(BrowseUpdate(changes: [], services: services, isComplete: isComplete))
            }
            held = nil
            update.txtRecords = currentRecords
            return .deliver(update)
        }
    }
}
