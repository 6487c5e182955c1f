import SalutStreams

/// One turn at a time at something only one task may use at once (a terminal's question, the
/// tool's standard input and output): tasks get it in the order they asked. A task cancelled
/// while it waits stops waiting at once and is not given the turn.
package final class AsyncTurn: Sendable {
    private struct State: Sendable {
        var busy = false
        var waiting: [(id: UInt64, resume: CheckedContinuation<Bool, Never>)] = []
        var nextID: UInt64 = 0
    }

    private let state = Locked(State())

    package init() {}

    /// Waits for the turn: true once it is this task's (give it back with ``release()``), false
    /// when the task was cancelled first (no turn was taken: do not release one).
    package func take() async -> Bool {
        let id = state.withLock { state -> UInt64 in
            state.nextID += 1
            return state.nextID
        }
        return await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                // Deciding and queueing under one lock: a release between them cannot be missed.
                let answer = state.withLock { state -> Bool? in
                    if Task.isCancelled { return false }
                    if !state.busy {
                        state.busy = true
                        return true
                    }
                    state.waiting.append((id, continuation))
                    return nil
                }
                if let answer { continuation.resume(returning: answer) }
            }
        } onCancel: {
            withdraw(id)
        }
    }

    /// Gives the turn to the task that has waited longest, or frees it.
    package func release() {
        let next = state.withLock { state -> CheckedContinuation<Bool, Never>? in
            if state.waiting.isEmpty {
                state.busy = false
                return nil
            }
            return state.waiting.removeFirst().resume
        }
        next?.resume(returning: true)
    }

    /// How many tasks wait for the turn now.
    package var waitingCount: Int { state.withLock { $0.waiting.count } }

    /// A waiter cancelled: it stops waiting, without the turn.
    private func withdraw(_ id: UInt64) {
        let withdrawn = state.withLock { state -> CheckedContinuation<Bool, Never>? in
            guard let index = state.waiting.firstIndex(where: { $0.id == id }) else { return nil }
            return state.waiting.remove(at: index).resume
        }
        withdrawn?.resume(returning: false)
    }
}
