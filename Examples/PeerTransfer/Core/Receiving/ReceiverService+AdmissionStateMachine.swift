import Foundation
import SalutStreams

extension ReceiverService {
    /// Who may hold what at a receiver, as a state machine without I/O (the daemon's shell in
    /// ``ReceiverService/run()`` carries out its actions).
    ///
    /// A connection that has not yet identified itself (TLS under way or done, its hello not yet
    /// judged) holds only a *greeting place*; a sender takes one of the few *transfer slots* only
    /// once its hello carries a key the policy admits. Greeting places are bounded in all and per
    /// source address: when a source is at its share, its own oldest greeting connection makes room
    /// (a flood from one address evicts only itself); when all places are taken, the oldest
    /// connection of the source holding the most goes. So idle or silent connections can never take
    /// the slots that transfers need, as OpenSSH's MaxStartups and nginx's limit_conn intend.
    struct AdmissionStateMachine {
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

        /// Why a sender was refused as busy.
        enum Busy: Equatable, Sendable {
            /// Every one of the `limit` transfer slots is taken.
            case everySlotTaken(limit: Int)
            /// Its source address runs `limit` transfers already, the most one address may.
            case sourceAtItsShare(limit: Int)
        }

        /// What the shell must do.
        enum Action: Equatable {
            /// Close this greeting connection to make room for a newer one.
            case evict(Int)
            /// This connection's sender may transfer: it holds a slot until it ends.
            case admit(Int)
            /// No slot for this sender, for the reason given: tell it the receiver is busy, and
            /// end it.
            case refuseBusy(Int, Busy)
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
            guard slots.count < limits.transfers else {
                return [.refuseBusy(id, .everySlotTaken(limit: limits.transfers))]
            }
            guard fromSource < max(1, limits.transfersPerSource) else {
                return [.refuseBusy(id, .sourceAtItsShare(limit: max(1, limits.transfersPerSource)))]
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
}
