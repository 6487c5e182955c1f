import Foundation

extension ServiceBrowser {
    /// What a browser of the link does with failed contacts, as a state machine: the daemon's
    /// updates, the failed contacts reported to its context and the answers of direct queries
    /// come in; the updates to hand over and the queries to make go out. No I/O.
    ///
    /// A service that was contacted and failed (its resolution timed out, a connection to it
    /// found no route or timed out) may have left without its goodbye reaching the link (a
    /// host switched off, a lossy link); avahi-daemon then lists it until its record expires,
    /// up to 75 minutes. As RFC 6762 §10.5 has it, the failure is a reason to ask: the browser
    /// asks the service's responder directly (``LivenessCheck``), and when nothing answers,
    /// lists the service as removed, though the daemon still lists it. A service whose
    /// responder answers stays listed.
    ///
    /// Silence is believed only on an interface where a check was answered during this browse:
    /// a host firewall that lets in mDNS only to the multicast group drops every direct answer,
    /// and would make every service look gone. A silent service on an interface not heard from
    /// yet is a suspect, and another service listed there is asked as a control: if it answers,
    /// the suspects there are listed as removed; if nothing there ever answers, nothing is said.
    ///
    /// A service said removed is asked again now and then while the daemon lists it, and
    /// listed again (added) when it answers; the daemon's own removal of it later is not said
    /// twice. Each check has a number, so the answer of a check asked before the daemon removed
    /// and listed the service again is not taken for the answer of a later one.
    struct FailedContactStateMachine: Sendable {
        /// What the shell does next.
        enum Action: Sendable, Equatable {
            /// Ask `service`'s responder on `sightings` whether it is there; report with
            /// ``checked(_:answering:)``.
            case check(Check)
        }

        /// One direct query to make.
        struct Check: Sendable, Hashable {
            var number: UInt64
            var service: DiscoveredService
            var sightings: [ServiceSighting]
        }

        /// What a step hands over and asks next.
        struct Step: Sendable, Equatable {
            var updates: [BrowseUpdate] = []
            var actions: [Action] = []
        }

        /// Checks under way at most (more reports wait for the next failure).
        static let maximumChecks = 16
        /// Services at most listed as removed while the daemon still lists them.
        static let maximumSilenced = 256

        /// Where the daemon sees each listed service.
        private var sightings: [DiscoveredService: [ServiceSighting]] = [:]
        /// What the daemon lists.
        private var listed: Set<DiscoveredService> = []
        private var complete = false
        /// The checks under way, by service: the number of each.
        private var checking: [DiscoveredService: UInt64] = [:]
        private var nextCheck: UInt64 = 0
        /// Listed by the daemon, said removed here: nothing answered for them.
        private var silenced: Set<DiscoveredService> = []
        /// Silent, on interfaces where no check was answered yet: said removed once one is.
        private var suspects: Set<DiscoveredService> = []
        /// Interfaces (by index) where a check was answered during this browse.
        private var heard: Set<Int32> = []
        /// Services asked as controls, once each (a browse with every service silent asks
        /// each once, then says nothing).
        private var controlled: Set<DiscoveredService> = []
        /// Set once the browser ended: nothing more is handed over or asked.
        private var ended = false

        /// The daemon's update, as the browser hands it over: without the services said removed
        /// here (and without the daemon's own removal of one of them, said already); nil when
        /// nothing is left of it to say. Late after the browser ended (the daemon's queue may
        /// still deliver one): nil.
        mutating func browsed(_ update: BrowseUpdate) -> BrowseUpdate? {
            guard !ended else { return nil }
            let wasComplete = complete
            sightings.merge(update.sightings) { $1 }
            listed = update.services
            complete = update.isComplete
            // The daemon's removals of services said removed here: said already.
            var saidAlready: Set<DiscoveredService> = []
            var said = update
            said.changes = update.changes.filter { change in
                guard case .removed(let service) = change else { return true }
                sightings[service] = nil
                checking[service] = nil
                suspects.remove(service)
                controlled.remove(service)
                guard silenced.remove(service) == nil else {
                    saidAlready.insert(service)
                    return false
                }
                return true
            }
            let leftOut = silenced.union(saidAlready)
            said.services = listed.subtracting(silenced)
            said.sightings = update.sightings.filter { !leftOut.contains($0.key) }
            said.txtRecords = update.txtRecords.filter { !leftOut.contains($0.key) }
            let nothingLeft =
                !update.changes.isEmpty && said.changes.isEmpty && said.sightings.isEmpty && wasComplete == complete
            return nothingLeft ? nil : said
        }

