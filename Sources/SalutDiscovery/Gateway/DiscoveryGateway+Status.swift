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
        /// ``Configuration/maximumServices``); at most four times that many are counted (more
        /// are ignored until some leave).
        public var waiting: Int
        /// With ``Configuration/announceRemote``: how many services each other label has
        /// announced on this link, by label.
        public var announced: [String: Int]
        /// Whether an update failed and has not gone through since (it waits to be tried
        /// again, or is being tried), or the zone could not be read at the start yet: the zone
        /// is behind the link until it goes through.
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
            /// Whether the zone was read (until then, a failed read is the zone being behind).
            var listed = false
            var listingFailed = false
        }
        // (Held while a status is reported, and by `finish()`: no report after it, none out of
        // order.)
        private let reporting = Locked(())
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
                    if !$0.listed {
                        $0.listingFailed = true
                        $0.status.retrying = true
                    }
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

        /// Takes in where the state machine stands: its counts, whether an update has not gone
        /// through since it failed (`behind`), whether the zone was read (`listed`).
        func observe(mirrored: Int, waiting: Int, behind: Bool, listed: Bool) {
            change {
                $0.listed = listed
                $0.status.mirrored = mirrored
                $0.status.waiting = waiting
                $0.status.retrying = behind || (!listed && $0.listingFailed)
            }
        }

        /// Says nothing more (a report waiting for its interval is dropped; one being made ends
        /// first).
        func finish() {
            reporting.withLock { _ in
                state.withLock { state -> Task<Void, Never>? in
                    state.finished = true
                    return state.scheduled
                }?.cancel()
            }
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
            reporting.withLock { _ in
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
}
