import Foundation
@testable import SalutSession
import SalutStreams
import SalutTestSupport
import XCTest

final class TaskStateTests: SalutTestCase {
    func testTasksStartSuspendedAndResumeTwiceIsHarmless() async throws {
        let server = try EchoServer()
        let delegate = RecordingDelegate()
        let session = PeerSession(configuration: .ephemeral, delegate: delegate)
        let task = session.streamTask(withHostName: "127.0.0.1", port: server.port)
        XCTAssertEqual(task.state, .suspended)
        XCTAssertEqual(task.countOfBytesSent, 0)
        task.resume()
        task.resume()
        XCTAssertEqual(task.state, .running)
        try await task.write(Data("hi".utf8), timeout: 5)
        let (data, _) = try await task.readData(ofMinLength: 2, maxLength: 10, timeout: 5)
        XCTAssertEqual(data, Data("hi".utf8))
        XCTAssertEqual(server.count, 1, "resuming twice connects once")
        task.cancel()
        try await delegate.wait(for: "complete \(task.taskIdentifier)")
        XCTAssertEqual(task.state, .completed)
    }

    func testSuspendIsCountedAndHoldsQueuedOperations() async throws {
        let server = try EchoServer()
        let session = PeerSession(configuration: .ephemeral)
        let task = session.streamTask(withHostName: "127.0.0.1", port: server.port)
        task.resume()
        try await task.write(Data("a".utf8), timeout: 5)
        task.suspend()
        task.suspend()
        XCTAssertEqual(task.state, .suspended)
        let wrote = Locked(false)
        task.write(Data("b".utf8), timeout: 0) { error in
            XCTAssertNil(error)
            wrote.exchange(true)
        }
        try await eventually("the write is held at the suspension", timeout: 5, interval: 0.001) {
            task.operationsWaitingToRun > 0
        }
        XCTAssertFalse(wrote.value, "a write ran while the task was suspended")
        task.resume()
        XCTAssertEqual(task.state, .suspended, "two suspends need two resumes")
        task.resume()
        XCTAssertEqual(task.state, .running)
        let (echo, _) = try await task.readData(ofMinLength: 2, maxLength: 2, timeout: 5)
        XCTAssertEqual(echo, Data("ab".utf8))
        // The write's completion comes through the session's delegate queue, on its own way:
        // it is due, not necessarily made, when the echo arrives.
        try await eventually("the held write's completion", timeout: 5, interval: 0.001) { wrote.value }
        task.cancel()
    }

    func testCancelWhileSuspendedCompletesWithCancelledAndLaterCallsAreNoOps() async throws {
        let delegate = RecordingDelegate()
        let session = PeerSession(configuration: .ephemeral, delegate: delegate)
        let task = session.streamTask(withHostName: "127.0.0.1", port: 9)
        task.cancel()
        try await delegate.wait(for: "complete \(task.taskIdentifier)")
        XCTAssertEqual(task.state, .completed)
        XCTAssertEqual(task.error as? PeerSessionError, .cancelled)
        task.cancel()
        task.resume()
        task.suspend()
        XCTAssertEqual(task.state, .completed)
        do {
            _ = try await task.readData(ofMinLength: 1, maxLength: 1, timeout: 1)
            XCTFail("read on a cancelled task")
        } catch {
            XCTAssertEqual(error as? PeerSessionError, .cancelled)
        }
        XCTAssertEqual(delegate.events, ["metrics \(task.taskIdentifier)", "complete \(task.taskIdentifier)"])
    }

    func testDelegateCallsAreSerialisedAndCompletionComesLast() async throws {
        let server = try EchoServer()
        let delegate = RecordingDelegate()
        // a concurrent queue
        let session = PeerSession(configuration: .ephemeral, delegate: delegate, delegateQueue: OperationQueue())
        let task = session.streamTask(withHostName: "localhost", port: server.port)
        task.resume()
        for i in 0..<20 { task.write(Data("\(i),".utf8), timeout: 5) { _ in } }
        task.closeWrite()
        var collected = Data()
        while true {
            let (chunk, atEnd) = try await task.readData(ofMinLength: 1, maxLength: 1024, timeout: 5)
            collected.append(chunk)
            if atEnd { break }
        }
        XCTAssertEqual(String(decoding: collected, as: UTF8.self), (0..<20).map { "\($0)," }.joined())
        try await delegate.wait(for: "complete \(task.taskIdentifier)")
        let id = task.taskIdentifier
        XCTAssertEqual(delegate.events, ["writeClosed \(id)", "readClosed \(id)", "metrics \(id)", "complete \(id)"])
        XCTAssertEqual(delegate.overlappingCalls, 0, "delegate calls overlapped on a concurrent queue")
        XCTAssertNil(task.error)
        XCTAssertEqual(task.countOfBytesSent, Int64(collected.count))
        XCTAssertEqual(task.countOfBytesReceived, Int64(collected.count))
    }

    func testInvalidationFinishesTasksThenReleasesTheDelegateAndRefusesNewTasks() async throws {
        let server = try EchoServer()
        let delegate = RecordingDelegate()
        let session = PeerSession(configuration: .ephemeral, delegate: delegate)
        let running = session.streamTask(withHostName: "127.0.0.1", port: server.port)
        running.resume()
        try await running.write(Data("x".utf8), timeout: 5)
        session.finishTasksAndInvalidate()
        let late = session.streamTask(withHostName: "127.0.0.1", port: server.port)
        XCTAssertEqual(late.state, .completed)
        XCTAssertEqual(late.error as? PeerSessionError, .sessionInvalidated)
        XCTAssertFalse(delegate.events.contains("invalid"), "invalidated while a task still runs")
        running.closeWrite()
        running.closeRead()
        try await delegate.wait(for: "invalid")
        XCTAssertEqual(delegate.events.last, "invalid")
        try await eventually("delegate released", timeout: 5) { session.delegate == nil }

        let second = RecordingDelegate()
        let other = PeerSession(configuration: .ephemeral, delegate: second)
        let victim = other.streamTask(withHostName: "127.0.0.1", port: server.port)
        victim.resume()
        other.invalidateAndCancel()
        try await second.wait(for: "invalid")
        XCTAssertEqual(victim.error as? PeerSessionError, .cancelled)
        XCTAssertEqual(
            second.events, ["metrics \(victim.taskIdentifier)", "complete \(victim.taskIdentifier)", "invalid"])
        PeerSession.shared.invalidateAndCancel()  // no effect on the shared session
        XCTAssertEqual(PeerSession.shared.streamTask(withHostName: "127.0.0.1", port: 9).state, .suspended)
    }

    func testConfigurationIsCopiedAndPresetsDiffer() {
        var configuration = PeerSessionConfiguration.default
        configuration.timeoutIntervalForRequest = 7
        let session = PeerSession(configuration: configuration)
        defer { session.invalidateAndCancel() }  // tasks never resumed stay with the session until then
        configuration.timeoutIntervalForRequest = 99
        XCTAssertEqual(session.configuration.timeoutIntervalForRequest, 7)
        XCTAssertNotNil(PeerSessionConfiguration.default.trustStoreURL)
        XCTAssertNil(PeerSessionConfiguration.ephemeral.trustStoreURL)
        XCTAssertTrue(PeerSessionConfiguration.ephemeral.isEphemeral)
        let task = session.streamTask(withHostName: "a", port: 1)
        task.priority = 3
        XCTAssertEqual(task.priority, 1, "priority is clamped to 0…1")
        XCTAssertNotEqual(task.taskIdentifier, session.streamTask(withHostName: "a", port: 1).taskIdentifier)
    }
}
