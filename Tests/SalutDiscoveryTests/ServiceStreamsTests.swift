import Foundation
import Glibc
import Salut
import SalutStreams
import SalutTestSupport
import XCTest

/// Echoes what arrives on an accepted connection, then closes its output.
@Sendable func echo(_ connection: AcceptedConnection) async {
    guard (try? await connection.streams.open()) != nil else { return }
    do {
        for try await chunk in connection.input.chunks { try await connection.output.write(chunk) }
    } catch {}
    connection.output.close()
}

/// A patterned payload of `count` bytes.
func payload(_ count: Int) -> Data {
    var data = Data(count: count)
    data.withUnsafeMutableBytes { raw in
        for i in 0..<raw.count { raw[i] = UInt8(truncatingIfNeeded: i &* 7 &+ i >> 11) }
    }
    return data
}

/// Accepts connections for an Apple-style auto-listening service and echoes them.
final class AcceptingDelegate: NSObject, NetServiceDelegate, @unchecked Sendable {
    // @unchecked: delegate calls arrive on the main run loop only.
    var accepted = 0
    var published: XCTestExpectation?
    func netServiceDidPublish(_ sender: NetService) { published?.fulfill() }
    func netService(_ sender: NetService, didAcceptConnectionWith inputStream: InputStream, outputStream: OutputStream)
    {
        accepted += 1
        XCTAssertEqual(inputStream.streamStatus, .notOpen, "accepted streams arrive unopened")
        let handed = HandedOver((input: inputStream, output: outputStream))  // owned by the task from here
        Task.detached {
            let connection = handed.value
            connection.input.open(); connection.output.open()
            for try await chunk in connection.input.chunks { try await connection.output.write(chunk) }
            connection.output.close()
        }
    }
}

final class ServiceStreamsTests: XCTestCase {
    func testListenForConnectionsAndGetInputStreamLikeOnMacOS() throws {
        let type = uniqueType("l") + "."
        let service = NetService(domain: "local.", type: type, name: "Listening Service", port: 0)
        let delegate = AcceptingDelegate()
        delegate.published = expectation(description: "published")
        service.delegate = delegate
        service.publish(options: .listenForConnections)
        wait(for: [delegate.published!], timeout: 10)
        XCTAssertGreaterThan(service.port, 0, "the picked port is published and visible")

        // A client that knows only the name: getInputStream resolves and connects.
        let client = NetService(domain: "local.", type: type, name: "Listening Service")
        var input: InputStream?, output: OutputStream?
        XCTAssertTrue(client.getInputStream(&input, outputStream: &output))
        let handed = HandedOver((input: try XCTUnwrap(input), output: try XCTUnwrap(output)))  // the queue's
        let sent = payload(1 << 20)
        let done = expectation(description: "round trip")
        let echoed = Locked<Data?>(nil)
        DispatchQueue.global().async {
            let streams = handed.value
            streams.input.open(); streams.output.open()
            echoed.exchange(roundTrip(streams.input, streams.output, sent))
            done.fulfill()
        }
        wait(for: [done], timeout: 30)  // spins the main run loop, where accepts are delivered
        XCTAssertEqual(echoed.value?.count, sent.count)
        XCTAssertTrue(echoed.value == sent, "echoed bytes differ")
        XCTAssertEqual(delegate.accepted, 1)

        // stop() closes the listener.
        let port = service.port
        service.stop()
        let again = SocketStreams.pair(toHost: "127.0.0.1", port: port)
        again.input.open()
        let status = again.input.read(UnsafeMutablePointer<UInt8>.allocate(capacity: 1), maxLength: 1)
        XCTAssertEqual(status, -1)
        XCTAssertEqual(again.input.streamError as? SocketStreamError, .connectionRefused("127.0.0.1:\(port)"))
    }

