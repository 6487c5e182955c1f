import Foundation
import PeerTransferCore
import Salut

/// The peerxfer receivers on the link, kept up to date for the web page: each one's name and
/// the key it advertises (resolved once when it appears). At most ``limit`` are kept: a link
/// flooded with services does not grow the page without bound.
final class LinkReceivers: Sendable {
    /// One receiver: its name, and its key once resolved (nil until then, or when it
    /// advertises none).
    struct Receiver: Sendable, Equatable {
        let name: String
        let key: String?
    }

    /// By service: names compare byte for byte (as text, a look-alike written with other code
    /// points, a Kelvin sign for a `K`, would share the real receiver's entry and key).
    private let found = Locked([DiscoveredService: String?]())
    /// The most receivers kept.
    static let limit = 200
    /// Names never listed (this daemon's own).
    private let excluded: @Sendable () -> String

    /// Receivers other than `excluded()` (this daemon's name, as published now).
    init(excluding excluded: @escaping @Sendable () -> String) {
        self.excluded = excluded
    }

    /// The receivers seen now, by name.
    var current: [Receiver] {
        let own = excluded()
        return found.withLock { $0 }.filter { !$0.key.name.utf8.elementsEqual(own.utf8) }
            .map { Receiver(name: $0.key.name, key: $0.value) }
            .sorted { $0.name.localizedStandardCompare($1.name) == .orderedAscending }
    }

    /// Browses until the calling task is cancelled; a failed browse is tried again after a while.
    func run() async {
        while !Task.isCancelled {
            do {
                for try await update in try ServiceBrowser(type: TransferLimits.serviceType) {
                    let listed = update.services
                    let new = found.withLock { found -> [DiscoveredService] in
                        for gone in found.keys where !listed.contains(gone) { found[gone] = nil }
                        let added = listed.filter { found[$0] == nil }
                            .sorted { $0.name.utf8.lexicographicallyPrecedes($1.name.utf8) }
                            .prefix(max(0, Self.limit - found.count))
                        for service in added { found[service] = .some(nil) }
                        return Array(added)
                    }
                    for service in new {
                        let key = (try? await service.resolve(timeout: 2, settle: 0.02)).flatMap {
                            try? Sender.advertisedKey($0, name: service.name)
                        }
                        found.withLock { if $0[service] != nil { $0[service] = .some(key) } }
                    }
                }
            } catch {}
            try? await Task.sleep(for: .seconds(5))
        }
    }
}
