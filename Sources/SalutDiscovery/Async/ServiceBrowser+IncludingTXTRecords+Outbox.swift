import SalutStreams

extension ServiceBrowser.IncludingTXTRecords {
    /// The updates handed over but not yet taken by the consumer. An update with no changes
    /// (a record arrived or changed) folds into the last one waiting, whose records it replaces
    /// with its newer, complete set: a publisher that keeps changing its record cannot pile up
    /// updates in front of a slow consumer. Updates with changes are all kept, in order (a
    /// browser's own updates are).
    final class Outbox: Sendable {
        private struct State: Sendable {
            var waiting: [BrowseUpdate] = []
            var taker: CheckedContinuation<BrowseUpdate?, any Error>?
            /// Set once no more updates will come: nil for a plain end, or the error.
            var end: Result<Void, any Error>?
        }
        private let state = Locked(State())

        /// Hands `update` over (to a waiting consumer at once).
        func put(_ update: BrowseUpdate) {
            let taker = state.withLock { state -> CheckedContinuation<BrowseUpdate?, any Error>? in
                guard state.end == nil else { return nil }
                if let taker = state.taker {
                    state.taker = nil
                    return taker
                }
                if update.changes.isEmpty, let last = state.waiting.indices.last {
                    state.waiting[last].txtRecords = update.txtRecords
                } else {
                    state.waiting.append(update)
                }
                return nil
            }
            taker?.resume(returning: update)
        }

        /// No more updates: the consumer gets those waiting, then the end (or `error`).
        func finish(throwing error: (any Error)? = nil) {
            let taker = state.withLock { state -> CheckedContinuation<BrowseUpdate?, any Error>? in
                guard state.end == nil else { return nil }
                state.end = error.map { .failure($0) } ?? .success(())
                defer { state.taker = nil }
                return state.taker
            }
            if let error { taker?.resume(throwing: error) } else { taker?.resume(returning: nil) }
        }

        /// The next update; nil at the end or when the calling task is cancelled.
        /// - Throws: the browser's error, once those waiting are taken.
        func take() async throws -> BrowseUpdate? {
            try await withTaskCancellationHandler {
                try await withCheckedThrowingContinuation { continuation in
                    let now: Result<BrowseUpdate?, any Error>? = state.withLock { state in
                        if !state.waiting.isEmpty { return .success(state.waiting.removeFirst()) }
                        if let end = state.end { return end.map { _ -> BrowseUpdate? in nil } }
                        if Task.isCancelled { return .success(nil) }
                        state.taker = continuation
                        return nil
                    }
                    if let now { continuation.resume(with: now) }
                }
            } onCancel: {
                let taker = state.withLock { state in
                    defer { state.taker = nil }
                    return state.taker
                }
                taker?.resume(returning: nil)
            }
        }
    }

    /// Cancels the shell when the consumer's iterator goes (the loop ended or was left).
    final class Driver: Sendable {
        let task: Task<Void, Never>
        init(_ task: Task<Void, Never>) { self.task = task }
        deinit { task.cancel() }
    }

    /// Takes the updates one by one; leaving the loop stops the browser and every watch.
    public struct Iterator: AsyncIteratorProtocol {
        let outbox: Outbox
        let driver: Driver

        /// The next update; nil once the consumer's task is cancelled.
        /// - Throws: what the browser throws.
        public mutating func next() async throws -> BrowseUpdate? {
            try await outbox.take()
        }
    }
}
