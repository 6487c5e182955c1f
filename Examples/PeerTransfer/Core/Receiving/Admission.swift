import Foundation
import SalutStreams

/// Who may hold what at a receiver, as a state machine without I/O (the daemon's shell in
/// ``ReceiverService`` carries out its actions).
///
/// A connection that has not yet identified itself (TLS under way or done, its hello not yet
/// judged) holds only a *greeting place*; a sender takes one of the few *transfer slots* only
/// once its hello carries a key the policy admits. Greeting places are bounded in all and per
/// source address: when a source is at its share, its own oldest greeting connection makes room
/// (a flood from one address evicts only itself); when all places are taken, the oldest
/// connection of the source holding the most goes. So idle or silent connections can never take
/// the slots that transfers need, as OpenSSH's MaxStartups and nginx's limit_conn intend.
struct Admission {
    /// The bounds.
    struct Limits: Equatable {
        /// Transfers at once.
        var transfers = TransferLimits.maximumConcurrentTransfers
        /// Transfers at once from one source address: one address (under `--accept all` or
        /// `ask`, any key passes the hello) cannot take every slot.
        var transfersPerSource = TransferLimits.maximumConcurrentTransfers / 2
        /// Connections greeting at once, from all sources.
        var greeting = 32
        /// Connections greeting at once from one source address.
        var greetingPerSource = 8
    }

    /// What the shell must do.
    enum Action: Equatable {
        /// Close this greeting connection to make room for a newer one.
        case evict(Int)
        /// This connection's sender may transfer: it holds a slot until it ends.
        case admit(Int)
        /// Every slot is taken: tell this sender the receiver is busy, and end it.
        case refuseBusy(Int)
    }

    private struct Greeting {
        var id: Int
        var source: String
    }

    let limits: Limits
    /// Greeting connections, oldest first.
    private var greeting: [Greeting] = []
    /// Connections holding a transfer slot, with their source.
    private var slots: [Int: String] = [:]
    /// Connections holding a transfer slot.
    var transferring: Set<Int> { Set(slots.keys) }

    init(limits: Limits = Limits()) {
        self.limits = limits
    }

    /// Connections greeting now.
    var greetingCount: Int { greeting.count }

    /// A connection `id` from `source` was accepted: it greets; room is made if needed.
    mutating func arrived(_ id: Int, from source: String) -> [Action] {
        assert(!greeting.contains { $0.id == id } && slots[id] == nil, "connection \(id) arrived twice")
        var actions: [Action] = []
        let fromSource = greeting.filter { $0.source == source }
        if fromSource.count >= max(1, limits.greetingPerSource), let oldest = fromSource.first {
            greeting.removeAll { $0.id == oldest.id }
            actions.append(.evict(oldest.id))
        } else if greeting.count >= max(1, limits.greeting) {
            // The source that holds the most places gives up its oldest.
            let counts = Dictionary(grouping: greeting, by: \.source).mapValues(\.count)
            let busiest = greeting.max { counts[$0.source, default: 0] < counts[$1.source, default: 0] }!.source
            let oldest = greeting.first { $0.source == busiest }!
            greeting.removeAll { $0.id == oldest.id }
            actions.append(.evict(oldest.id))
        }
        greeting.append(Greeting(id: id, source: source))
        return actions
    }

    /// The hello of connection `id` passed the policy: it takes a slot, or is refused as busy.
    /// A connection no longer greeting (evicted meanwhile, a late event) gets no action.
    mutating func identified(_ id: Int) -> [Action] {
        guard let greeter = greeting.first(where: { $0.id == id }) else { return [] }
        greeting.removeAll { $0.id == id }
        let fromSource = slots.values.count { $0 == greeter.source }
        guard slots.count < limits.transfers, fromSource < max(1, limits.transfersPerSource) else {
            return [.refuseBusy(id)]
        }
        slots[id] = greeter.source
        return [.admit(id)]
    }

    /// Connection `id` ended (whatever stage it was in): its place or slot is free.
    mutating func ended(_ id: Int) {
        greeting.removeAll { $0.id == id }
        slots[id] = nil
    }
}

/// Counts of connections refused or cut before they offered anything, logged as one line per
/// interval instead of one line each: under a flood, the log must not become the attack.
final class RefusalTally: Sendable {
    private struct Counts {
        var endedBeforeOffer = 0
        var evicted = 0
        var busy = 0
        var lastCause = ""
    }
    private let counts = Locked(Counts())

    /// A connection ended before it offered anything, because of `cause`.
    func endedBeforeOffer(_ cause: String) {
        counts.withLock {
            $0.endedBeforeOffer += 1
            $0.lastCause = cause
        }
    }

    /// A greeting connection was closed to make room.
    func evicted() { counts.withLock { $0.evicted += 1 } }

    /// A sender was refused because every slot was taken.
    func busy() { counts.withLock { $0.busy += 1 } }

    /// The line for what was counted since the last call, with how many connections it
    /// counts (nil when nothing was), and a fresh count.
    func drain(over interval: Duration) -> (line: String, count: Int)? {
        let taken = counts.withLock { current -> Counts in
            defer { current = Counts() }
            return current
        }
        var parts: [String] = []
        if taken.endedBeforeOffer > 0 {
            parts.append(
                "\(Wording.counted(taken.endedBeforeOffer, "connection")) ended before any offer (the last: \(taken.lastCause))"
            )
        }
        if taken.evicted > 0 {
            parts.append(
                "\(Wording.counted(taken.evicted, "connection")) still greeting closed to make room for newer ones")
        }
        if taken.busy > 0 {
            parts.append(
                "\(Wording.counted(taken.busy, "sender")) refused: all \(TransferLimits.maximumConcurrentTransfers) transfer slots busy"
            )
        }
        guard !parts.isEmpty else { return nil }
        return (
            "in the last \(interval.components.seconds) s: " + parts.joined(separator: "; "),
            taken.endedBeforeOffer + taken.evicted + taken.busy
        )
    }
}
