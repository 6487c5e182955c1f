import Foundation
import Glibc
import Salut
import SalutStreams
import SalutTestSupport
import XCTest

/// A plain POSIX echo server on loopback, one connection at a time, for the streams to talk to.
final class EchoListener: @unchecked Sendable {
    // @unchecked: `fd` and `port` are set in init; the accept loop owns everything after.
    let fd: Int32
    let port: Int

    init(ipv6: Bool = false) throws {
        let fd = socket(ipv6 ? AF_INET6 : AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        self.fd = fd
        var yes: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, socklen_t(MemoryLayout<Int32>.size))
        let address =
            ipv6
            ? SocketAddress(ipv6: Array(repeating: 0, count: 15) + [1], port: 0)
            : SocketAddress(ipv4: [127, 0, 0, 1], port: 0)
        let bound = address.data.withUnsafeBytes {
            bind(fd, $0.baseAddress!.assumingMemoryBound(to: sockaddr.self), socklen_t($0.count))
        }
        guard bound == 0, listen(fd, 16) == 0 else { throw POSIXError(.EADDRINUSE) }
        var storage = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        _ = withUnsafeMutablePointer(to: &storage) {
            getsockname(fd, UnsafeMutableRawPointer($0).assumingMemoryBound(to: sockaddr.self), &length)
        }
        port = Int(SocketAddress(withUnsafeBytes(of: &storage) { Data($0.prefix(Int(length))) })!.port)
        let listener = fd
        Thread {
            while true {
                let client = accept(listener, nil, nil)
                if client < 0 { return }
                var buffer = [UInt8](repeating: 0, count: 65536)
                while true {
                    let n = read(client, &buffer, buffer.count)
                    if n <= 0 { break }
                    var off = 0
                    while off < n {
                        let w = buffer.withUnsafeBufferPointer { write(client, $0.baseAddress! + off, n - off) }
                        if w <= 0 { break }
                        off += w
                    }
                }
                close(client)
            }
        }.start()
    }

    deinit { shutdown(fd, Int32(SHUT_RDWR)); close(fd) }
}

/// Writes `payload`, closes the output, and reads everything back (blocking, unscheduled).
func roundTrip(_ input: InputStream, _ output: OutputStream, _ payload: Data) -> Data {
    let writer = HandedOver(output)  // the writer thread's from here
    DispatchQueue.global().async {
        payload.withUnsafeBytes { raw in
            var off = 0
            while off < raw.count {
                let n = writer.value.write(
                    raw.bindMemory(to: UInt8.self).baseAddress! + off, maxLength: raw.count - off)
                if n <= 0 { return }
                off += n
            }
        }
        writer.value.close()
    }
    var received = Data()
    var buffer = [UInt8](repeating: 0, count: 32768)
    while true {
        let n = input.read(&buffer, maxLength: buffer.count)
        if n <= 0 { break }
        received.append(buffer, count: n)
    }
    return received
}

final class StreamsToHostTests: XCTestCase {
    func testRoundTripThroughOurListenerOverIPv4() throws {
        let listener = try EchoListener()
        var input: InputStream?, output: OutputStream?
        Stream.getStreamsToHost(withName: "127.0.0.1", port: listener.port, inputStream: &input, outputStream: &output)
        input!.open(); output!.open()
        let payload = Data((0..<3_000_000).map { UInt8(truncatingIfNeeded: $0 &* 7) })
        XCTAssertEqual(roundTrip(input!, output!, payload), payload)
        XCTAssertEqual(input!.streamStatus, .atEnd)
    }

    func testIPv6LiteralToSocat() throws {
        let port = Int.random(in: 20000..<60000)
        let socat = try Foreign(["socat", "TCP6-LISTEN:\(port),bind=[::1],reuseaddr", "EXEC:cat"])
        defer { socat.stop() }
        // Wait (at most 5 s) until socat listens: its port shows in /proc/net/tcp6.
        eventually(timeout: 5, interval: 0.02) {
            (try? String(contentsOfFile: "/proc/net/tcp6", encoding: .utf8))?.contains(
                String(format: ":%04X 00000000000000000000000000000000:0000 0A", port)) ?? false
        }
        var input: InputStream?, output: OutputStream?
        Stream.getStreamsToHost(withName: "::1", port: port, inputStream: &input, outputStream: &output)
        input!.open(); output!.open()
        let payload = Data("hello over IPv6\n".utf8)
        XCTAssertEqual(roundTrip(input!, output!, payload), payload)
    }

