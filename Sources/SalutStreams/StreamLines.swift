import Foundation

/// An input stream's text, line by line (`InputStream.lines(maximumLength:)`).
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
        var splitter: LineSplitter
        var ended = false

        init(chunks: StreamChunks.Iterator, limit: Int) {
            self.chunks = chunks
            splitter = LineSplitter(limit: limit)
        }

        /// - Throws: ``StreamFailure/lineTooLong(limit:)`` when a line goes past the limit
        ///   (ended or not); otherwise as ``StreamChunks/Iterator/next()``.
        public mutating func next() async throws -> String? {
            while true {
                if let line = try splitter.nextLine() { return line }
                if ended { return splitter.lastLine() }
                if let chunk = try await chunks.next() { splitter.feed(chunk) } else { ended = true }
            }
        }
    }
}

/// Cuts bytes into lines as they come, for the line sequences of streams and stream tasks: a
/// line ends at `\n` (a `\r` before it is dropped); bytes that are not UTF-8 become U+FFFD; no
/// line may pass `limit` bytes. A value: feed it bytes, take lines.
package struct LineSplitter {
    let limit: Int
    /// Bytes read; those before `start` were handed out already (dropped once per chunk,
    /// not once per line: many short lines cost no more than one long one).
    private var pending: [UInt8] = []
    private var start = 0
    /// How far `pending` is known to hold no line end.
    private var searched = 0

    package init(limit: Int) { self.limit = Swift.max(1, limit) }

    /// The next whole line among the bytes fed, or nil when it needs more.
    /// - Throws: ``StreamFailure/lineTooLong(limit:)`` when a line, ended or not, passes the limit.
    package mutating func nextLine() throws -> String? {
        if let end = pending[Swift.max(start, searched)...].firstIndex(of: UInt8(ascii: "\n")) {
            guard end - start <= limit else { throw StreamFailure.lineTooLong(limit: limit) }
            let line = Self.text(pending[start..<end])
            start = end + 1
            searched = start
            return line
        }
        searched = pending.count
        guard pending.count - start <= limit else { throw StreamFailure.lineTooLong(limit: limit) }
        return nil
    }

    /// Adds the bytes that came next.
    package mutating func feed(_ chunk: some Collection<UInt8>) {
        // What was handed out goes before the next chunk comes in.
        if start > 0 {
            pending.removeFirst(start)
            searched -= start
            start = 0
        }
        pending.append(contentsOf: chunk)
    }

    /// At the end of the data: the last line, which lacks its end, once; then nil.
    package mutating func lastLine() -> String? {
        guard start < pending.count else { return nil }
        defer { start = pending.count }
        return Self.text(pending[start...])
    }

    /// A line's bytes as text, without a `\r` at its end.
    private static func text(_ bytes: ArraySlice<UInt8>) -> String {
        String(decoding: bytes.last == UInt8(ascii: "\r") ? bytes.dropLast() : bytes, as: UTF8.self)
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