        /// A contact with `service` failed: the check to make, when it is listed here, not
        /// said removed or being checked already, and there is room for one more check. Late
        /// after the browser ended (a connection may fail after its browse): nil.
        mutating func failedContact(with service: DiscoveredService) -> Action? {
            guard !ended, let listedService = self.listed(service), !silenced.contains(listedService) else {
                return nil
            }
            return check(listedService)
        }

        /// Time to ask again the services said removed here (they may have come back). Late
        /// after the browser ended (the recheck timer races its end): no action.
        mutating func recheckDue() -> [Action] {
            guard !ended else { return [] }
            return silenced.sorted { $0.name < $1.name }.compactMap { check($0) }
        }

        /// Whether anything is said removed here (and so asked again now and then), while the
        /// browse runs.
        var hasSilenced: Bool { !ended && !silenced.isEmpty }

        /// A check ended: `answering` true or false, nil when the query could not be made
        /// (nothing is concluded).
        mutating func checked(_ check: Check, answering: Bool?) -> Step {
            let service = check.service
            guard !ended, checking[service] == check.number else { return Step() }  // stale, or ended
            checking[service] = nil
            guard listed.contains(service), let answering else { return Step() }
            var step = Step()
            if answering {
                if silenced.remove(service) != nil { step.updates.append(update(.added(service))) }
                suspects.remove(service)
                let interfaces = Set(check.sightings.map(\.interfaceIndex))
                heard.formUnion(interfaces)
                // The suspects on the interfaces now heard from are silent indeed.
                for suspect in suspects.sorted(by: { $0.name < $1.name })
                where !interfaces.isDisjoint(with: seenOn(suspect)) {
                    suspects.remove(suspect)
                    if let removal = silence(suspect) { step.updates.append(removal) }
                }
                return step
            }
            guard !silenced.contains(service) else { return step }  // still silent: said already
            if !heard.isDisjoint(with: seenOn(service)) {
                if let removal = silence(service) { step.updates.append(removal) }
                return step
            }
            suspects.insert(service)
            if let control = control(for: service) { step.actions.append(control) }
            return step
        }

        /// The browser ended.
        mutating func finish() {
            ended = true
        }

        private mutating func check(_ service: DiscoveredService) -> Action? {
            guard checking[service] == nil, checking.count < Self.maximumChecks,
                let seen = sightings[service], !seen.isEmpty
            else { return nil }
            nextCheck += 1
            checking[service] = nextCheck
            return .check(Check(number: nextCheck, service: service, sightings: seen))
        }

        /// A check of another service listed where `suspect` is seen, not asked as a control
        /// before: whether direct answers come in there at all.
        private mutating func control(for suspect: DiscoveredService) -> Action? {
            let interfaces = seenOn(suspect)
            let candidate = listed.sorted { $0.name < $1.name }.first {
                !suspects.contains($0) && !silenced.contains($0) && !controlled.contains($0) && checking[$0] == nil
                    && !interfaces.isDisjoint(with: seenOn($0))
            }
            guard let candidate else { return nil }
            controlled.insert(candidate)
            return check(candidate)
        }

        private func seenOn(_ service: DiscoveredService) -> Set<Int32> {
            Set((sightings[service] ?? []).map(\.interfaceIndex))
        }

        /// Says `service` removed, when there is room for one more.
        private mutating func silence(_ service: DiscoveredService) -> BrowseUpdate? {
            guard silenced.count < Self.maximumSilenced, listed.contains(service) else { return nil }
            silenced.insert(service)
            return update(.removed(service))
        }

        private func update(_ change: BrowseChange) -> BrowseUpdate {
            let service: DiscoveredService
            switch change {
            case .added(let added): service = added
            case .removed(let removed): service = removed
            }
            return BrowseUpdate(
                changes: [change], sightings: [service: sightings[service] ?? []],
                services: listed.subtracting(silenced), isComplete: complete)
        }

        /// The listed service `service` names: its name compared without regard to ASCII case,
        /// as mDNS compares names, its type and domain without regard to case or a final dot.
        private func listed(_ service: DiscoveredService) -> DiscoveredService? {
            if listed.contains(service) { return service }
            let type = service.type.lowercased(), domain = Self.plain(service.domain)
            return listed.first {
                ServiceNames.sameIgnoringASCIICase($0.name, service.name) && $0.type.lowercased() == type
                    && Self.plain($0.domain) == domain
            }
        }

        private static func plain(_ domain: String) -> String {
            let lowered = domain.lowercased()
            return lowered.hasSuffix(".") ? String(lowered.dropLast()) : lowered
        }
    }
}
