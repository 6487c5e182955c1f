import Foundation
import SalutStreams

/// Making strings from the network safe to print (the library's ``TerminalText``).
public enum Terminal {
    /// `text` as ``TerminalText/escaped(_:)`` writes it: control characters as `\xHH`,
    /// invisible and reordering characters as `\u{HHHH}`, backslashes doubled.
    public static func escape(_ text: String) -> String { TerminalText.escaped(text) }
}

extension Terminal {
    /// The most bytes of a peer's free text (a failure's message, a reason, a file's error)
    /// kept: a peer may send megabytes, which would fill a terminal and the status file.
    public static let peerTextLimit = 1_000

    /// A peer's free text, cut to ``peerTextLimit`` bytes (said so with "…") before it is
    /// escaped, as ``escape(_:)`` does.
    public static func escapePeerText(_ text: String) -> String {
        guard text.utf8.count > peerTextLimit else { return escape(text) }
        return escape(Receiver.shortened(text, toBytes: peerTextLimit)) + "… (cut at \(peerTextLimit) bytes)"
    }
}
