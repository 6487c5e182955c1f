import SalutStreams

/// One turn at a time at something only one task may use at once (a terminal's question, the
/// tool's standard input and output): tasks get it in the order they asked. A task cancelled
/// while it waits stops waiting at once and is not given the turn.
package final class AsyncTurn: Sendable {
    /// One slot under one key: a line in the order the tasks asked.
    private let slots = AsyncSlots(limit: 1)

    package init() {}

    /// Waits for the turn: true once it is this task's (give it back with ``release()``), false
    /// when the task was cancelled first (no turn was taken: do not release one).
    package func take() async -> Bool { await slots.acquire("") }

    /// Gives the turn to the task that has waited longest, or frees it.
    package func release() { slots.release("") }

    /// How many tasks wait for the turn now.
    package var waitingCount: Int { slots.waitingCount(for: "") }
}
