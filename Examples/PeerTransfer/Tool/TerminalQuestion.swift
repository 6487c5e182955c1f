import Foundation
import PeerTransferCore

/// A yes/no question on the terminal (standard error for the question, standard input for
/// the answer), read off the cooperative pool so that other tasks go on meanwhile.
enum TerminalQuestion {
    /// Prints `prompt` and waits for a line: true for "y" or "yes" (any case); false for
    /// anything else, or the end of input.
    static func ask(_ prompt: String) async -> Bool {
        let answer: String? = await QuestionGate.whileAsking {
            writeAll(prompt, to: 2)
            return await withCheckedContinuation { continuation in
                Thread.detachNewThread { continuation.resume(returning: readLine()) }
            }
        }
        let word = answer?.trimmingCharacters(in: .whitespaces).lowercased()
        return word == "y" || word == "yes"
    }
}
