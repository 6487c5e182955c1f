import Foundation
import SalutStreams

extension WideAreaBrowsing {
    /// A unicast browse between looks at the list: what was listed, and how many looks in a row
    /// failed. Pure: each look's outcome in, the next step out (tested without a server).
    struct StateMachine {
        enum Step {
            /// Yield this update, then look again after the records' TTL.
            case report(BrowseUpdate, ttl: UInt32)
            /// Nothing changed: look again after the records' TTL.
            case wait(ttl: UInt32)
            /// The look failed after an earlier one succeeded: the list stays, look again after this long.
            case retry(after: Duration)
            /// The very first look failed: the browse ends with this error.
            case fail(any Error)
        }

        let type: String
        let domain: String
        private var known: Set<UnicastBrowser.InstanceName>?
        private var failures = 0

        init(type: String, domain: String) {
            self.type = type
            self.domain = domain
        }

        /// One look's outcome: the names listed and their TTL, or why it failed.
        mutating func looked(_ look: Result<(names: Set<UnicastBrowser.InstanceName>, ttl: UInt32), any Error>) -> Step
        {
            let listed: (names: Set<UnicastBrowser.InstanceName>, ttl: UInt32)
            switch look {
            case .failure(let error):
                guard known != nil, !(error is CancellationError) else { return .fail(error) }
                failures += 1
                return .retry(after: WideAreaBrowsing.backOff(afterFailures: failures))
            case .success(let outcome):
                listed = outcome
            }
            failures = 0
            let first = known == nil
            let changes = UnicastBrowser.Changes(from: known ?? [], to: listed.names)
            known = listed.names
            guard first || !changes.added.isEmpty || !changes.removed.isEmpty else { return .wait(ttl: listed.ttl) }
            let update = BrowseUpdate(
                changes: changes.added.map { .added(service($0)) } + changes.removed.map { .removed(service($0)) },
                services: Set(listed.names.map { service($0.text) }), isComplete: true)
            return .report(update, ttl: listed.ttl)
        }

        private func service(_ name: String) -> DiscoveredService {
            DiscoveredService(name: name, type: type, domain: domain)
        }
    }
}
