import Foundation
import Glibc
@testable import SalutStreams
import SalutTestSupport
import XCTest

/// What a listener's ``ConnectionLimits`` do to peers that connect and then stall, seen from
/// the peer (its socket is closed) and from the server (the streams' error).
final class ConnectionLimitsTests: SalutTestCase {
    var certificate: TestCertificate!

    override func setUpWithError() throws {
        certificate = try TestCertificate.make()
    }

    var serverTLS: TLSConfiguration {
        .server(certificateChainFile: certificate.certificateFile, privateKeyFile: certificate.keyFile)
    }

    /// Collects the error each accepted connection's open reports.
    final class Outcomes: @unchecked Sendable {
        // @unchecked: its only state, `errors`, is a `Locked` box.
        private let errors = Locked<[SocketStreamError?]>([])
        func add(_ error: SocketStreamError?) { errors.withLock { $0.append(error) } }
        var all: [SocketStreamError?] { errors.value }
    }

    /// Opens every accepted connection and records how the open ended; echoes what arrives.
    func serve(_ listener: StreamListener, into outcomes: Outcomes) {
        listener.accept { connection in
            Task {
                do {
                    try await connection.streams.open()
                    outcomes.add(nil)
                    for try await chunk in connection.input.chunks { try await connection.output.write(chunk) }
                    connection.output.close()
                } catch {
                    outcomes.add(error as? SocketStreamError ?? .cancelled)
                }
            }
        }
    }

    func testASilentPeerOnATLSListenerIsCutAtTheHandshakeBound() async throws {
        let listener = try StreamListener(port: 0, tls: serverTLS, limits: ConnectionLimits(handshakeTimeout: 0.3))
        defer { listener.stop() }
        let outcomes = Outcomes()
        serve(listener, into: outcomes)
        let silent = try RawClient(port: Int(listener.port))
        XCTAssertTrue(silent.waitForClose(seconds: 10), "the silent peer was never cut")
        try await eventually("the server saw the error") { outcomes.all.count == 1 }
        XCTAssertEqual(outcomes.all, [.limitExceeded("the TLS handshake did not finish within 0.3 s")])
        // The listener counts the connection out on its own queue, which may come a moment after
        // the streams heard the error (seen under ThreadSanitizer's slower clock).
        try await eventually("no connection left setting up") { listener.connectionsSettingUp == 0 }
    }

    func testAPeerThatSendsPartOfAClientHelloAndStopsIsCutToo() async throws {
        let listener = try StreamListener(port: 0, tls: serverTLS, limits: ConnectionLimits(handshakeTimeout: 0.3))
        defer { listener.stop() }
        listener.accept { _ in }  // never opened: the bound runs from the accept all the same
        let stalled = try RawClient(port: Int(listener.port))
        // a ClientHello's first bytes
        stalled.send(Data([0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03]))
        XCTAssertTrue(stalled.waitForClose(seconds: 10))
    }

    func testAPlainPeerThatSaysNothingIsCutButOneThatTalksIsServed() async throws {
        let listener = try StreamListener(port: 0, limits: ConnectionLimits(firstByteTimeout: 0.3))
        defer { listener.stop() }
        let outcomes = Outcomes()
        serve(listener, into: outcomes)
        let silent = try RawClient(port: Int(listener.port))
        let talker = try RawClient(port: Int(listener.port))
        talker.send(Data("ping".utf8))
        XCTAssertTrue(silent.waitForClose(seconds: 10))
        XCTAssertEqual(talker.receive(count: 4, seconds: 10), Data("ping".utf8))
        talker.send(Data("pong".utf8))  // well after the bound: still served
        XCTAssertEqual(talker.receive(count: 4, seconds: 10), Data("pong".utf8))
    }

    func testAServerThatSpeaksFirstIsNotCutByTheFirstByteBound() async throws {
        let listener = try StreamListener(port: 0, limits: ConnectionLimits(firstByteTimeout: 0.2))
        defer { listener.stop() }
        listener.accept { connection in
            Task {
                try await connection.streams.open()
                try await connection.output.write(Data("hello\n".utf8))
                // Then silence both ways, well past the bound, before the second line.
                try await Task.sleep(nanoseconds: 600_000_000)
                try await connection.output.write(Data("still here\n".utf8))
                connection.output.close()
            }
        }
        let client = try RawClient(port: Int(listener.port))
        let all = client.receive(count: 17, seconds: 10)
        XCTAssertEqual(String(decoding: all, as: UTF8.self), "hello\nstill here\n")
    }

    func testAnIdleConnectionIsCutAndItsStreamsSaySo() async throws {
        let listener = try StreamListener(port: 0, limits: ConnectionLimits(idleTimeout: 0.3))
        defer { listener.stop() }
        let failure = Outcomes()
        listener.accept { connection in
            Task {
                try await connection.streams.open()
                do {
                    for try await _ in connection.input.chunks {}
                    failure.add(nil)
                } catch {
                    failure.add(error as? SocketStreamError)
                }
            }
        }
        let client = try RawClient(port: Int(listener.port))
        client.send(Data("x".utf8))
        XCTAssertTrue(client.waitForClose(seconds: 10))
        try await eventually("the reader saw the error") { failure.all.count == 1 }
        XCTAssertEqual(failure.all, [.limitExceeded("idle for 0.3 s")])
    }

