import Foundation
import Glibc
@testable import SalutSession
import SalutStreams
import SalutTestSupport
import XCTest

final class StreamTaskTests: SalutTestCase {
    func testReadTimeoutFailsOnlyThatReadAndLosesNothing() async throws {
        let server = try SilentServer()
        let session = PeerSession(configuration: .ephemeral)
        let task = session.streamTask(withHostName: "127.0.0.1", port: server.port)
        task.resume()
        do {
            _ = try await task.readData(ofMinLength: 1, maxLength: 10, timeout: 0.2)
            XCTFail("read returned without data")
        } catch {
            XCTAssertEqual(error as? PeerSessionError, .timedOut("read"))
        }
        XCTAssertEqual(task.state, .running, "a read timeout does not end the task")
        try await server.say("late")
        let (data, _) = try await task.readData(ofMinLength: 4, maxLength: 4, timeout: 5)
        XCTAssertEqual(data, Data("late".utf8), "bytes that came after a timed-out read go to the next read")
        task.cancel()
    }

    func testAStreamTasksLinesEndAtNewlinesWhateverTheReadsAndALongOneFails() async throws {
        let server = try SilentServer()
        let session = PeerSession(configuration: .ephemeral)
        let task = session.streamTask(withHostName: "127.0.0.1", port: server.port)
        task.resume()
        XCTAssertTrue(eventually(timeout: 10) { server.count == 1 }, "the task connected")
        var lines = task.lines(maximumLength: 8, timeout: 5).makeAsyncIterator()
        try await server.say("one\r\ntw")
        let first = try await lines.next()
        XCTAssertEqual(first, "one")
        try await server.say("o\nthree")
        let second = try await lines.next()
        XCTAssertEqual(second, "two")
        server.finishSending()
        let last = try await lines.next()
        XCTAssertEqual(last, "three", "the last line, without its end")
        let end = try await lines.next()
        XCTAssertNil(end)
        task.cancel()

        // A peer that never ends its line: refused past the limit, not held.
        let flooding = try SilentServer()
        let flooded = session.streamTask(withHostName: "127.0.0.1", port: flooding.port)
        flooded.resume()
        XCTAssertTrue(eventually(timeout: 10) { flooding.count == 1 }, "the task connected")
        try await flooding.say(String(repeating: "x", count: 20))
        do {
            for try await line in flooded.lines(maximumLength: 8, timeout: 5) { XCTFail("a line: \(line)") }
            XCTFail("no failure")
        } catch let failure as StreamFailure {
            XCTAssertEqual(failure, .lineTooLong(limit: 8))
        }
        flooded.cancel()
        session.invalidateAndCancel()
    }

    func testIdleAndResourceTimeoutsFailTheTask() async throws {
        let server = try SilentServer()
        var idle = PeerSessionConfiguration.ephemeral
        idle.timeoutIntervalForRequest = 0.3
        let delegate = RecordingDelegate()
        let session = PeerSession(configuration: idle, delegate: delegate)
        let task = session.streamTask(withHostName: "127.0.0.1", port: server.port)
        task.resume()
        task.readData(ofMinLength: 1, maxLength: 1, timeout: 0) { _, _, _ in }
        try await delegate.wait(for: "complete \(task.taskIdentifier)")
        XCTAssertEqual(task.error as? PeerSessionError, .timedOut("idle"))

        var resource = PeerSessionConfiguration.ephemeral
        resource.timeoutIntervalForResource = 0.3
        let second = RecordingDelegate()
        let limited = PeerSession(configuration: resource, delegate: second)
        let busy = limited.streamTask(withHostName: "127.0.0.1", port: server.port)
        busy.resume()
        try await second.wait(for: "complete \(busy.taskIdentifier)")
        XCTAssertEqual(busy.error as? PeerSessionError, .timedOut("resource"))
    }

