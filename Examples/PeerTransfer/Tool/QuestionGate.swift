import SalutStreams

/// Keeps log lines off the terminal while a question waits there for its answer: they are
/// held, and written once it is answered (or withdrawn), so that no line lands between a
/// question and the person's answer or scrolls the question away.
enum QuestionGate {
    private struct State {
        var open = 0
        var held: [String] = []
        var dropped = 0
    }
    private static let state = Locked(State())
    /// Lines held at most; those beyond are counted, and the count is said.
    static let heldLimit = 1_000

    /// Writes `line` to standard error now, or holds it while a question is open.
    static func write(_ line: String) {
        let written = state.withLock { state -> Bool in
            guard state.open > 0 else { return false }
            if state.held.count < heldLimit { state.held.append(line) } else { state.dropped += 1 }
            return true
        }
        if !written { writeAll(line, to: 2) }
    }

    /// Runs `ask` (which puts a question and waits for its answer) with log lines held until it
    /// returns; then writes them.
    static func whileAsking<T>(_ ask: () async -> T) async -> T {
        state.withLock { $0.open += 1 }
        let answer = await ask()
        let (lines, dropped) = state.withLock { state -> ([String], Int) in
            state.open -= 1
            guard state.open == 0 else { return ([], 0) }
            defer {
                state.held = []
                state.dropped = 0
            }
            return (state.held, state.dropped)
        }
        if !lines.isEmpty || dropped > 0 {
            writeAll(
                lines.joined()
                    + (dropped > 0 ? "peerxfer: (\(dropped) more log lines while the question was open)\n" : ""),
                to: 2)
        }
        return answer
    }
}