    func testAFloodOfSilentPeersDoesNotKeepAPromptOneOut() async throws {
        // No handshake bound worth the name: only the cap on connections setting up protects.
        let limits = ConnectionLimits(handshakeTimeout: 3600, firstByteTimeout: 3600, maximumConnectionsSettingUp: 8)
        let listener = try StreamListener(port: 0, tls: serverTLS, limits: limits)
        defer { listener.stop() }
        let outcomes = Outcomes()
        serve(listener, into: outcomes)
        let silent = try (0..<40).map { _ in try RawClient(port: Int(listener.port)) }
        // The 32 oldest were cut to make room, the 8 newest wait.
        for client in silent.prefix(32) { XCTAssertTrue(client.waitForClose(seconds: 10)) }
        try await eventually("8 left setting up") { listener.connectionsSettingUp == 8 }
        let tls = TLSConfiguration(pinnedSHA256: [certificate.certificateSHA256])
        let pair = SocketStreams.pair(toHost: "127.0.0.1", port: Int(listener.port), tls: tls)
        try await withDeadline(10, "a prompt TLS client is served") {
            try await pair.open()
            try await pair.output.write(Data("hi".utf8))
            let echoed = try await readBytes(pair.input, count: 2)
            XCTAssertEqual(echoed, Data("hi".utf8))
        }
        pair.input.close(); pair.output.close()
        XCTAssertEqual(outcomes.all.filter { $0 == nil }.count, 1)
        XCTAssertTrue(outcomes.all.compactMap { $0 }.allSatisfy { $0.code == .limitExceeded })
    }

    /// One address flooding the set-up places cuts its own connections, not another host's:
    /// the oldest connection of the address with the most goes first.
    func testOneAddressFloodingCutsItsOwnConnectionsNotAnotherHosts() async throws {
        let limits = ConnectionLimits(handshakeTimeout: 3600, firstByteTimeout: 3600, maximumConnectionsSettingUp: 4)
        let listener = try StreamListener(port: 0, limits: limits)
        defer { listener.stop() }
        let served = Locked<[Data]>([])
        listener.accept { connection in
            Task {
                guard (try? await connection.streams.open()) != nil else { return }
                guard let first = try? await readBytes(connection.input, count: 2) else { return }
                served.withLock { $0.append(first) }
                try? await connection.output.write(first)
                connection.output.close()
            }
        }
        let early = try (0..<3).map { _ in try RawClient(port: Int(listener.port), from: "127.0.0.1") }
        let neighbour = try RawClient(port: Int(listener.port), from: "127.0.0.2")
        try await eventually("4 setting up") { listener.connectionsSettingUp == 4 }
        // Twenty more from the flooding address: each cuts one of its own.
        let flood = try (0..<20).map { _ in try RawClient(port: Int(listener.port), from: "127.0.0.1") }
        for client in early { XCTAssertTrue(client.waitForClose(seconds: 10), "the flooder's oldest were cut") }
        for client in flood.prefix(17) { XCTAssertTrue(client.waitForClose(seconds: 10)) }
        // The neighbour, silent all along, is still there and served once it speaks.
        neighbour.send(Data("hi".utf8))
        XCTAssertEqual(neighbour.receive(count: 2, seconds: 10), Data("hi".utf8), "the other host was not cut")
        XCTAssertEqual(served.withLock { $0 }, [Data("hi".utf8)])
    }

    func testTheConnectionCutIsTheOldestOfTheAddressWithTheMost() {
        // Oldest first, the newcomer last.
        XCTAssertEqual(SetupQueue.indexToCut(sources: ["a", "b", "a", "c"]), 0, "a has the most: its oldest")
        XCTAssertEqual(SetupQueue.indexToCut(sources: ["b", "a", "a", "a"]), 1, "the newcomer's own address")
        XCTAssertEqual(SetupQueue.indexToCut(sources: ["a", "b", "b", "a"]), 0, "a tie: the older of the two")
        XCTAssertEqual(SetupQueue.indexToCut(sources: ["a", "b", "c", "d"]), 0, "one each: the oldest")
        XCTAssertEqual(SetupQueue.indexToCut(sources: ["b", "a"]), 0, "never the newcomer")
    }

    func testAConnectionCountsUnderItsWholeAddress() throws {
        func address(_ text: String) throws -> SocketAddress {
            try XCTUnwrap(SocketAddress.literal(text, port: 80))
        }
        XCTAssertEqual(SetupQueue.source(of: try address("198.18.0.7")), "198.18.0.7")
        XCTAssertEqual(SetupQueue.source(of: try address("::ffff:198.18.0.7")), "198.18.0.7")
        // Two neighbours on one link share its /64: they are two addresses, not one.
        XCTAssertNotEqual(
            SetupQueue.source(of: try address("2001:db8:1:2::1")), SetupQueue.source(of: try address("2001:db8:1:2::9"))
        )
        XCTAssertEqual(
            SetupQueue.source(of: try address("2001:db8:1:2::1")), SetupQueue.source(of: try address("2001:db8:1:2::1"))
        )
        XCTAssertNil(SetupQueue.source(of: nil))
    }

    func testADialledTLSHandshakeWithASilentServerIsBounded() async throws {
        // A server that accepts and never answers: our ClientHello goes unanswered.
        let listener = try StreamListener(
            port: 0, limits: ConnectionLimits(handshakeTimeout: nil, firstByteTimeout: nil))
        defer { listener.stop() }
        let held = Locked<[AcceptedConnection]>([])
        listener.accept { connection in held.withLock { $0.append(connection) } }
        defer { held.withLock { $0.removeAll() } }
        let pair = SocketStreams.pair(
            toHost: "127.0.0.1", port: Int(listener.port),
            tls: TLSConfiguration(validatesCertificateChain: false))
        let error = await openError(pair)
        XCTAssertEqual(error, .limitExceeded("the TLS handshake did not finish within 10 s"))
    }
}
