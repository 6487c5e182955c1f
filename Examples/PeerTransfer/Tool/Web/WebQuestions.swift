import Foundation
import PeerTransferCore
import SalutStreams

/// Offers waiting for an answer on the web page (`serve --web` with `--accept ask`): the judge
/// puts each here and waits; the page lists them and answers one by its id.
final class WebQuestions: Sendable {
    /// What the page answered.
    enum Answer: String, Sendable {
        case yes, no, always
    }

    /// One offer waiting, as the page shows it.
    struct Pending: Sendable {
        let id: Int
        let offer: IncomingOffer
        /// When the question ends unanswered.
        let deadline: Date
    }

    private struct State {
        var nextID = 0
        var pending: [Int: (question: Pending, answered: CheckedContinuation<Answer?, Never>)] = [:]
    }
    private let state = Locked(State())

    /// The offers waiting, oldest first.
    var pending: [Pending] {
        state.withLock { $0.pending.values.map(\.question).sorted { $0.id < $1.id } }
    }

    /// Puts `offer` to the page and waits for its answer: nil when `seconds` pass first, or the
    /// calling task is cancelled (the sender left, the daemon stops).
    func ask(_ offer: IncomingOffer, within seconds: Double) async -> Answer? {
        let id = state.withLock { state -> Int in
            state.nextID += 1
            return state.nextID
        }
        let timer = Task {
            guard (try? await Task.sleep(for: .milliseconds(Int(seconds * 1000)))) != nil else { return }
            _ = end(id, with: nil)
        }
        defer { timer.cancel() }
        return await withTaskCancellationHandler {
            await withCheckedContinuation { (answered: CheckedContinuation<Answer?, Never>) in
                let cancelled = state.withLock { state -> Bool in
                    // (Cancelled before it was put: not put at all.)
                    if Task.isCancelled { return true }
                    state.pending[id] = (
                        Pending(id: id, offer: offer, deadline: Date().addingTimeInterval(seconds)), answered
                    )
                    return false
                }
                if cancelled { answered.resume(returning: nil) }
            }
        } onCancel: {
            _ = end(id, with: nil)
        }
    }

    /// Answers the offer `id`; false when no such offer waits (answered already, withdrawn, or
    /// never asked).
    @discardableResult
    func answer(_ id: Int, with answer: Answer) -> Bool {
        end(id, with: answer)
    }

    private func end(_ id: Int, with answer: Answer?) -> Bool {
        guard let waiting = state.withLock({ $0.pending.removeValue(forKey: id) }) else { return false }
        waiting.answered.resume(returning: answer)
        return true
    }
}