    func testConnectionFailuresCompleteTheTaskWithTheReason() async throws {
        let delegate = RecordingDelegate()
        let session = PeerSession(configuration: .ephemeral, delegate: delegate)
        let refused = session.streamTask(withHostName: "127.0.0.1", port: 9)
        let unknown = session.streamTask(withHostName: "no-such-host.invalid", port: 80)
        refused.resume()
        unknown.resume()
        try await delegate.wait(for: "complete \(refused.taskIdentifier)")
        try await delegate.wait(for: "complete \(unknown.taskIdentifier)")
        XCTAssertEqual(refused.error as? PeerSessionError, .connection(.connectionRefused("127.0.0.1:9")))
        guard let failure = (unknown.error as? PeerSessionError)?.connectionError, failure.code == .nameNotFound,
            let host = failure.subject
        else {
            return XCTFail("\(String(describing: unknown.error))")
        }
        XCTAssertEqual(host, "no-such-host.invalid")
    }

    func testCaptureStreamsHandsOverTheConnectionAfterQueuedWork() async throws {
        let server = try EchoServer()
        let delegate = RecordingDelegate()
        let session = PeerSession(configuration: .ephemeral, delegate: delegate)
        let task = session.streamTask(withHostName: "::1", port: server.port)
        task.resume()
        task.write(Data("before".utf8), timeout: 5) { XCTAssertNil($0) }
        task.captureStreams()
        try await delegate.wait(for: "captured \(task.taskIdentifier)")
        try await delegate.wait(for: "complete \(task.taskIdentifier)")
        XCTAssertNil(task.error)
        let (input, output) = try XCTUnwrap(delegate.capturedStreams.first)
        XCTAssertEqual(input.streamStatus, .open, "the captured streams stay open")
        try await output.write(Data(" after".utf8))
        output.close()
        var echoed = Data()
        for try await chunk in input.chunks { echoed.append(chunk) }
        XCTAssertEqual(String(decoding: echoed, as: UTF8.self), "before after")
        let id = task.taskIdentifier
        XCTAssertEqual(delegate.events, ["captured \(id)", "metrics \(id)", "complete \(id)"])
    }

    func testTwoHundredConcurrentTasksAgainstOneListenerLoseNothing() async throws {
        let server = try EchoServer()
        var configuration = PeerSessionConfiguration.ephemeral
        configuration.maximumConnectionsPerHost = 40
        let session = PeerSession(configuration: configuration)
        let results = try await withDeadline(120, "200 tasks") {
            try await withThrowingTaskGroup(of: Bool.self) { group in
                for i in 0..<200 {
                    group.addTask {
                        let task = session.streamTask(withHostName: "127.0.0.1", port: server.port)
                        task.resume()
                        let payload = pattern(20_000 + i, seed: i)
                        try await task.write(payload, timeout: 30)
                        task.closeWrite()
                        var echoed = Data()
                        while true {
                            let (chunk, atEnd) = try await task.readData(ofMinLength: 1, maxLength: 65536, timeout: 30)
                            echoed.append(chunk)
                            if atEnd { break }
                        }
                        return echoed == payload
                    }
                }
                var good = 0
                for try await ok in group where ok { good += 1 }
                return good
            }
        }
        XCTAssertEqual(results, 200, "every task got its own bytes back")
        XCTAssertEqual(server.count, 200, "one connection per task")
        XCTAssertLessThanOrEqual(server.peak, 40, "no more than maximumConnectionsPerHost at once")
        XCTAssertGreaterThan(server.peak, 1, "tasks ran concurrently")
    }

    func testNetworkServiceTypeAndFamilyReachTheSocket() async throws {
        let server = try EchoServer()
        var configuration = PeerSessionConfiguration.ephemeral
        configuration.networkServiceType = .voice
        configuration.allowedAddressFamilies = .ipv6
        let session = PeerSession(configuration: configuration)
        let task = session.streamTask(withHostName: "::1", port: server.port)
        task.resume()
        try await task.write(Data("x".utf8), timeout: 5)
        _ = try await task.readData(ofMinLength: 1, maxLength: 1, timeout: 5)
        let details = try XCTUnwrap(task.connectionDetails)
        XCTAssertEqual(details.trafficClass, 0xB8, "EF for voice")
        XCTAssertEqual(details.socketPriority, 6)
        XCTAssertEqual(details.remoteAddress?.isIPv6, true, "IPv6 only")
        task.cancel()

        var v4 = PeerSessionConfiguration.ephemeral
        v4.allowedAddressFamilies = .ipv4
        let delegate = RecordingDelegate()
        let onlyV4 = PeerSession(configuration: v4, delegate: delegate)
        let impossible = onlyV4.streamTask(withHostName: "::1", port: server.port)
        impossible.resume()
        try await delegate.wait(for: "complete \(impossible.taskIdentifier)")
        guard let failure = (impossible.error as? PeerSessionError)?.connectionError, failure.code == .nameNotFound,
            let detail = failure.reason
        else {
            return XCTFail("\(String(describing: impossible.error))")
        }
        XCTAssertEqual(detail, "no IPv4 addresses")
    }

