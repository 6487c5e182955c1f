import Foundation
import Salut
import SalutStreams

/// What a sender does with a receiver that is new here: neither its name (nor one a person
/// could take for it) nor its key is pinned or trusted. Whoever answers a name first on the link
/// could be anyone, so it is never sent to silently.
public enum FirstContact: Sendable {
    /// Refused with a trust error that says how to pair (the default, and the only safe
    /// choice without a person to ask).
    case refuse
    /// Trusted and pinned, whatever its key (OpenSSH's `accept-new`): the user said so in
    /// advance (`--accept-new-key`).
    case acceptNewKey
    /// A person is asked, with the receiver's name, key and the verification code; true pins
    /// and sends, false refuses.
    case ask(@Sendable (NewReceiver) async -> Bool)
}

/// A receiver met for the first time, as the person deciding whether to trust it sees it.
public struct NewReceiver: Sendable, Equatable {
    /// The name it answers to (from the network: escape it before showing it).
    public var name: String
    /// The SHA-256 of the key it advertises and must prove, hex.
    public var key: String
    /// The code both devices show for this pair of keys (``VerificationCode``).
    public var code: String
    /// The name this key is paired or trusted under here, when it is (another name than the
    /// one it answers to now).
    public var knownAs: String?
}

/// Finding a receiver by the key it advertises rather than by its name: a device that was
/// renamed (avahi-daemon renames "Kitchen" to "Kitchen #2" when someone else claims the name
/// first) is still the device that was paired.
public enum ReceiverSearch {
    /// The receivers on the link whose advertised key starts with `prefix`, found within
    /// `seconds` (once one is found, the others answering with it are waited for a moment
    /// more): an impostor may advertise the key too (its TLS check then fails), so the caller
    /// tries each in turn.
    static func receivers(withKey prefix: String, within seconds: Double) async -> [ResolvedService] {
        let found = Locked<[ResolvedService]>([])
        await withTaskGroup(of: Void.self) { group in
            group.addTask {
                var tried = Set<DiscoveredService>()
                do {
                    for try await update in try ServiceBrowser(type: TransferLimits.serviceType) {
                        for service in update.services.sorted(by: { $0.name < $1.name })
                        where tried.insert(service).inserted {
                            guard let resolved = try? await service.resolve(timeout: 1, settle: 0.02),
                                let key = resolved.advertisedPublicKeySHA256(forTXTKey: "fp"), key.hasPrefix(prefix)
                            else { continue }
                            found.withLock { $0.append(resolved) }
                        }
                    }
                } catch {}
            }
            group.addTask {
                let deadline = ContinuousClock.now + .milliseconds(Int(seconds * 1000))
                var firstSeen: ContinuousClock.Instant?
                while ContinuousClock.now < deadline {
                    if firstSeen == nil, !found.value.isEmpty { firstSeen = .now }
                    if let firstSeen, ContinuousClock.now - firstSeen > .milliseconds(500) { break }
                    try? await Task.sleep(for: .milliseconds(50))
                }
            }
            await group.next()
            group.cancelAll()
        }
        return found.value
    }

    /// The names of the receivers seen on the link within `seconds` (their announcements are
    /// usually held by avahi-daemon already, so most come at once).
    public static func names(within seconds: Double) async -> Set<String> {
        let found = Locked(Set<String>())
        await withTaskGroup(of: Void.self) { group in
            group.addTask {
                do {
                    for try await update in try ServiceBrowser(type: TransferLimits.serviceType) {
                        found.withLock { $0.formUnion(update.services.map(\.name)) }
                    }
                } catch {}
            }
            group.addTask { try? await Task.sleep(for: .milliseconds(Int(seconds * 1000))) }
            await group.next()
            group.cancelAll()
        }
        return found.value
    }
}
