/// A few slots for each key, for tasks that must not all use a thing at once: a session's
/// connections to one host, a terminal's one question at a time. Tasks that wait go in priority
/// order, then first come, first served; a task cancelled while it waits leaves the line at
/// once and is never given a slot.
///
/// Concurrency: the counts and the lines are guarded by one `Locked` state; continuations are
/// resumed after the lock is let go.
package final class AsyncSlots: Sendable {
    private struct Waiter {
        var priority: Float
        var order: UInt64
        var continuation: CheckedContinuation<Bool, Never>
    }

    private struct State {
        var open: [String: Int] = [:]
        var waiting: [String: [Waiter]] = [:]
        var counter: UInt64 = 0
    }

    private let limit: Int
    private let state = Locked(State())

    /// Slots for `limit` tasks at a time for each key (at least 1).
    package init(limit: Int) { self.limit = max(1, limit) }

    /// Waits for a free slot for `host`: true once the slot is the caller's (give it back with
    /// ``release(_:)``), false when the calling task was cancelled first (nothing to release).
    package func acquire(_ host: String, priority: Float = 0) async -> Bool {
        let order = state.withLock { state -> UInt64 in
            state.counter += 1
            return state.counter
        }
        return await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                // Deciding and joining the line under one lock: a release between them cannot
                // be missed, and a cancellation before it is seen here.
                let answer = state.withLock { state -> Bool? in
                    if Task.isCancelled { return false }
                    if state.open[host, default: 0] < limit {
                        state.open[host, default: 0] += 1
                        return true
                    }
                    state.waiting[host, default: []].append(
                        Waiter(priority: priority, order: order, continuation: continuation))
                    return nil
                }
                if let answer { continuation.resume(returning: answer) }
            }
        } onCancel: {
            withdraw(host, order: order)
        }
    }

    /// How many tasks wait for a slot for `host`.
    package func waitingCount(for host: String) -> Int { state.withLock { $0.waiting[host]?.count ?? 0 } }

    /// Frees a slot for `host`: it passes to the best waiting task, if any.
    package func release(_ host: String) {
        let next = state.withLock { state -> CheckedContinuation<Bool, Never>? in
            guard var line = state.waiting[host], !line.isEmpty else {
                assert(state.open[host, default: 0] > 0, "a slot of \(host) released that was not taken")
                state.open[host, default: 1] -= 1
                if state.open[host] == 0 { state.open[host] = nil }
                return nil
            }
            let best = line.indices.max { a, b in
                line[a].priority != line[b].priority
                    ? line[a].priority < line[b].priority : line[a].order > line[b].order
            }!
            let next = line.remove(at: best)
            state.waiting[host] = line.isEmpty ? nil : line
            return next.continuation  // the slot passes to it; `open` is unchanged
        }
        next?.resume(returning: true)
    }

    /// A waiting task was cancelled: it leaves the line without a slot.
    private func withdraw(_ host: String, order: UInt64) {
        let withdrawn = state.withLock { state -> CheckedContinuation<Bool, Never>? in
            guard var line = state.waiting[host], let index = line.firstIndex(where: { $0.order == order }) else {
                return nil
            }
            let waiter = line.remove(at: index)
            state.waiting[host] = line.isEmpty ? nil : line
            return waiter.continuation
        }
        withdrawn?.resume(returning: false)
    }
}
