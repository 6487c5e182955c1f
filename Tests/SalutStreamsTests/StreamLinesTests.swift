import Foundation
import SalutStreams
import SalutTestSupport
import XCTest

/// `InputStream.lines(maximumLength:)`, over a bound pair: what a line-based protocol reads.
final class StreamLinesTests: XCTestCase {
    /// Writes `pieces` (each a separate write) then ends the data; returns the reader's lines.
    private func lines(
        _ pieces: [String], maximumLength: Int = 64 * 1024, bufferSize: Int = 64
    ) async throws
        -> [String]
    {
        let pair = BoundStreamPair(bufferSize: bufferSize)
        let writer = Task {
            for piece in pieces { try await pair.output.write(Data(piece.utf8)) }
            pair.output.close()
        }
        var read: [String] = []
        do {
            for try await line in pair.input.lines(maximumLength: maximumLength) { read.append(line) }
        } catch {
            // The writer may wait for room that the reader will not make: its write fails now.
            pair.input.close()
            _ = try? await writer.value
            throw error
        }
        try await writer.value
        return read
    }

    func testLinesEndAtNewlinesWhateverTheWritesAndTheLastMayLackOne() async throws {
        let read = try await lines(["one\ntw", "o\r\n", "\nthree ", "and more\nlast\r"])
        XCTAssertEqual(read, ["one", "two", "", "three and more", "last"])
        let many = try await lines([String(repeating: "\n", count: 20_000) + "end"])
        XCTAssertEqual(many.count, 20_001)
        XCTAssertEqual(many.last, "end")
        let none = try await lines([])
        XCTAssertEqual(none, [])
    }

    func testALineLongerThanTheLimitFailsEvenWhenItsEndCameWithIt() async throws {
        do {
            // One write into a large buffer: the line and its end come in one read.
            _ = try await lines(
                [String(repeating: "y", count: 300) + "\nok\n"], maximumLength: 100, bufferSize: 64 * 1024)
            XCTFail("a 300-byte line passed a 100-byte limit")
        } catch let failure as StreamFailure {
            XCTAssertEqual(failure.code, .lineTooLong)
        }
    }

    func testALineLongerThanTheLimitFailsWithoutBeingHeld() async throws {
        do {
            _ = try await lines(["short\n", String(repeating: "x", count: 300)], maximumLength: 100)
            XCTFail("a 300-byte line passed a 100-byte limit")
        } catch let failure as StreamFailure {
            XCTAssertEqual(failure.code, .lineTooLong)
            XCTAssertEqual("\(failure)", "a line went past 100 bytes without its end")
        }
    }
}