    func testMetricsAreMonotonicAndPlausible() async throws {
        let certificate = try TestCertificate.make()
        let server = try EchoServer(
            tls: .server(certificateChainFile: certificate.certificateFile, privateKeyFile: certificate.keyFile))
        var configuration = PeerSessionConfiguration.ephemeral
        configuration.trustPolicy = .pinned([certificate.certificateSHA256])
        let delegate = RecordingDelegate()
        let session = PeerSession(configuration: configuration, delegate: delegate)
        let task = session.streamTask(withHostName: "localhost", port: server.port)
        task.resume()
        try await task.secureConnection()
        try await task.write(pattern(100_000), timeout: 5)
        task.closeWrite()
        var received = 0
        while true {
            let (chunk, atEnd) = try await task.readData(ofMinLength: 1, maxLength: 65536, timeout: 5)
            received += chunk.count
            if atEnd { break }
        }
        try await delegate.wait(for: "complete \(task.taskIdentifier)")
        let metrics = try XCTUnwrap(delegate.metrics(of: task))
        let transaction = try XCTUnwrap(metrics.transactionMetrics.first)
        let steps = [
            transaction.fetchStartDate, transaction.domainLookupStartDate, transaction.domainLookupEndDate,
            transaction.connectStartDate, transaction.connectEndDate, transaction.secureConnectionStartDate,
            transaction.secureConnectionEndDate, transaction.requestStartDate, transaction.requestEndDate,
        ]
        let dates = steps.compactMap { $0 }
        XCTAssertEqual(dates.count, steps.count, "every step happened: \(steps)")
        XCTAssertEqual(dates, dates.sorted(), "steps in order")
        let responseStart = try XCTUnwrap(transaction.responseStartDate),
            responseEnd = try XCTUnwrap(transaction.responseEndDate)
        XCTAssertLessThanOrEqual(responseStart, responseEnd)
        XCTAssertLessThanOrEqual(transaction.secureConnectionEndDate!, responseStart)
        XCTAssertTrue(
            metrics.taskInterval.start <= transaction.fetchStartDate! && responseEnd <= metrics.taskInterval.end)
        XCTAssertLessThan(metrics.taskInterval.duration, 30)
        XCTAssertEqual(transaction.remotePort, server.port)
        XCTAssertTrue(
            ["127.0.0.1", "::1"].contains(transaction.remoteAddress ?? ""),
            "\(String(describing: transaction.remoteAddress))")
        XCTAssertNotNil(transaction.localPort)
        XCTAssertEqual(transaction.negotiatedTLSProtocolVersion, "TLSv1.3")
        XCTAssertEqual(transaction.negotiatedTLSCipherSuite?.hasPrefix("TLS_"), true)
        XCTAssertFalse(transaction.isReusedConnection)
        XCTAssertEqual(transaction.countOfRequestBodyBytesSent, 100_000)
        XCTAssertEqual(transaction.countOfResponseBodyBytesReceived, Int64(received))
        XCTAssertEqual(received, 100_000)
    }

    func testBoundInterfaceIsAppliedAndABadOneIsAClearError() async throws {
        let server = try EchoServer()
        var onLoopback = PeerSessionConfiguration.ephemeral
        onLoopback.boundInterfaceName = "lo"
        let session = PeerSession(configuration: onLoopback)
        let task = session.streamTask(withHostName: "127.0.0.1", port: server.port)
        task.resume()
        try await task.write(Data("lo".utf8), timeout: 5)
        let (echo, _) = try await task.readData(ofMinLength: 2, maxLength: 2, timeout: 5)
        XCTAssertEqual(echo, Data("lo".utf8))
        task.cancel()

        var nowhere = PeerSessionConfiguration.ephemeral
        nowhere.boundInterfaceName = "nosuchif0"
        let delegate = RecordingDelegate()
        let failing = PeerSession(configuration: nowhere, delegate: delegate).streamTask(
            withHostName: "127.0.0.1", port: server.port)
        failing.resume()
        try await delegate.wait(for: "complete \(failing.taskIdentifier)")
        guard let failure = (failing.error as? PeerSessionError)?.connectionError, failure.code == .system,
            let call = failure.systemCall
        else {
            return XCTFail("\(String(describing: failing.error))")
        }
        XCTAssertEqual(call, "setsockopt(SO_BINDTODEVICE nosuchif0)")
    }

