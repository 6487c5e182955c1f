import Foundation
import Glibc
@testable import SalutStreams
import SalutTestSupport
import XCTest

/// Every async call of the streams layer returns promptly with `CancellationError` when its task
/// is cancelled, and what was already delivered stays delivered.
final class StreamCancellationTests: SalutTestCase {
    func testCancelledWriteOnAFullBufferThrowsAndKeepsWhatWentIn() async throws {
        let pair = BoundStreamPair(bufferSize: 4)
        pair.input.open(); pair.output.open()
        let buffer = try XCTUnwrap((pair.input as? BoundInputStream)?.buffer)
        let writer = Task { try await pair.output.write(Data([1, 2, 3, 4, 5, 6, 7, 8])) }
        try await eventually("the buffer fills", timeout: 5, interval: 0.001) { buffer.snapshot.space == 0 }
        writer.cancel()
        let outcome = try await withDeadline(5, "the cancelled write returns") { await writer.result }
        XCTAssertThrowsError(try outcome.get()) { XCTAssertTrue($0 is CancellationError, "\($0)") }
        XCTAssertEqual(bytes(pair.input, max: 8), [1, 2, 3, 4], "the bytes that went in before the cancel arrive")
    }

    func testAWriteWithATimeoutGivesUpWhenNobodyReadsAndCompletesWhenSomeoneDoes() async throws {
        let pair = BoundStreamPair(bufferSize: 4)
        pair.input.open(); pair.output.open()
        // Nobody reads: the write gives up after its time, saying so; what went in stays.
        let stalled = try await withDeadline(10, "the timed write returns") {
            do {
                try await pair.output.write(Data([1, 2, 3, 4, 5, 6]), timeout: .milliseconds(200))
                return "written"
            } catch let failure as StreamFailure {
                return failure.code.description
            }
        }
        XCTAssertEqual(stalled, "timedOut")
        XCTAssertEqual(bytes(pair.input, max: 8), [1, 2, 3, 4], "the bytes that went in before the time passed")
        // A reader that keeps taking bytes: a write larger than the buffer completes in time.
        let reader = Task { () -> Int in
            var count = 0
            for try await chunk in pair.input.chunks {
                count += chunk.count
                if count >= 64 { break }
            }
            return count
        }
        try await withDeadline(10, "the timed write with a reader") {
            try await pair.output.write(Data(repeating: 7, count: 64), timeout: .seconds(30))
        }
        let read = try await withDeadline(10, "the reader") { try await reader.value }
        XCTAssertEqual(read, 64)
    }

    func testCancelledChunksThrowsInsteadOfEndingAndLosesNothing() async throws {
        let pair = BoundStreamPair(bufferSize: 16)
        pair.input.open(); pair.output.open()
        let reader = Task { () -> Int in
            var count = 0
            for try await chunk in pair.input.chunks { count += chunk.count }
            return count
        }
        reader.cancel()
        let outcome = try await withDeadline(5, "the cancelled iteration returns") { await reader.result }
        XCTAssertThrowsError(try outcome.get(), "a cut is not an end of data") {
            XCTAssertTrue($0 is CancellationError, "\($0)")
        }
        XCTAssertEqual(write(pair.output, [9, 8, 7]), 3)
        XCTAssertEqual(bytes(pair.input, max: 8), [9, 8, 7], "the stream still works for the next reader")
    }

