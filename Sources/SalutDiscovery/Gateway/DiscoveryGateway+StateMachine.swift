import Foundation

extension DiscoveryGateway {
    /// What the gateway decides, as a state machine: which services of the link it mirrors into
    /// the zone (at most ``maximumServices``, first come first served), which of the zone's it
    /// removes, in what order, and when it tries again. The shell reports what the link and the
    /// zone say and what each update came to; the machine answers with the next step. No I/O:
    /// every decision is tested without a network.
    ///
    /// One update is in flight at a time, carrying up to ``operationsPerUpdate`` operations (one
    /// at a time, a hundred services took 0.7 s to write and B read the zone half-written); an
    /// update of several that the server cannot take is sent again one operation at a time, so
    /// that only the one it cannot take is skipped. The zone is first listed (what an earlier run left
    /// under the label); services are written as they are resolved; removals wait until the
    /// link has had time to fill in (``Event/linkSettled``), so that a restart never removes a
    /// service only because it was not seen yet.
    struct StateMachine: Sendable {
        /// What the link and the zone said, and what an update came to.
        enum Event: Sendable, Equatable {
            /// A service is on the link (not resolved yet).
            case seen(ServiceKey)
            /// A service's records as the link has them now (its first resolution, or a change).
            case found(MirroredService)
            /// A service left the link (a goodbye, or its records expired).
            case lost(ServiceKey)
            /// A service being resolved gave no answer in time: it goes behind the services
            /// waiting for a place, if any (a device cannot hold places with names that never
            /// resolve).
            case unresolved(ServiceKey)
            /// What the zone holds under the label (read at the start).
            case zoneListed([ServiceKey: MirroredService])
            /// The link had time to show what it holds: services the zone has and the link does
            /// not may now be removed.
            case linkSettled
            /// The update in flight was applied.
            case updateSucceeded
            /// The update in flight failed: `retryable` (the server did not answer, or
            /// failed), or not (the key or the zone is refused: the gateway stops);
            /// `unwritable`: this update cannot be made (records too large for an update, or
            /// refused as malformed): its service is skipped, and the gateway goes on.
            case updateFailed(reason: String, retryable: Bool, unwritable: Bool)
            /// The delay before trying again is over.
            case retryDue
        }

        /// What the shell does.
        enum Action: Sendable, Equatable {
            /// Resolve this service on the link, and keep reporting its changes.
            case resolve(ServiceKey)
            /// Stop resolving this service.
            case stopResolving(ServiceKey)
            /// Send these operations to the zone in one update (applied together or not at all),
            /// then report how it went.
            case send([ZoneOperation])
            /// Report ``Event/retryDue`` after this long (the update failed for `reason`).
            case retry(after: Duration, reason: String)
            /// This service is not mirrored, for this reason (said once).
            case skip(ServiceKey, reason: String)
            /// The zone refuses the gateway's updates for good: stop, saying why.
            case stop(reason: String)
        }

        /// At most this many services of the link are mirrored.
        let maximumServices: Int
        /// At most this many operations go in one update.
        let operationsPerUpdate: Int
        /// At most this many services seen on the link are remembered beyond those mirrored
        /// (waiting for a place): more are ignored until some leave.
        var maximumWaiting: Int { maximumServices * 4 }

        /// Services seen on the link, in the order they came.
        private var order: [ServiceKey] = []
        /// Their records, once resolved.
        private var linked: [ServiceKey: MirroredService] = [:]
        /// What the zone holds of this label, as far as the gateway knows (nil until listed).
        private var written: [ServiceKey: MirroredService]?
        /// The service types the zone lists under `_services._dns-sd._udp` of the label.
        private var enumerated: Set<String> = []
        private var browseDomainWritten = false
        private var settled = false
        private var inFlight: [ZoneOperation]?
        /// How many of the next updates carry one operation each (after an update of several
        /// that the server could not take): counted down by their answers, not by their sending,
        /// so that one tried again after a timeout still goes alone.
        private var singlyFor = 0
        private var waitingToRetry = false
        private var retryDelay: Duration?
        /// Services whose records (as they are now) cannot be written: too large, or no
        /// address that routes off the link. Written again once they change.
        private var unwritable: [ServiceKey: MirroredService] = [:]
        /// Services said to be skipped, so that it is said once.
        private var toldSkipped: Set<ServiceKey> = []