    func testRefusedPortIsAClearError() {
        // Nothing listens on port 1 here (tcpmux is not run on these machines).
        var input: InputStream?, output: OutputStream?
        var byte: UInt8 = 0
        Stream.getStreamsToHost(withName: "127.0.0.1", port: 1, inputStream: &input, outputStream: &output)
        input!.open()
        XCTAssertEqual(input!.read(&byte, maxLength: 1), -1)
        XCTAssertEqual(input!.streamStatus, .error)
        XCTAssertEqual(input!.streamError as? SocketStreamError, .connectionRefused("127.0.0.1:1"))
    }

    func testUnknownNameIsAClearError() {
        var input: InputStream?, output: OutputStream?
        Stream.getStreamsToHost(withName: "no-such-host.invalid", port: 80, inputStream: &input, outputStream: &output)
        output!.open()
        XCTAssertEqual(output!.write([1], maxLength: 1), -1)
        guard let error = output!.streamError as? SocketStreamError, error.code == .nameNotFound,
            let host = error.subject
        else {
            return XCTFail("expected nameNotFound, got \(String(describing: output!.streamError))")
        }
        XCTAssertEqual(host, "no-such-host.invalid")
    }

    func testLocalNameResolvesThroughAvahi() async throws {
        let listener = try EchoListener()
        let info = try await DiscoveryContext.shared.daemonInfo()
        let result = await Task.detached {
            var input: InputStream?, output: OutputStream?
            Stream.getStreamsToHost(
                withName: info.hostNameFQDN, port: listener.port, inputStream: &input, outputStream: &output)
            input!.open(); output!.open()
            return roundTrip(input!, output!, Data("via .local".utf8))
        }.value
        XCTAssertEqual(result, Data("via .local".utf8))
    }

    func testScheduledStreamsGetOpenSpaceBytesAndEnd() throws {
        let listener = try EchoListener()
        let worker = RunLoopThread()
        defer { worker.stop() }
        var input: InputStream?, output: OutputStream?
        Stream.getStreamsToHost(withName: "127.0.0.1", port: listener.port, inputStream: &input, outputStream: &output)
        let log = SocketEventLog()
        input!.delegate = log; output!.delegate = log
        input!.schedule(in: worker.runLoop, forMode: .default)
        output!.schedule(in: worker.runLoop, forMode: .default)
        XCTAssertEqual(input!.streamStatus, .notOpen)
        input!.open(); output!.open()
        XCTAssertTrue(log.wait { $0.contains(where: { $0.0 === output! && $0.1 == .hasSpaceAvailable }) }, "\(log.all)")
        XCTAssertEqual(log.all.first { $0.0 === output! }?.1, .openCompleted)
        XCTAssertEqual(output!.write([1, 2, 3], maxLength: 3), 3)
        XCTAssertTrue(log.wait { $0.contains(where: { $0.0 === input! && $0.1 == .hasBytesAvailable }) })
        var buffer = [UInt8](repeating: 0, count: 8)
        var got: [UInt8] = []
        while got.count < 3 { let n = input!.read(&buffer, maxLength: 8); if n <= 0 { break }; got += buffer.prefix(n) }
        XCTAssertEqual(got, [1, 2, 3])
        output!.close()  // half-close: the echo server sees EOF and closes its side
        XCTAssertTrue(log.wait { $0.contains(where: { $0.0 === input! && $0.1 == .endEncountered }) }, "\(log.all)")
    }
}

/// Stream events with the stream they came from.
final class SocketEventLog: NSObject, StreamDelegate, @unchecked Sendable {
    // @unchecked: its only state, `events`, is a `Locked` box.
    private let events = Locked<[(Stream, Stream.Event)]>([])
    func stream(_ aStream: Stream, handle eventCode: Stream.Event) {
        events.withLock { $0.append((aStream, eventCode)) }
    }
    var all: [(Stream, Stream.Event)] { events.value }
    func wait(seconds: Double = 5, until predicate: ([(Stream, Stream.Event)]) -> Bool) -> Bool {
        eventually(timeout: seconds, interval: 0.005) { predicate(all) }
    }
}
