import Foundation
@testable import SalutSession
import SalutStreams
import SalutTestSupport
import XCTest

/// A stream task's async calls end with `CancellationError` as soon as their caller is cancelled,
/// whether they are waiting on the peer or still queued, and no byte is lost.
final class SessionCancellationTests: SalutTestCase {
    func testCancelledReadThrowsPromptlyAndTheNextReadGetsEveryByte() async throws {
        let server = try SilentServer()
        let session = PeerSession(configuration: .ephemeral)
        defer { session.invalidateAndCancel() }
        let task = session.streamTask(withHostName: "127.0.0.1", port: server.port)
        task.resume()
        try await task.write(Data("hi".utf8), timeout: 5)  // connected once this returns
        try await eventually("the server has the connection", timeout: 5, interval: 0.001) { server.count > 0 }
        let reader = Task { try await task.readData(ofMinLength: 10, maxLength: 10, timeout: 600) }
        try await server.say("12345")
        reader.cancel()
        let outcome = try await withDeadline(5, "the cancelled read returns long before its timeout") {
            await reader.result
        }
        XCTAssertThrowsError(try outcome.get()) { XCTAssertTrue($0 is CancellationError, "\($0)") }
        XCTAssertEqual(task.state, .running, "a cancelled read does not end the task")
        try await server.say("67890")
        let (data, _) = try await task.readData(ofMinLength: 10, maxLength: 10, timeout: 5)
        XCTAssertEqual(String(decoding: data, as: UTF8.self), "1234567890")
    }

    func testCancelledQueuedReadAnswersAtOnceWhileTheOneAheadWaits() async throws {
        let server = try SilentServer()
        let session = PeerSession(configuration: .ephemeral)
        defer { session.invalidateAndCancel() }
        let task = session.streamTask(withHostName: "127.0.0.1", port: server.port)
        task.resume()
        let first = Task { try await task.readData(ofMinLength: 1, maxLength: 1, timeout: 600) }
        let second = Task { try await task.readData(ofMinLength: 1, maxLength: 1, timeout: 600) }
        second.cancel()
        let outcome = try await withDeadline(5, "the queued read answers") { await second.result }
        XCTAssertThrowsError(try outcome.get()) { XCTAssertTrue($0 is CancellationError, "\($0)") }
        try await eventually("the server has the connection", timeout: 5, interval: 0.001) { server.count > 0 }
        try await server.say("x")
        let (data, _) = try await withDeadline(5, "the first read") { try await first.value }
        XCTAssertEqual(data, Data("x".utf8), "the read ahead was not disturbed")
    }

    func testCancelledWriteToAPeerThatNeverReadsThrowsPromptly() async throws {
        let server = try SilentServer()
        let session = PeerSession(configuration: .ephemeral)
        defer { session.invalidateAndCancel() }
        let task = session.streamTask(withHostName: "127.0.0.1", port: server.port)
        task.resume()
        let big = Data(count: 64 << 20)  // far more than the socket buffers and the pump hold
        let writer = Task { try await task.write(big, timeout: 0) }
        try await eventually("the server has the connection", interval: 0.001) { server.count > 0 }
        writer.cancel()
        let outcome = try await withDeadline(5, "the cancelled write returns") { await writer.result }
        XCTAssertThrowsError(try outcome.get()) { XCTAssertTrue($0 is CancellationError, "\($0)") }
    }

    func testCancelledSecureConnectionThrowsPromptly() async throws {
        let server = try SilentServer()  // never answers the ClientHello
        let session = PeerSession(configuration: .ephemeral)
        defer { session.invalidateAndCancel() }
        let task = session.streamTask(withHostName: "127.0.0.1", port: server.port)
        task.resume()
        let securing = Task { try await task.secureConnection() }
        try await eventually("the server has the connection", timeout: 5, interval: 0.001) { server.count > 0 }
        securing.cancel()
        let outcome = try await withDeadline(5, "the cancelled call returns") { await securing.result }
        XCTAssertThrowsError(try outcome.get()) { XCTAssertTrue($0 is CancellationError, "\($0)") }
    }
}
