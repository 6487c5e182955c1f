import Foundation
import SalutStreams

/// Counts of connections refused or cut before they offered anything, logged as one line per
/// interval instead of one line each: under a flood, the log must not become the attack.
final class RefusalTally: Sendable {
    private struct Counts {
        var endedBeforeOffer = 0
        var evicted = 0
        var busy = 0
        var busyAtShare = 0
        /// The limits those refusals met (the last seen; one service's limits do not change).
        var slots = 0
        var share = 0
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

    /// A sender was refused as busy, for the reason given.
    func busy(_ why: ReceiverService.AdmissionStateMachine.Busy) {
        counts.withLock {
            switch why {
            case .everySlotTaken(let limit):
                $0.busy += 1
                $0.slots = limit
            case .sourceAtItsShare(let limit):
                $0.busyAtShare += 1
                $0.share = limit
            }
        }
    }

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
            parts.append("\(Wording.counted(taken.busy, "sender")) refused: all \(taken.slots) transfer slots busy")
        }
        if taken.busyAtShare > 0 {
            parts.append(
                "\(Wording.counted(taken.busyAtShare, "sender")) refused: their address already ran \(taken.share) transfers, the most one address may"
            )
        }
        guard !parts.isEmpty else { return nil }
        return (
            "in the last \(interval.components.seconds) s: " + parts.joined(separator: "; "),
            taken.endedBeforeOffer + taken.evicted + taken.busy + taken.busyAtShare
        )
    }
}
