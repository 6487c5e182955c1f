import Foundation

extension PeerUploadTask {
    /// One background upload's life, as a state machine: wait until the service is visible,
    /// transfer, and on a failure that may pass wait and try again, until it succeeds, the retries
    /// run out, the give-up deadline passes, or the task is cancelled. Each event returns the
    /// actions the runner performs; time is passed in, so tests drive it on a fake clock.
    struct StateMachine: Sendable {
        /// What the runner does.
        enum Action: Equatable, Sendable {
            /// Write the task's record (its phase and attempt count changed).
            case persist
            /// Watch discovery until the service is visible (or the deadline passes).
            case waitForService(until: Date)
            /// Ask the delegate for a fresh body stream (a stream cannot be rewound).
            case requestNewBodyStream
            /// Run transfer attempt number `attempt` (1 for the first).
            case startAttempt(Int)
            /// Wait until `until`, then call ``retryDelayEnded(now:)``.
            case sleep(until: Date)
            /// Complete the task with this error (nil: success).
            case complete(Failure?)
        }

        /// Why a task ended without success.
        enum Failure: Equatable, Sendable {
            case cancelled
            case deadline
            case noBodyStream
            case failed(String, attempts: Int, retryable: Bool)
        }

        /// Where the task is.
        enum Phase: Equatable, Sendable {
            case notStarted
            case waitingForService(attempt: Int)
            case awaitingBodyStream(attempt: Int)
            case transferring(attempt: Int)
            case waitingToRetry(attempt: Int, until: Date)
            case finished
        }

        private(set) var phase: Phase
        /// Attempts made so far.
        private(set) var attempts: Int
        let maximumAttempts: Int
        let deadline: Date
        let retryDelay: TimeInterval
        let maximumRetryDelay: TimeInterval
        /// The body is a stream that an earlier attempt (or an earlier process) consumed.
        let bodyIsStream: Bool
        private var hasFreshStream: Bool

        /// - Parameters:
        ///   - attempts: attempts made before (by an earlier process, for a reloaded task).
        ///   - hasFreshStream: a stream body the app gave at creation that no attempt has read.
        init(
            attempts: Int = 0, maximumAttempts: Int, deadline: Date, retryDelay: TimeInterval,
            maximumRetryDelay: TimeInterval,
            bodyIsStream: Bool, hasFreshStream: Bool
        ) {
            phase = .notStarted
            self.attempts = attempts
            self.maximumAttempts = max(1, maximumAttempts)
            self.deadline = deadline
            self.retryDelay = retryDelay
            self.maximumRetryDelay = maximumRetryDelay
            self.bodyIsStream = bodyIsStream
            self.hasFreshStream = hasFreshStream
        }

        var isFinished: Bool { phase == .finished }

        // MARK: Events

        mutating func start(now: Date) -> [Action] {
            guard phase == .notStarted else { return impossible("start") }
            if now >= deadline { return finish(.deadline) }
            // Every attempt already made (a runner that died during its last one, restarted):
            // another would pass the limit, and a crash that repeats must not loop for ever.
            if attempts >= maximumAttempts {
                return finish(
                    .failed(
                        "the process running it ended during attempt \(attempts), the last one allowed",
                        attempts: attempts, retryable: true))
            }
            phase = .waitingForService(attempt: attempts + 1)
            return [.persist, .waitForService(until: deadline)]
        }

        /// Discovery sees the service. It may say so again in any phase (discovery runs on its
        /// own): outside a wait for the service, that is a late event and does nothing.
        mutating func serviceVisible(now: Date) -> [Action] {
            guard case .waitingForService(let attempt) = phase else { return [] }
            if now >= deadline { return finish(.deadline) }
            if bodyIsStream && !hasFreshStream {
                phase = .awaitingBodyStream(attempt: attempt)
                return [.requestNewBodyStream]
            }
            return begin(attempt)
        }

        /// The delegate answered the request for a new body stream.
        mutating func bodyStreamProvided(_ provided: Bool) -> [Action] {
            guard case .awaitingBodyStream(let attempt) = phase else { return late("bodyStreamProvided") }
            guard provided else { return finish(.noBodyStream) }
            hasFreshStream = true
            return begin(attempt)
        }

        mutating func attemptSucceeded() -> [Action] {
            guard case .transferring = phase else { return late("attemptSucceeded") }
            return finish(nil)
        }

        /// The attempt failed; `retryable` when the error may pass (a lost connection, a peer
        /// that vanished), false when trying again cannot help (refused, untrusted).
        mutating func attemptFailed(_ reason: String, retryable: Bool, now: Date) -> [Action] {
            guard case .transferring(let attempt) = phase else { return late("attemptFailed") }
            guard retryable, attempt < maximumAttempts else {
                return finish(.failed(reason, attempts: attempt, retryable: retryable))
            }
            let delay = min(maximumRetryDelay, retryDelay * pow(2, Double(attempt - 1)))
            let until = now.addingTimeInterval(delay)
            guard until < deadline else { return finish(.deadline) }
            phase = .waitingToRetry(attempt: attempt, until: until)
            return [.persist, .sleep(until: until)]
        }

        mutating func retryDelayEnded(now: Date) -> [Action] {
            guard case .waitingToRetry(let attempt, _) = phase else { return late("retryDelayEnded") }
            if now >= deadline { return finish(.deadline) }
            phase = .waitingForService(attempt: attempt + 1)
            return [.persist, .waitForService(until: deadline)]
        }

        /// The give-up deadline passed while waiting. Late after the task finished (the
        /// deadline's timer and the task's end race): no action.
        mutating func deadlinePassed() -> [Action] {
            guard !isFinished, phase != .notStarted else { return phase == .notStarted ? finish(.deadline) : [] }
            return finish(.deadline)
        }

        /// The task was cancelled. Late after it finished (a cancellation may come from any
        /// thread as the task ends): no action.
        mutating func cancelled() -> [Action] {
            guard !isFinished else { return [] }
            return finish(.cancelled)
        }

        // MARK: Internals

        /// An answer to something the machine asked for (an attempt, a body stream, a sleep),
        /// arriving after it finished: the task was cancelled or its deadline passed meanwhile,
        /// and the answer does nothing. In any other phase it cannot happen (the machine asks
        /// for one thing at a time): a bug, stopped in debug builds.
        private func late(_ event: String) -> [Action] {
            assert(phase == .finished, "PeerUploadTask.StateMachine: \(event) in \(phase)")
            return []
        }

        /// An event that cannot happen in this phase: a bug, stopped in debug builds.
        private func impossible(_ event: String) -> [Action] {
            assertionFailure("PeerUploadTask.StateMachine: \(event) in \(phase)")
            return []
        }

        private mutating func begin(_ attempt: Int) -> [Action] {
            attempts = attempt
            if bodyIsStream { hasFreshStream = false }  // this attempt consumes it
            phase = .transferring(attempt: attempt)
            return [.persist, .startAttempt(attempt)]
        }

        private mutating func finish(_ failure: Failure?) -> [Action] {
            phase = .finished
            return [.persist, .complete(failure)]
        }
    }
}
