/// A turn at the terminal: one question at a time. A task cancelled while it waits for its
/// turn stops waiting at once (its offer's sender left, or the daemon stops), and is not given
/// the turn; it must not `release` one it did not get.
actor AsyncTurn {
    private var busy = false
    private var waiting: [(id: Int, resume: CheckedContinuation<Bool, Never>)] = []
    private var nextID = 0

    /// Waits for the turn; false when cancelled first (no turn was taken).
    func take() async -> Bool {
        if !busy { busy = true; return true }
        nextID += 1
        let id = nextID
        return await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                if Task.isCancelled {
                    continuation.resume(returning: false)
                } else {
                    waiting.append((id, continuation))
                }
            }
        } onCancel: {
            Task { await self.withdraw(id) }
        }
    }

    /// Gives the turn to the next waiter, or frees it.
    func release() {
        if waiting.isEmpty { busy = false } else { waiting.removeFirst().resume.resume(returning: true) }
    }

    private func withdraw(_ id: Int) {
        guard let index = waiting.firstIndex(where: { $0.id == id }) else { return }
        waiting.remove(at: index).resume.resume(returning: false)
    }
}
