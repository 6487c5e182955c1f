import Foundation
@testable import SalutStreams
import SalutTestSupport
import XCTest

/// `read(into:atLeast:)`: a bulk reader is woken once its minimum is buffered, not at every
/// write, and never waits past the end of the data or for more than the buffer can hold.
final class BulkReadTests: SalutTestCase {
    /// Reads once with `minimum` into a buffer of `room` bytes.
    private static func startRead(_ input: InputStream, room: Int, atLeast minimum: Int) -> Task<[UInt8], any Error> {
        // Handed over: the task is the stream's only reader until its read ends; callers await it first.
        let stream = HandedOver(input)
        return Task {
            let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: room, alignment: 1)
            defer { buffer.deallocate() }
            let n = try await stream.value.read(into: buffer, atLeast: minimum)
            return Array(buffer[0..<n])
        }
    }

    private func write(_ bytes: [UInt8], to output: OutputStream) async throws {
        try await output.write(Data(bytes))
    }

    func testAReaderWaitsForItsMinimumAcrossSeveralWrites() async throws {
        let pair = BoundStreamPair(bufferSize: 1024)
        pair.input.open()
        pair.output.open()
        let buffer = try XCTUnwrap((pair.input as? BoundInputStream)?.buffer)
        try await write(Array(repeating: 1, count: 10), to: pair.output)
        let read = Self.startRead(pair.input, room: 100, atLeast: 50)
        // Either it parks (10 bytes are too few) or, were the minimum ignored, it has
        // returned the 10 bytes: wait for whichever comes first.
        let reading = TaskWatch(read)
        try await eventually("the reader parks or returns") { buffer.parkedReaders == 1 || reading.isDone }
        try await write(Array(repeating: 2, count: 30), to: pair.output)
        XCTAssertEqual(buffer.parkedReaders, 1, "40 bytes are still below the minimum of 50")
        try await write(Array(repeating: 3, count: 20), to: pair.output)
        let got = try await withDeadline(10, "the read") { try await read.value }
        XCTAssertEqual(
            got, Array(repeating: 1, count: 10) + Array(repeating: 2, count: 30) + Array(repeating: 3, count: 20))
        pair.input.close()
        pair.output.close()
    }

    func testABulkWriterWaitsForAQuarterOfTheBufferNotForEachByteTaken() async throws {
        let pair = BoundStreamPair(bufferSize: 16)
        pair.input.open()
        pair.output.open()
        let buffer = try XCTUnwrap((pair.output as? BoundOutputStream)?.buffer)
        try await write(Array(repeating: 1, count: 16), to: pair.output)  // full
        let output = HandedOver(pair.output)  // the task is its only writer
        let writer = Task { try await output.value.write(Data(Array(repeating: 2, count: 8))) }
        try await eventually("the writer parks") { buffer.parkedWriters == 1 }
        var taken = [UInt8](repeating: 0, count: 64)
        XCTAssertEqual(pair.input.read(&taken, maxLength: 2), 2)
        XCTAssertEqual(buffer.parkedWriters, 1, "2 bytes free: below its 4 (a quarter of 16)")
        XCTAssertEqual(buffer.snapshot.space, 2, "the writer took the room of a read below its minimum")
        XCTAssertEqual(pair.input.read(&taken, maxLength: 2), 2)
        try await eventually("the writer goes on with 4 bytes free") {
            buffer.snapshot.space == 0 || buffer.parkedWriters == 0
        }
        var rest: [UInt8] = []
        while rest.count < 20 {
            let n = pair.input.read(&taken, maxLength: taken.count)
            XCTAssertGreaterThan(n, 0)
            rest += taken[0..<max(0, n)]
        }
        try await withDeadline(10, "the write") { try await writer.value }
        XCTAssertEqual(rest, Array(repeating: 1, count: 12) + Array(repeating: 2, count: 8))
        pair.input.close()
        pair.output.close()
    }

    func testTheEndOfTheDataWakesAReaderWithFewerBytes() async throws {
        let pair = BoundStreamPair(bufferSize: 1024)
        pair.input.open()
        pair.output.open()
        let buffer = try XCTUnwrap((pair.input as? BoundInputStream)?.buffer)
        try await write([7, 8, 9], to: pair.output)
        let read = Self.startRead(pair.input, room: 100, atLeast: 50)
        // Parked with 3 of its 50 bytes: the end must wake it (were it not parked yet, the
        // test would only check the read after the end).
        try await eventually("the reader parks") { buffer.parkedReaders == 1 }
        pair.output.close()
        let got = try await withDeadline(10, "the read at the end") { try await read.value }
        XCTAssertEqual(got, [7, 8, 9])
        let after = try await withDeadline(10, "the read after the end") {
            try await BulkReadTests.startRead(pair.input, room: 100, atLeast: 50).value
        }
        XCTAssertEqual(after, [], "then the end: 0 bytes")
        pair.input.close()
    }

    func testAMinimumAboveTheBufferSizeIsCappedToIt() async throws {
        let pair = BoundStreamPair(bufferSize: 16)
        pair.input.open()
        pair.output.open()
        let read = Self.startRead(pair.input, room: 100, atLeast: 100)
        let writer = Task { try await pair.output.write(Data(Array(repeating: 5, count: 40))) }
        let got = try await withDeadline(10, "a read wanting more than the buffer holds") { try await read.value }
        XCTAssertEqual(got, Array(repeating: 5, count: 16), "woken once the buffer is full")
        var rest: [UInt8] = []
        while rest.count < 24 {
            rest += try await withDeadline(10, "the rest") {
                try await BulkReadTests.startRead(pair.input, room: 100, atLeast: 1).value
            }
        }
        XCTAssertEqual(rest.count, 24)
        try await withDeadline(10, "the writer") { try await writer.value }
        pair.input.close()
        pair.output.close()
    }

    func testAMinimumAboveTheRoomIsCappedToTheRoom() async throws {
        let pair = BoundStreamPair(bufferSize: 1024)
        pair.input.open()
        pair.output.open()
        try await write(Array(repeating: 4, count: 8), to: pair.output)
        let got = try await withDeadline(10, "a read of 8 wanting 500") {
            try await BulkReadTests.startRead(pair.input, room: 8, atLeast: 500).value
        }
        XCTAssertEqual(got, Array(repeating: 4, count: 8))
        pair.input.close()
        pair.output.close()
    }
}

/// Whether a task has finished, asked from a polling condition.
private final class TaskWatch: Sendable {
    private let done = Locked(false)
    init(_ task: Task<[UInt8], any Error>) {
        let done = self.done
        Task {
            _ = try? await task.value; done.withLock { $0 = true }
        }
    }
    var isDone: Bool { done.withLock { $0 } }
}
