import Foundation
import SalutStreams

extension PeerStreamTask {
    /// The text the task reads, line by line: `for try await line in task.lines()`, as
    /// `InputStream.lines(maximumLength:)` gives a stream's. A line ends at `\n` (a `\r`
    /// before it is dropped); the last line may lack its end; bytes that are not UTF-8 become
    /// U+FFFD. Reads go through ``readData(ofMinLength:maxLength:timeout:)``, queued with the
    /// task's other reads.
    ///
    /// A peer that never ends its line cannot make the reader hold more than `maximumLength`
    /// bytes (and one read): past it the sequence throws `StreamFailure.lineTooLong(limit:)`.
    /// - Parameters:
    ///   - maximumLength: the longest line taken, in bytes (at least 1).
    ///   - timeout: how long each read may wait for bytes, in seconds, as for `readData` (0: no
    ///     bound, for a chat whose peer may stay quiet; the task's own idle timeout still
    ///     applies); a peer silent that long ends the sequence with
    ///     ``PeerSessionError/timedOut(_:)``.
    public func lines(maximumLength: Int = 64 * 1024, timeout: TimeInterval = 60) -> Lines {
        Lines(task: self, maximumLength: maximumLength, timeout: timeout)
    }

    /// A stream task's text, line by line; made by ``PeerStreamTask/lines(maximumLength:timeout:)``.
    public struct Lines: AsyncSequence, Sendable {
        public typealias Element = String

        let task: PeerStreamTask
        let maximumLength: Int
        let timeout: TimeInterval

        public func makeAsyncIterator() -> Iterator {
            Iterator(task: task, timeout: timeout, splitter: LineSplitter(limit: maximumLength))
        }

        /// Reads the next line; nil at the end of the data.
        public struct Iterator: AsyncIteratorProtocol {
            let task: PeerStreamTask
            let timeout: TimeInterval
            var splitter: LineSplitter
            var ended = false

            /// - Throws: `StreamFailure.lineTooLong(limit:)` when a line passes the limit; what
            ///   ``PeerStreamTask/readData(ofMinLength:maxLength:timeout:)`` throws.
            public mutating func next() async throws -> String? {
                while true {
                    if let line = try splitter.nextLine() { return line }
                    if ended { return splitter.lastLine() }
                    let (data, atEnd) = try await task.readData(ofMinLength: 1, maxLength: 16 * 1024, timeout: timeout)
                    splitter.feed(data)
                    ended = atEnd
                }
            }
        }
    }
}
