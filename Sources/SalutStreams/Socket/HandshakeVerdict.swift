/// A trust evaluator's verdict on one peer, asked during the TLS handshake (from the verify
/// callback) and read once the handshake is done: an evaluator that answers at once refuses
/// the peer inside the handshake (it hears an alert); one that answers later still decides,
/// at the handshake's end, from its one answer. The first answer counts.
final class HandshakeVerdict: Sendable {
    private enum State {
        case notAsked
        /// Asked; the handler to tell once the answer comes, when the handshake is done first.
        case waiting((@Sendable (Bool) -> Void)?)
        case answered(Bool)
    }
    private let state = Locked<State>(.notAsked)

    /// Asks `evaluator` about `trust`; the answer when it came before `evaluator` returned.
    func ask(_ evaluator: TLSTrustEvaluator, about trust: TLSPeerTrust) -> Bool? {
        state.withLock { $0 = .waiting(nil) }
        evaluator(trust) { [state] accepted in
            let handler = state.withLock { state -> (@Sendable (Bool) -> Void)?? in
                guard case .waiting(let handler) = state else { return nil }  // (answered already)
                state = .answered(accepted)
                return .some(handler)
            }
            if case .some(.some(let handler)) = handler { handler(accepted) }
        }
        return state.withLock { state in
            if case .answered(let accepted) = state { return accepted }
            return nil
        }
    }

    /// Tells `handler` the answer (now, or when it comes) and returns true; false when the
    /// evaluator was never asked (the handshake did not reach the peer's certificate).
    func whenAnswered(_ handler: @escaping @Sendable (Bool) -> Void) -> Bool {
        let answer = state.withLock { state -> Bool?? in
            switch state {
            case .notAsked: return nil
            case .answered(let accepted): return .some(accepted)
            case .waiting:
                state = .waiting(handler)
                return .some(nil)
            }
        }
        guard let answer else { return false }
        if let accepted = answer { handler(accepted) }
        return true
    }
}
