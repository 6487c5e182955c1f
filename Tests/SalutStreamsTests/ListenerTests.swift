import Foundation
import Glibc
import SalutStreams
import SalutTestSupport
import XCTest

final class ListenerTests: SalutTestCase {
    func testListensOnIPv4AndIPv6OnTheSamePort() async throws {
        let listener = try StreamListener(port: 0)
        defer { listener.stop() }
        XCTAssertNotEqual(listener.port, 0)
        XCTAssertEqual(Set(listener.localAddresses.map(\.isIPv6)), [false, true])
        XCTAssertTrue(listener.localAddresses.allSatisfy { $0.port == listener.port })
        let accepted = Task {
            var families: [Bool] = []
            for await connection in listener.connections {
                try await connection.streams.open()
                let line = try await readBytes(connection.input, count: 3)
                try await connection.output.write(line)
                connection.output.close()
                families.append(connection.remoteAddress?.isIPv6 ?? false)
                if families.count == 2 { break }
            }
            return families
        }
        for host in ["127.0.0.1", "::1"] {
            let pair = SocketStreams.pair(toHost: host, port: Int(listener.port))
            try await withDeadline(10, "connect \(host)") { try await pair.open() }
            try await pair.output.write(Data("abc".utf8))
            let echoed = try await withDeadline(10, "echo") { try await readBytes(pair.input, count: .max) }
            XCTAssertEqual(echoed, Data("abc".utf8), host)
            XCTAssertEqual(
                pair.input.property(forKey: .salutRemoteAddress) as? String,
                host == "::1" ? "[::1]:\(listener.port)" : "127.0.0.1:\(listener.port)")
            pair.input.close(); pair.output.close()
        }
        let families = try await withDeadline(10, "accepts") { try await accepted.value }
        XCTAssertEqual(families, [false, true])
    }

    func testStopClosesTheListenerAndEndsTheSequence() async throws {
        let listener = try StreamListener(port: 0)
        let port = Int(listener.port)
        let ended = Task {
            for await _ in listener.connections {}; return true
        }
        listener.stop()
        let sequenceEnded = try await withDeadline(10, "sequence end") { await ended.value }
        XCTAssertTrue(sequenceEnded)
        let pair = SocketStreams.pair(toHost: "127.0.0.1", port: port)
        let error = await openError(pair)
        XCTAssertEqual(error, .connectionRefused("127.0.0.1:\(port)"))
    }

    func testAPortInUseIsATypedError() throws {
        let first = try StreamListener(port: 0)
        defer { first.stop() }
        XCTAssertThrowsError(try StreamListener(port: Int(first.port))) { error in
            guard let error = error as? SocketStreamError, error.code == .system,
                let call = error.systemCall, let code = error.errorNumber
            else { return XCTFail("\(error)") }
            XCTAssertTrue(call.hasPrefix("bind"))
            XCTAssertEqual(code, EADDRINUSE)
        }
        XCTAssertThrowsError(try StreamListener(port: 70000)) { error in
            XCTAssertEqual(error as? SocketStreamError, .invalidAddress("port 70000"))
        }
    }

    func testAnAcceptedConnectionThatIsNeverOpenedIsClosed() async throws {
        let listener = try StreamListener(port: 0)
        defer { listener.stop() }
        listener.accept { _ in }  // dropped unopened
        let pair = SocketStreams.pair(toHost: "127.0.0.1", port: Int(listener.port))
        try await withDeadline(10, "connect") { try await pair.open() }
        let got = try await withDeadline(10, "end of data") { try await readBytes(pair.input, count: .max) }
        XCTAssertEqual(got.count, 0)
        XCTAssertEqual(pair.input.streamStatus, .atEnd)
    }

    /// A dead IPv6 address (a socket whose accept queue is full drops SYNs, so connecting hangs)
    /// comes first; Happy Eyeballs starts IPv4 250 ms later, and that wins.
    func testHappyEyeballsFallsBackFromADeadIPv6Address() async throws {
        let dead = socket(AF_INET6, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(dead) }
        let loopback6 = SocketAddress(ipv6: Array(repeating: 0, count: 15) + [1], port: 0)
        XCTAssertEqual(
            loopback6.data.withUnsafeBytes {
                bind(dead, $0.baseAddress!.assumingMemoryBound(to: sockaddr.self), socklen_t($0.count))
            }, 0)
        XCTAssertEqual(listen(dead, 0), 0)
        var storage = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        _ = withUnsafeMutablePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(dead, $0, &length) }
        }
        let deadAddress = SocketAddress(withUnsafeBytes(of: &storage) { Data($0.prefix(Int(length))) })!
        // Fill the accept queue so that further SYNs are dropped.
        var fillers: [Int32] = []
        defer { fillers.forEach { close($0) } }
        for _ in 0..<4 {
            let fd = socket(AF_INET6, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0)
            _ = deadAddress.data.withUnsafeBytes {
                connect(fd, $0.baseAddress!.assumingMemoryBound(to: sockaddr.self), socklen_t($0.count))
            }
            fillers.append(fd)
        }
        let live = try StreamListener(port: 0)
        defer { live.stop() }
        live.accept { connection in Task { try? await connection.streams.open() } }
        let resolver: AddressResolver = { _, _ in
            [deadAddress, SocketAddress(ipv4: [127, 0, 0, 1], port: live.port)]
        }
        let pair = SocketStreams.pair(toHost: "dual.test", port: 1, resolver: resolver)
        try await withDeadline(20, "connect") { try await pair.open() }
        XCTAssertEqual(pair.input.property(forKey: .salutRemoteAddress) as? String, "127.0.0.1:\(live.port)")
        pair.input.close(); pair.output.close()
    }

    func testClosingBothStreamsWhileConnectingAbandonsTheAttempt() async throws {
        // A name look-up that ends only once the test closed both streams.
        let (closed, closing) = AsyncStream.makeStream(of: Void.self)
        let slow: AddressResolver = { _, _ in
            for await _ in closed {}
            return [SocketAddress(ipv4: [127, 0, 0, 1], port: 9)]
        }
        let pair = SocketStreams.pair(toHost: "slow.test", port: 9, resolver: slow)
        let (events, sink) = AsyncStream.makeStream(of: ConnectionEvent.self)
        pair.observeConnection { sink.yield($0) }
        pair.input.open(); pair.output.open()
        XCTAssertEqual(pair.input.streamStatus, .opening)
        pair.input.close(); pair.output.close()
        closing.finish()
        XCTAssertEqual(pair.input.streamStatus, .closed)
        XCTAssertEqual(pair.output.streamStatus, .closed)
        let outcome = try await withDeadline(10, "abandoned") { () -> String in
            for await event in events {
                switch event {
                case .failed(let error): return "failed: \(error)"
                case .ready: return "connected"
                default: continue
                }
            }
            return "no outcome"
        }
        XCTAssertEqual(outcome, "failed: cancelled")
    }
}