        init(maximumServices: Int, operationsPerUpdate: Int = 1) {
            self.maximumServices = max(1, maximumServices)
            self.operationsPerUpdate = max(1, operationsPerUpdate)
        }

        /// How many services are mirrored in the zone now.
        var mirroredCount: Int { written?.count ?? 0 }

        /// How many services of the link wait for a place (over ``maximumServices``).
        var waitingCount: Int { max(0, order.count - maximumServices) }

        /// Whether an update failed and has not gone through since (waiting to be tried again,
        /// or being tried again): the zone is behind the link.
        var isBehind: Bool { retryDelay != nil }

        /// Whether the zone's holding under the label has been read (``Event/zoneListed(_:)``).
        var isListed: Bool { written != nil }

        /// The services mirrored, at most ``maximumServices``: the first that came.
        private var admitted: ArraySlice<ServiceKey> { order.prefix(maximumServices) }

        // MARK: Events

        mutating func handle(_ event: Event) -> [Action] {
            switch event {
            case .seen(let key):
                guard !order.contains(key) else { return [] }  // seen on another interface or protocol too
                guard order.count < maximumServices + maximumWaiting else {
                    return tellSkipped(key, "more than \(maximumServices + maximumWaiting) services on the link")
                }
                order.append(key)
                if order.count <= maximumServices { return [.resolve(key)] }
                return tellSkipped(key, "over --max-services (\(maximumServices)): it waits until others leave")
            case .found(let service):
                guard admitted.contains(service.key) else { return [] }  // late: lost, or moved back, meanwhile
                linked[service.key] = service
                if unwritable[service.key] != nil && unwritable[service.key] != service {
                    unwritable[service.key] = nil  // changed: worth another try
                    toldSkipped.remove(service.key)
                }
                if service.host.isEmpty {
                    unwritable[service.key] = service
                    return tellSkipped(
                        service.key,
                        "its host is not one of the link's (NAME.local): a host HOST.LABEL.local is another link's, announced here by a gateway, and never written back"
                    ) + next()
                }
                if service.addresses.isEmpty {
                    unwritable[service.key] = service
                    return tellSkipped(service.key, "no address that routes off the link") + next()
                }
                return next()
            case .lost(let key):
                guard let index = order.firstIndex(of: key) else { return [] }  // late: lost already
                let wasAdmitted = index < maximumServices
                order.remove(at: index)
                linked[key] = nil
                unwritable[key] = nil
                toldSkipped.remove(key)
                var actions: [Action] = wasAdmitted ? [.stopResolving(key)] : []
                // Its place goes to the first one waiting.
                if wasAdmitted, order.count >= maximumServices {
                    actions.append(.resolve(order[maximumServices - 1]))
                }
                return actions + next()
            case .unresolved(let key):
                // Late: lost, or moved back to wait, while its resolution ran out.
                guard let index = order.firstIndex(of: key), index < maximumServices else { return [] }
                var actions = tellSkipped(key, "it did not resolve in time")
                order.remove(at: index)
                order.append(key)
                if order.count > maximumServices {
                    // Another was waiting: it takes the place (this one waits, and is resolved
                    // again once its turn comes back).
                    actions += [.stopResolving(key), .resolve(order[maximumServices - 1])]
                }
                return actions + next()
            case .zoneListed(let services):
                guard written == nil else { return unexpected(event) }
                written = services
                enumerated = Set(services.keys.map(\.type))
                return next()
            case .linkSettled:
                settled = true
                return next()
            case .updateSucceeded:
                guard let operations = inFlight else { return unexpected(event) }
                inFlight = nil
                retryDelay = nil
                if operations.count == 1 { singlyFor = max(0, singlyFor - 1) }
                operations.forEach { apply($0) }
                return next()
            case .updateFailed(let reason, let retryable, let cannotBeMade):
                guard let operations = inFlight else { return unexpected(event) }
                inFlight = nil
                if cannotBeMade && operations.count > 1 {
                    // Which one the server cannot take is found by sending them one by one.
                    singlyFor = operations.count
                    return next()
                }
                if cannotBeMade, let operation = operations.first {
                    singlyFor = max(0, singlyFor - 1)
                    if case .write(let service, _, _) = operation {
                        unwritable[service.key] = service
                        return tellSkipped(service.key, "its records cannot be written (\(reason))") + next()
                    }
                    apply(operation)  // (a removal or a list the server will not take: not tried again)
                    return next()
                }
                guard retryable else { return [.stop(reason: reason)] }
                let delay = min((retryDelay ?? .milliseconds(500)) * 2, .seconds(60))
                retryDelay = delay
                waitingToRetry = true
                return [.retry(after: delay, reason: reason)]
            case .retryDue:
                guard waitingToRetry else { return unexpected(event) }
                waitingToRetry = false
                return next()
            }
        }

