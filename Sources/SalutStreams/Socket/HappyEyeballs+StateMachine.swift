extension HappyEyeballs {
    /// The decisions of Happy Eyeballs (RFC 8305), without sockets or timers: which address to try
    /// next and when, which attempt won, and what to report when none did.
    ///
    /// Addresses are interleaved by family starting with IPv6; a new attempt starts when the pacing
    /// delay passes or as soon as the previous one fails, while earlier ones continue; the first to
    /// connect wins and the others are closed. Every failed attempt's error is kept, and reported
    /// together when all have failed. The shell (``HappyEyeballs``) performs the actions and reports
    /// what happened as events; time enters only as durations in `schedulePacer`/`startDeadline`,
    /// so a test drives the machine with a clock of its own.
    struct StateMachine {
        /// Names one connection attempt (the shell maps it to its socket).
        struct AttemptID: Hashable, Comparable, CustomStringConvertible {
            let value: Int
            static func < (a: Self, b: Self) -> Bool { a.value < b.value }
            var description: String { "#\(value)" }
        }

        enum State: Equatable {
            case idle
            /// Attempts in flight, addresses left, whether a pacing timer is armed.
            case connecting(inFlight: [AttemptID: SocketAddress], remaining: [SocketAddress], pacerArmed: Bool)
            case finished
        }

        enum Action: Equatable {
            /// Arm the overall deadline.
            case startDeadline(Duration)
            /// Open a socket and start connecting it to the address; report `attemptConnected` or
            /// `attemptFailed`.
            case beginAttempt(AttemptID, SocketAddress)
            /// Arm (or re-arm) the pacing timer; report `pacerFired`.
            case schedulePacer(Duration)
            /// Close an attempt that lost (or was given up).
            case abandonAttempt(AttemptID)
            /// This attempt's socket is connected: hand it over, and stop every timer.
            case succeed(AttemptID)
            /// No attempt connected: report the error, and stop every timer.
            case fail(SocketStreamError)
        }

        /// How errors name the destination.
        let target: ConnectTarget
        let attemptDelay: Duration
        let timeout: Duration
        private(set) var state: State = .idle
        /// Each failed attempt's address and error, in the order they failed.
        private(set) var failures: [(address: SocketAddress, error: SocketStreamError)] = []
        private var nextID = 0
        private let addresses: [SocketAddress]

        init(
            addresses: [SocketAddress], target: ConnectTarget, attemptDelay: Duration = .milliseconds(250),
            timeout: Duration = .seconds(30)
        ) {
            self.addresses = Self.interleave(addresses)
            self.target = target
            self.attemptDelay = attemptDelay
            self.timeout = timeout
        }

        /// IPv6 first, then alternating families (RFC 8305 §4).
        static func interleave(_ addresses: [SocketAddress]) -> [SocketAddress] {
            var v6 = addresses.filter(\.isIPv6)[...], v4 = addresses.filter { !$0.isIPv6 }[...]
            var out: [SocketAddress] = []
            while !v6.isEmpty || !v4.isEmpty {
                if let a = v6.popFirst() { out.append(a) }
                if let a = v4.popFirst() { out.append(a) }
            }
            return out
        }

        // MARK: Events

        mutating func start() -> [Action] {
            guard state == .idle else {
                // Cancelled before it started: nothing to do. Started twice: a bug.
                assert(state == .finished, "HappyEyeballs.StateMachine: start in \(state)")
                return []
            }
            guard !addresses.isEmpty else {
                state = .finished
                return [.fail(.unreachable(target.description))]
            }
            state = .connecting(inFlight: [:], remaining: addresses, pacerArmed: false)
            return [.startDeadline(timeout)] + beginNext()
        }

        /// The pacing delay passed with the last attempt still pending: start the next one.
        mutating func pacerFired() -> [Action] {
            // Late: the pacer fired as connecting ended, or after an attempt's end re-paced it.
            guard case .connecting(let inFlight, let remaining, true) = state else { return [] }
            state = .connecting(inFlight: inFlight, remaining: remaining, pacerArmed: false)
            return beginNext()
        }

        mutating func attemptConnected(_ id: AttemptID) -> [Action] {
            guard case .connecting(var inFlight, _, _) = state, inFlight.removeValue(forKey: id) != nil else {
                return [.abandonAttempt(id)]  // late: someone else won, or it was given up
            }
            state = .finished
            return inFlight.keys.sorted().map(Action.abandonAttempt) + [.succeed(id)]
        }

        /// An attempt failed (refused, unreachable, or its socket could not be made): start the next
        /// at once, or fail when nothing is left.
        mutating func attemptFailed(_ id: AttemptID, _ error: SocketStreamError) -> [Action] {
            // late: it finished meanwhile
            guard case .connecting(var inFlight, let remaining, _) = state else { return [] }
            guard let address = inFlight.removeValue(forKey: id) else {
                // Each attempt reports once, and none is given up while connecting goes on.
                assertionFailure("HappyEyeballs.StateMachine: attempt \(id) failed twice or was never begun")
                return []
            }
            failures.append((address, error))
            state = .connecting(inFlight: inFlight, remaining: remaining, pacerArmed: false)
            if !remaining.isEmpty { return beginNext() }
            guard inFlight.isEmpty else { return [] }  // the ones still in flight decide
            state = .finished
            return [.fail(combinedError)]
        }

        /// The overall deadline passed.
        mutating func deadlineReached() -> [Action] {
            // Late: connecting ended (connected, failed or cancelled) as the deadline passed.
            guard case .connecting(let inFlight, _, _) = state else { return [] }
            state = .finished
            var error = SocketStreamError.timedOut(target.description)
            if !failures.isEmpty { error = .timedOut("\(target) (\(failureList))") }
            return inFlight.keys.sorted().map(Action.abandonAttempt) + [.fail(error)]
        }

        /// The user gave up.
        mutating func cancelled() -> [Action] {
            guard case .connecting(let inFlight, _, _) = state else {
                if state == .idle { state = .finished; return [.fail(.cancelled)] }
                return []  // late: connecting already ended
            }
            state = .finished
            return inFlight.keys.sorted().map(Action.abandonAttempt) + [.fail(.cancelled)]
        }

        // MARK: Helpers

        private mutating func beginNext() -> [Action] {
            guard case .connecting(var inFlight, var remaining, _) = state, !remaining.isEmpty else { return [] }
            let address = remaining.removeFirst()
            let id = AttemptID(value: nextID)
            nextID += 1
            inFlight[id] = address
            state = .connecting(inFlight: inFlight, remaining: remaining, pacerArmed: !remaining.isEmpty)
            var actions: [Action] = [.beginAttempt(id, address)]
            if !remaining.isEmpty { actions.append(.schedulePacer(attemptDelay)) }
            return actions
        }

        /// `address: error; address: error` for every failed attempt.
        private var failureList: String {
            failures.map { "\($0.address): \($0.error)" }.joined(separator: "; ")
        }

        /// One error for all failed attempts: the only one when there was one; otherwise the kind
        /// that says most (refused, then unreachable, then timed out, then the last), naming every
        /// attempt and what happened to it.
        var combinedError: SocketStreamError {
            guard failures.count > 1 else { return failures.first?.error ?? .unreachable(target.description) }
            let detail = "\(target) (\(failureList))"
            let errors = failures.map(\.error)
            if errors.contains(where: { $0.code == .connectionRefused }) { return .connectionRefused(detail) }
            if errors.contains(where: { $0.code == .unreachable }) { return .unreachable(detail) }
            if errors.contains(where: { $0.code == .timedOut }) { return .timedOut(detail) }
            return errors.last!
        }
    }
}

/// Where a connection goes, as errors name it: `host:port`, an IPv6 literal in brackets, or the
/// host alone when the resolver supplied the port (port 0). Built into text only when an error
/// needs it: connecting that succeeds never pays for the string.
struct ConnectTarget: CustomStringConvertible, ExpressibleByStringLiteral, Sendable {
    let host: String
    let port: Int

    init(host: String, port: Int) {
        self.host = host
        self.port = port
    }

    /// A name used as it is (tests).
    init(stringLiteral value: String) {
        self.init(host: value, port: 0)
    }

    var description: String {
        guard port != 0 else { return host }
        let colon = host.utf8.contains(UInt8(ascii: ":")) && host.utf8.first != UInt8(ascii: "[")
        return colon ? "[\(host)]:\(port)" : "\(host):\(port)"
    }
}
