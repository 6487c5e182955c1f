import Foundation
import SalutStreams

/// What `resolve` found lately, per service, so that connecting to a service just resolved uses
/// those addresses instead of asking the network again. Entries last a few seconds: a service
/// that moves is resolved afresh soon after, and at once after a connection to it fails (see
/// ``forget(_:)``).
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

    /// Drops what is remembered of `service`: its addresses did not take a connection (a
    /// restarted service listens on another port), so the next connection resolves it again.
    func forget(_ service: DiscoveredService) {
        entries.withLock { _ = $0.removeValue(forKey: service) }
    }

    /// The resolution of `service` made within the lifetime, if any has addresses.
    func recent(_ service: DiscoveredService) -> ResolvedService? {
        entries.withLock { table in
            guard let entry = table[service], ContinuousClock.now - entry.at < Self.lifetime,
                  !entry.resolved.addresses.isEmpty else { return nil }
            return entry.resolved
        }
    }
}
