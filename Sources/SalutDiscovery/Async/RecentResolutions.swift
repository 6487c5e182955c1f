import Foundation
import SalutStreams

/// What `resolve` found lately, per service, so that connecting to a service just resolved uses
/// those addresses instead of asking the network again. An entry serves one connection, within
/// a few seconds: any later one (after a refusal, say, when a restarted service listens on
/// another port) asks the network again.
final class RecentResolutions: Sendable {
    /// How long a resolution is reused.
    static let lifetime: Duration = .seconds(10)

    private let entries = Locked<[DiscoveredService: (resolved: ResolvedService, at: ContinuousClock.Instant)]>([:])

    /// Remembers a resolution (dropping entries that are too old).
    func remember(_ resolved: ResolvedService) {
        let now = ContinuousClock.now
        entries.withLock { table in
            table = table.filter { now - $0.value.at < Self.lifetime }
            table[resolved.service] = (resolved, now)
        }
    }

    /// Takes the resolution of `service` made within the lifetime, if any has addresses: it is
    /// not given out again.
    func take(_ service: DiscoveredService) -> ResolvedService? {
        entries.withLock { table in
            guard let entry = table.removeValue(forKey: service), ContinuousClock.now - entry.at < Self.lifetime,
                !entry.resolved.addresses.isEmpty
            else { return nil }
            return entry.resolved
        }
    }
}