    func testWaitingTasksGetTheSlotByPriority() async throws {
        let server = try EchoServer()
        var one = PeerSessionConfiguration.ephemeral
        one.maximumConnectionsPerHost = 1
        let session = PeerSession(configuration: one)
        let holder = session.streamTask(withHostName: "127.0.0.1", port: server.port)
        holder.resume()
        try await holder.write(Data("h".utf8), timeout: 5)
        _ = try await holder.readData(ofMinLength: 1, maxLength: 1, timeout: 5)
        let order = Locked<[String]>([])
        let low = session.streamTask(withHostName: "127.0.0.1", port: server.port)
        low.priority = PeerSessionTask.lowPriority
        let high = session.streamTask(withHostName: "127.0.0.1", port: server.port)
        high.priority = PeerSessionTask.highPriority
        for (task, label) in [(low, "low"), (high, "high")] {
            task.resume()
            // Each task writes once and then ends, handing the slot on.
            task.write(Data(label.utf8), timeout: 10) { _ in
                order.withLock { $0.append(label) }
                task.cancel()
            }
        }
        let key = "127.0.0.1:\(server.port)"
        try await eventually("both wait for the slot", timeout: 5, interval: 0.001) {
            session.slots.waitingCount(for: key) >= 2
        }
        XCTAssertEqual(order.value, [], "nothing runs while the only slot is held")
        holder.cancel()
        try await eventually("both written", interval: 0.005) { order.value.count >= 2 }
        XCTAssertEqual(order.value.first, "high", "the higher priority went first: \(order.value)")
        XCTAssertEqual(order.value.count, 2)
        low.cancel()
        high.cancel()
    }

    func testATaskCancelledWhileWaitingForASlotLeavesTheLineAtOnce() async throws {
        let server = try EchoServer()
        var one = PeerSessionConfiguration.ephemeral
        one.maximumConnectionsPerHost = 1
        let delegate = RecordingDelegate()
        let session = PeerSession(configuration: one, delegate: delegate)
        let holder = session.streamTask(withHostName: "127.0.0.1", port: server.port)
        holder.resume()
        try await holder.write(Data("h".utf8), timeout: 5)
        _ = try await holder.readData(ofMinLength: 1, maxLength: 1, timeout: 5)
        let waiter = session.streamTask(withHostName: "127.0.0.1", port: server.port)
        waiter.resume()
        let key = "127.0.0.1:\(server.port)"
        try await eventually("the second task waits for the only slot", timeout: 5, interval: 0.001) {
            session.slots.waitingCount(for: key) >= 1
        }
        waiter.cancel()
        // It leaves while the holder still has the slot (it used to keep its place until then).
        try await eventually("the cancelled task left the line", timeout: 5, interval: 0.001) {
            session.slots.waitingCount(for: key) == 0
        }
        try await delegate.wait(for: "complete \(waiter.taskIdentifier)")
        XCTAssertEqual(waiter.error as? PeerSessionError, .cancelled)
        // The slot is still the holder's and works; a new task gets it once the holder ends.
        try await holder.write(Data("i".utf8), timeout: 5)
        let (echo, _) = try await holder.readData(ofMinLength: 1, maxLength: 1, timeout: 5)
        XCTAssertEqual(echo, Data("i".utf8))
        holder.cancel()
        let next = session.streamTask(withHostName: "127.0.0.1", port: server.port)
        next.resume()
        try await next.write(Data("n".utf8), timeout: 5)
        let (reply, _) = try await next.readData(ofMinLength: 1, maxLength: 1, timeout: 5)
        XCTAssertEqual(reply, Data("n".utf8))
        next.cancel()
    }
}
