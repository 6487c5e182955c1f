import Foundation

/// An input stream's text, line by line (``InputStream/lines(maximumLength:)``).
public struct StreamLines: AsyncSequence {
    public typealias Element = String

    let stream: InputStream
    let maximumLength: Int

    public func makeAsyncIterator() -> Iterator {
        Iterator(chunks: StreamChunks(stream: stream, chunkSize: 16 * 1024).makeAsyncIterator(), limit: maximumLength)
    }

    /// Reads the next line, suspending (not blocking a thread, for Salut's own streams) while
    /// no whole line is there. Returns nil at the end of the data.
    public struct Iterator: AsyncIteratorProtocol {
        var chunks: StreamChunks.Iterator
        let limit: Int
        /// Bytes read and not yet handed out as lines.
        var pending: [UInt8] = []
        /// How far `pending` is known to hold no line end.
        var searched = 0
        var ended = false

        /// - Throws: ``StreamFailure/lineTooLong(limit:)`` when a line goes past the limit
        ///   without its end; otherwise as ``StreamChunks/Iterator/next()``.
        public mutating func next() async throws -> String? {
            while true {
                if let end = pending[searched...].firstIndex(of: UInt8(ascii: "\n")) {
                    var line = pending[..<end]
                    if line.last == UInt8(ascii: "\r") { line = line.dropLast() }
                    let text = String(decoding: line, as: UTF8.self)
                    pending.removeSubrange(...end)
                    searched = 0
                    return text
                }
                searched = pending.count
                guard pending.count <= limit else { throw StreamFailure.lineTooLong(limit: limit) }
                if ended {
                    guard !pending.isEmpty else { return nil }
                    // The last line, without its end.
                    defer {
                        pending = []
                        searched = 0
                    }
                    return String(decoding: pending, as: UTF8.self)
                }
                guard let chunk = try await chunks.next() else {
                    ended = true
                    continue
                }
                pending.append(contentsOf: chunk)
            }
        }
    }
}

extension InputStream {
    /// The stream's text, line by line: `for try await line in input.lines()`. A line ends at
    /// `\n` (a `\r` before it is dropped, so `\r\n` works too); the last line may lack its end.
    /// Bytes that are not UTF-8 become U+FFFD. Opens the stream if it is not open yet.
    ///
    /// A peer that never ends its line cannot make the reader hold more than `maximumLength`
    /// bytes (and a chunk): past it the sequence throws ``StreamFailure/lineTooLong(limit:)``.
    public func lines(maximumLength: Int = 64 * 1024) -> StreamLines {
        StreamLines(stream: self, maximumLength: max(1, maximumLength))
    }
}