    func testAutoListeningServiceWithTLSIdentity() throws {
        let certificate = try TestCertificate.make()
        let type = uniqueType("l")
        let service = NetService(domain: "local.", type: type + ".", name: "Secure Listening", port: 0)
        service.listenerTLS = .server(
            certificateChainFile: certificate.certificateFile, privateKeyFile: certificate.keyFile)
        let delegate = AcceptingDelegate()
        delegate.published = expectation(description: "published")
        service.delegate = delegate
        service.publish(options: .listenForConnections)
        wait(for: [delegate.published!], timeout: 10)
        defer { service.stop() }
        let result = Locked<String>("")
        let done = expectation(description: "secure round trip")
        Task.detached {
            do {
                let pair = try await DiscoveredService(name: "Secure Listening", type: type)
                    .connect(tls: TLSConfiguration(pinnedSHA256: [certificate.certificateSHA256]))
                try await pair.output.write(Data("sealed".utf8))
                pair.output.close()
                let echoed = try await readAll(pair.input)
                let version = pair.input.property(forKey: .salutTLSProtocolVersion) as? String ?? "none"
                result.exchange(String(decoding: echoed, as: UTF8.self) + " over " + version)
            } catch {
                result.exchange("\(error)")
            }
            done.fulfill()
        }
        wait(for: [done], timeout: 30)
        XCTAssertEqual(result.value, "sealed over TLSv1.3")
    }

    func testAListenFailureIsReportedToTheDelegate() throws {
        let taken = try StreamListener(port: 0)
        defer { taken.stop() }
        let service = NetService(domain: "local.", type: uniqueType("l") + ".", name: "Busy", port: Int32(taken.port))
        let recorder = ServiceRecorder()
        service.delegate = recorder
        let failed = recorder.expect("didNotPublish", self)
        service.publish(options: .listenForConnections)
        wait(for: [failed], timeout: 10)
        XCTAssertEqual(recorder.errors, [NetService.ErrorCode.unknownError.rawValue])
        guard let error = service.lastError, error.code == .listenFailed, let reason = error.reason else {
            return XCTFail("\(String(describing: service.lastError))")
        }
        XCTAssertTrue(reason.contains("Address already in use"), reason)
    }

    func testAsyncListenAndConnectByNameWithAndWithoutTLS() async throws {
        let certificate = try TestCertificate.make()
        for secure in [false, true] {
            let type = uniqueType("a")
            let server: TLSConfiguration? =
                secure
                ? .server(certificateChainFile: certificate.certificateFile, privateKeyFile: certificate.keyFile) : nil
            let ad = try await ServiceAdvertisement.listen(name: "Echo", type: type, tls: server)
            XCTAssertNotNil(ad.listener)
            let accepting = Task { for await connection in ad.connections { Task { await echo(connection) } } }
            let client: TLSConfiguration? = secure ? TLSConfiguration(pinnedSHA256: [certificate.publicKeySHA256]) : nil
            let pair = try await withDeadline(20, "connect") {
                try await DiscoveredService(name: ad.name, type: type).connect(tls: client)
            }
            let sent = payload(3 << 20)
            let writer = Task {
                try await pair.output.write(sent); pair.output.close()
            }
            let echoed = try await withDeadline(30, "echo") { try await readAll(pair.input) }
            try await writer.value
            XCTAssertTrue(echoed == sent, "secure \(secure): \(echoed.count) of \(sent.count) bytes came back right")
            if secure { XCTAssertNotNil(pair.input.property(forKey: .salutTLSProtocolVersion)) }
            await ad.withdraw()
            accepting.cancel()
        }
    }

    func testConnectingToAServiceNobodyPublishesFailsAsNotFound() async throws {
        let missing = DiscoveredService(name: "Nobody", type: uniqueType("m"))
        do {
            _ = try await withDeadline(20, "failure") { try await missing.connect(resolveTimeout: 1) }
            XCTFail("connected to nothing")
        } catch let error as SocketStreamError {
            guard error.code == .nameNotFound, let name = error.subject else { return XCTFail("\(error)") }
            XCTAssertEqual(name, missing.description)
        }
    }