        // MARK: Deciding

        /// The next update, when none is in flight and the zone is known: the next operations,
        /// each chosen as if those before it in the update were applied.
        private mutating func next() -> [Action] {
            guard inFlight == nil, !waitingToRetry, written != nil else { return [] }
            let saved = (written, enumerated, browseDomainWritten)
            let limit = singlyFor > 0 ? 1 : operationsPerUpdate
            var operations: [ZoneOperation] = []
            while operations.count < limit, let operation = nextOperation() {
                operations.append(operation)
                apply(operation)
            }
            (written, enumerated, browseDomainWritten) = saved
            guard !operations.isEmpty else { return [] }
            inFlight = operations
            return [.send(operations)]
        }

        /// The operation that brings the zone (as ``written`` says it is) closer to the link.
        private func nextOperation() -> ZoneOperation? {
            guard let written else { return nil }
            let wanted = admitted.compactMap { key -> MirroredService? in
                guard let service = linked[key], unwritable[key] == nil else { return nil }
                return service
            }
            // Services of the link that the zone lacks, or holds otherwise.
            if let service = wanted.first(where: { written[$0.key] != $0 }) {
                let old = written[service.key]
                let staleHost = old.flatMap { $0.host != service.host ? $0.host : nil }
                return .write(
                    service, replacing: old,
                    droppingHost: staleHost.flatMap { hostIsUnused($0, besides: service.key) ? $0 : nil })
            }
            // Services the zone holds and the link does not (any more): once the link settled.
            let wantedKeys = Set(wanted.map(\.key))
            if settled, let gone = written.keys.sorted().first(where: { !wantedKeys.contains($0) }) {
                let host = written[gone]?.host
                return .remove(gone, droppingHost: host.flatMap { hostIsUnused($0, besides: gone) ? $0 : nil })
            }
            // The label's list of types, and the zone's pointer to the label as a browsing domain.
            let types = Set(written.keys.map(\.type))
            let adding = types.subtracting(enumerated).sorted()
            let removing = settled ? enumerated.subtracting(types).sorted() : []
            if !adding.isEmpty || !removing.isEmpty || !browseDomainWritten {
                return .enumerate(adding: adding, removing: removing, browseDomain: !browseDomainWritten)
            }
            return nil
        }

        /// True when no service the zone holds, other than `key`'s, is on `host`.
        private func hostIsUnused(_ host: String, besides key: ServiceKey) -> Bool {
            !host.isEmpty && !(written ?? [:]).contains { $0.key != key && $0.value.host == host }
        }

        private mutating func apply(_ operation: ZoneOperation) {
            switch operation {
            case .write(let service, _, _):
                written?[service.key] = service
                enumerated.insert(service.key.type)  // (listed in the same update)
            case .remove(let key, _): written?[key] = nil
            case .enumerate(let adding, let removing, let browseDomain):
                enumerated.formUnion(adding)
                enumerated.subtract(removing)
                if browseDomain { browseDomainWritten = true }
            }
        }

        private mutating func tellSkipped(_ key: ServiceKey, _ reason: String) -> [Action] {
            guard toldSkipped.insert(key).inserted else { return [] }
            return [.skip(key, reason: reason)]
        }

        /// An event that cannot come now: a mistake in the shell, asserted in debug builds.
        private func unexpected(_ event: Event) -> [Action] {
            assertionFailure("\(event) with nothing in flight (waiting to retry: \(waitingToRetry))")
            return []
        }
    }
}