    func testReadIntoACallersBufferWaitsForBytesEndsWithZeroAndHonoursCancellation() async throws {
        let pair = BoundStreamPair(bufferSize: 16)
        pair.input.open(); pair.output.open()
        let scratch = UnsafeMutableRawBufferPointer.allocate(byteCount: 4, alignment: 1)
        defer { scratch.deallocate() }
        // Waits for bytes, then returns what fits in the buffer; the rest stays for the next read.
        let reader = Task { () -> [UInt8] in
            let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 4, alignment: 1)
            defer { buffer.deallocate() }
            let count = try await pair.input.read(into: buffer)
            return Array(buffer[0..<count])
        }
        XCTAssertEqual(write(pair.output, [1, 2, 3, 4, 5, 6]), 6)
        let first = try await withDeadline(5, "the read returns") { try await reader.value }
        XCTAssertEqual(first, [1, 2, 3, 4])
        let second = try await pair.input.read(into: scratch)
        XCTAssertEqual(second, 2)
        XCTAssertEqual(Array(scratch[0..<2]), [5, 6])
        // A cancelled read throws and takes nothing.
        let waiting = Task { () -> Int in
            let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 4, alignment: 1)
            defer { buffer.deallocate() }
            return try await pair.input.read(into: buffer)
        }
        waiting.cancel()
        let outcome = try await withDeadline(5, "the cancelled read returns") { await waiting.result }
        XCTAssertThrowsError(try outcome.get()) { XCTAssertTrue($0 is CancellationError, "\($0)") }
        XCTAssertEqual(write(pair.output, [7]), 1)
        pair.output.close()
        let last = try await pair.input.read(into: scratch)
        XCTAssertEqual(last, 1)
        XCTAssertEqual(scratch[0], 7)
        let end = try await pair.input.read(into: scratch)
        XCTAssertEqual(end, 0, "the end of the data")
    }

    func testCancelledOpenGivesUpAHandshakeThePeerNeverAnswers() async throws {
        // A TCP listener that accepts (kernel backlog) but never speaks TLS.
        let (listener, port) = try XCTUnwrap(boundLoopbackSocket())
        defer { close(listener) }
        XCTAssertEqual(Glibc.listen(listener, 4), 0)

        let pair = SocketStreams.pair(toHost: "127.0.0.1", port: port, tls: TLSConfiguration())
        let opener = Task { try await pair.open() }
        // The ClientHello arriving proves the handshake is under way before the cancel.
        let server = accept(listener, nil, nil)
        XCTAssertGreaterThanOrEqual(server, 0)
        defer { close(server) }
        var timeout = timeval(tv_sec: 5, tv_usec: 0)
        XCTAssertEqual(setsockopt(server, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size)), 0)
        var scratch = [UInt8](repeating: 0, count: 4096)
        XCTAssertGreaterThan(recv(server, &scratch, scratch.count, 0), 0, "no ClientHello")

        opener.cancel()
        let outcome = try await withDeadline(5, "the cancelled open returns") { await opener.result }
        XCTAssertThrowsError(try outcome.get()) { XCTAssertTrue($0 is CancellationError, "\($0)") }
        XCTAssertEqual(pair.input.streamStatus, .closed)
        // The connection is let go: the server reads the end of the stream.
        var n = 1
        while n > 0 { n = recv(server, &scratch, scratch.count, 0) }
        XCTAssertEqual(n, 0, "the client's socket was closed (errno \(errno))")
    }

    func testAsyncCallsRightAfterOpeningWaitForTheConnectionOrItsFailure() async throws {
        let listener = try StreamListener(port: 0)
        defer { listener.stop() }
        listener.accept { connection in
            Task {
                guard (try? await connection.streams.open()) != nil else { return }
                for try await chunk in connection.input.chunks { try await connection.output.write(chunk) }
                connection.output.close()
            }
        }
        // Written before the connection exists: the write waits for it instead of failing.
        let pair = SocketStreams.pair(toHost: "127.0.0.1", port: Int(listener.port))
        try await withDeadline(10, "write while opening") { try await pair.output.write(Data("early".utf8)) }
        pair.output.close()
        let echoed = try await withDeadline(10, "echo") { () -> Data in
            var all = Data()
            for try await chunk in pair.input.chunks { all += chunk }
            return all
        }
        XCTAssertEqual(String(decoding: echoed, as: UTF8.self), "early")

        // A connection that fails ends a waiting read with the failure, not a hang.
        let refused = SocketStreams.pair(toHost: "127.0.0.1", port: 9)
        let outcome = try await withDeadline(10, "the read ends") { () -> Result<Int, any Error> in
            do {
                var count = 0
                for try await chunk in refused.input.chunks { count += chunk.count }
                return .success(count)
            } catch {
                return .failure(error)
            }
        }
        XCTAssertThrowsError(try outcome.get()) {
            XCTAssertEqual($0 as? SocketStreamError, .connectionRefused("127.0.0.1:9"))
        }
    }
}
