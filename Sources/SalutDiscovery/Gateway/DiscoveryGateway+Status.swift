import Foundation
import SalutStreams

extension DiscoveryGateway {
    /// Where a running gateway stands: how much of the link is in the zone, what it announces
    /// from the other links, and the last thing that went wrong. Reported
    /// (``Report/status(_:)``) when it changed, at most once a second.
    public struct Status: Sendable, Equatable {
        /// The domain this link's services go under (`lab-a.home.arpa`).
        public var labelDomain: String
        /// How many of this label's services the zone holds now, as far as the gateway knows
        /// (what it read at the start, then what it wrote and removed).
        public var mirrored: Int
        /// How many services of the link wait for a place (over
        /// ``Configuration/maximumServices``).
        public var waiting: Int
        /// With ``Configuration/announceRemote``: how many services each other label has
        /// announced on this link, by label.
        public var announced: [String: Int]
        /// Whether an update or a read of the zone failed and waits to be tried again: the
        /// zone is behind the link until it succeeds.
        public var retrying: Bool
        /// Why the last update or read of the zone failed; nil while nothing failed.
        public var lastError: String?
        /// When ``lastError`` happened.
        public var lastErrorDate: Date?

        /// A status with nothing mirrored, announced or failed yet.
        public init(labelDomain: String) {
            self.labelDomain = labelDomain
            mirrored = 0
            waiting = 0
            announced = [:]
            retrying = false
        }
    }

    /// The gateway's status, kept from what its parts report and said when it changed: at
    /// most once an `interval`, the latest status then (a burst of 500 writes is one report).
    final class StatusBoard: Sendable {
        private struct State {
            var status: Status
            var said: Status?
            /// The services announced from each other label (a TXT change is announced again).
            var announced: [String: Set<ServiceKey>] = [:]
            /// The report waiting for its interval to end.
            var scheduled: Task<Void, Never>?
            var finished = false
        }
        // (Locked: changed from the gateway's loop and from the announcer's task.)
        private let state: Locked<State>
        private let interval: Duration
        private let reports: @Sendable (Report) -> Void

        init(labelDomain: String, interval: Duration = .seconds(1), reports: @escaping @Sendable (Report) -> Void) {
            state = Locked(State(status: Status(labelDomain: labelDomain)))
            self.interval = interval
            self.reports = reports
        }

        /// What the status is now.
        var status: Status { state.withLock { $0.status } }

        /// Takes in what a part of the gateway reported (a retry is the last error; an
        /// announcement counts for its label).
        func observe(_ report: Report) {
            switch report {
            case .retrying(let reason, _):
                change {
                    $0.status.lastError = reason
                    $0.status.lastErrorDate = Date()
                }
            case .announced(let key, let label, _):
                change {
                    $0.announced[label, default: []].insert(key)
                    $0.status.announced = $0.announced.mapValues(\.count)
                }
            case .unannounced(let key, let label):
                change {
                    $0.announced[label]?.remove(key)
                    if $0.announced[label]?.isEmpty == true { $0.announced[label] = nil }
                    $0.status.announced = $0.announced.mapValues(\.count)
                }
            default:
                break
            }
        }

        /// Takes in where the state machine stands.
        func observe(mirrored: Int, waiting: Int, retrying: Bool) {
            change {
                $0.status.mirrored = mirrored
                $0.status.waiting = waiting
                $0.status.retrying = retrying
            }
        }

        /// Says nothing more (a report waiting for its interval is dropped).
        func finish() {
            state.withLock { state -> Task<Void, Never>? in
                state.finished = true
                return state.scheduled
            }?.cancel()
        }

        private func change(_ body: (inout State) -> Void) {
            state.withLock { state in
                body(&state)
                guard !state.finished, state.scheduled == nil, state.status != state.said else { return }
                state.scheduled = Task { [weak self, interval] in
                    try? await Task.sleep(for: interval)
                    guard !Task.isCancelled else { return }
                    self?.sayIt()
                }
            }
        }

        private func sayIt() {
            let status = state.withLock { state -> Status? in
                state.scheduled = nil
                guard !state.finished, state.status != state.said else { return nil }
                state.said = state.status
                return state.status
            }
            if let status { reports(.status(status)) }
        }
    }
}