    func testConnectRightAfterResolveUsesTheResolvedAddresses() async throws {
        let listener = try StreamListener(port: 0)
        defer { listener.stop() }
        listener.accept { connection in Task { await echo(connection) } }
        let type = "_r\(String(UInt32.random(in: 0..<UInt32.max), radix: 36))._tcp"
        let publisher = try Foreign(["avahi-publish", "-s", "Resolved Once", type, "\(listener.port)"])
        let service = DiscoveredService(name: "Resolved Once", type: type)
        let resolved = try await service.resolve(timeout: 10)
        XCTAssertEqual(resolved.port, listener.port)
        // Withdrawn from the network: wait until a resolution elsewhere (a context of its own,
        // whose results are not shared) no longer finds it.
        publisher.stop()
        XCTAssertTrue(publisher.waitForExit(seconds: 5))
        let probe = DiscoveryContext(label: "probe")
        try await eventually("the service is gone", timeout: 20, interval: 0.05) {
            (try? await service.resolve(timeout: 0.5, context: probe)) == nil
        }
        let pair = try await withDeadline(10, "connect from the resolution") {
            try await service.connect(resolveTimeout: 1)
        }
        try await pair.output.write(Data("still there".utf8))
        pair.output.close()
        var echoed = Data()
        for try await chunk in pair.input.chunks { echoed += chunk }
        XCTAssertEqual(String(decoding: echoed, as: UTF8.self), "still there")
    }

    func testAfterARefusalTheRememberedResolutionIsNotUsedAgain() async throws {
        // Resolved on one port; then the service moves to another (a restart), and the old
        // port refuses. The connection after that refusal must ask the network again.
        let old = try StreamListener(port: 0)
        let type = "_v\(String(UInt32.random(in: 0..<UInt32.max), radix: 36))._tcp"
        let first = try Foreign(["avahi-publish", "-s", "Moving", type, "\(old.port)"])
        let service = DiscoveredService(name: "Moving", type: type)
        let resolved = try await service.resolve(timeout: 10)
        let resolvedAt = ContinuousClock.now
        XCTAssertEqual(resolved.port, old.port)
        old.stop()
        first.stop()
        XCTAssertTrue(first.waitForExit(seconds: 5))
        let moved = try StreamListener(port: 0)
        defer { moved.stop() }
        moved.accept { connection in Task { await echo(connection) } }
        let second = try Foreign(["avahi-publish", "-s", "Moving", type, "\(moved.port)"])
        defer { second.stop() }
        let probe = DiscoveryContext(label: "probe")
        try await eventually("the new port is published", timeout: 20, interval: 0.05) {
            (try? await service.resolve(timeout: 0.5, context: probe))?.port == moved.port
        }
        // The remembered resolution still names the old port: refused (if it is still
        // remembered: it lasts 10 s, and a slow machine may have taken longer to get here).
        guard ContinuousClock.now - resolvedAt < .seconds(9) else {
            throw XCTSkip("the service took more than 9 s to move: the remembered resolution may have lapsed")
        }
        do {
            let pair = try await withDeadline(10, "connect to the old port") {
                try await service.connect(resolveTimeout: 2)
            }
            pair.output.close()
            XCTFail("the old port took a connection")
        } catch let error as SocketStreamError {
            XCTAssertEqual(error.code, .connectionRefused, "\(error)")
        }
        // The next connection resolves afresh and reaches the new port.
        let pair = try await withDeadline(10, "connect to the new port") {
            try await service.connect(resolveTimeout: 2)
        }
        try await pair.output.write(Data("moved".utf8))
        pair.output.close()
        var echoed = Data()
        for try await chunk in pair.input.chunks { echoed += chunk }
        XCTAssertEqual(String(decoding: echoed, as: UTF8.self), "moved")
    }
}

/// Everything until the end of the data.
func readAll(_ input: InputStream) async throws -> Data {
    var received = Data()
    for try await chunk in input.chunks { received.append(chunk) }
    return received
}
