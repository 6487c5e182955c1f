import Dispatch
import Foundation
import Glibc
import SalutStreams
import SalutTestSupport
import XCTest

/// A dialled plain connection reads from the network only once its input stream is used (read,
/// asked for bytes, scheduled, or read through the async API): until then what the peer sends
/// waits in the socket. Nothing may be lost by waiting: these tests have the peer send and
/// close before the input is first used, then check that every byte and the end arrive.
final class DormantInputTests: SalutTestCase {
    /// A loopback server that accepts one connection, waits for `expect` bytes from the client,
    /// answers `reply` and closes. Returns its port, and a semaphore signalled when it is done
    /// (with what it received).
    /// With `holdOpen`, `done` is signalled once the reply is sent, and the server then reads
    /// until the client's end before it closes.
    private func server(
        expect: Int, reply: [UInt8], holdOpen: Bool = false
    ) throws -> (port: Int, done: DispatchSemaphore, received: Locked<[UInt8]>) {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = UInt32(0x7f00_0001).bigEndian
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(fd, $0, length) == 0 && listen(fd, 4) == 0 && getsockname(fd, $0, &length) == 0
            }
        }
        guard fd >= 0, bound else { throw POSIXError(.EADDRNOTAVAIL) }
        let done = DispatchSemaphore(value: 0)
        let received = Locked<[UInt8]>([])
        Thread {
            defer { close(fd); done.signal() }
            var entry = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            guard poll(&entry, 1, 10_000) == 1 else { return }
            let client = accept(fd, nil, nil)
            guard client >= 0 else { return }
            defer { close(client) }
            var timeout = timeval(tv_sec: 10, tv_usec: 0)
            setsockopt(client, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
            var got: [UInt8] = []
            var chunk = [UInt8](repeating: 0, count: 256)
            while got.count < expect {
                let n = recv(client, &chunk, chunk.count, 0)
                if n <= 0 { break }
                got += chunk[..<n]
            }
            received.exchange(got)
            _ = reply.withUnsafeBytes { send(client, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            if holdOpen {
                done.signal()
                while recv(client, &chunk, chunk.count, 0) > 0 {}
            }
        }.start()
        return (Int(UInt16(bigEndian: address.sin_port)), done, received)
    }

    func testBytesAndTheEndSentBeforeTheFirstReadAllArrive() async throws {
        let reply = Array("sent before anyone read\n".utf8)
        let (port, done, received) = try server(expect: 4, reply: reply)
        let pair = SocketStreams.pair(toHost: "127.0.0.1", port: port)
        pair.input.open()
        pair.output.open()
        XCTAssertEqual(pair.output.write(Array("ping".utf8), maxLength: 4), 4, "writing does not wait for the input")
        // The server has read the ping, answered and closed before the input is first used.
        XCTAssertEqual(done.wait(timeout: .now() + 10), .success, "the server never got the ping")
        XCTAssertEqual(received.value, Array("ping".utf8))
        let got = try await withDeadline(10, "reading the answer") {
            var got: [UInt8] = []
            let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 64, alignment: 1)
            defer { buffer.deallocate() }
            while true {
                let n = try await pair.input.read(into: buffer)
                if n == 0 { return got }
                got += buffer[..<n]
            }
        }
        XCTAssertEqual(got, reply, "every byte, then the end of the data")
        XCTAssertEqual(pair.input.streamStatus, .atEnd)
        pair.input.close()
        pair.output.close()
    }

    func testABlockingReadWakesTheInput() throws {
        let reply = Array("answer".utf8)
        let (port, done, _) = try server(expect: 1, reply: reply)
        let pair = SocketStreams.pair(toHost: "127.0.0.1", port: port)
        pair.input.open()
        pair.output.open()
        XCTAssertEqual(pair.output.write([0x21], maxLength: 1), 1)
        XCTAssertEqual(done.wait(timeout: .now() + 10), .success)
        // A blocking read on a thread of its own, bounded by the wait below.
        let finished = DispatchSemaphore(value: 0)
        let result = Locked<[UInt8]>([])
        let input = pair.input
        nonisolated(unsafe) let unsafeInput = input
        Thread {
            var got: [UInt8] = []
            var buffer = [UInt8](repeating: 0, count: 64)
            while true {
                let n = unsafeInput.read(&buffer, maxLength: buffer.count)
                if n <= 0 { break }
                got += buffer[..<n]
            }
            result.exchange(got)
            finished.signal()
        }.start()
        XCTAssertEqual(
            finished.wait(timeout: .now() + 10), .success, "a blocking read of a dormant input never returned")
        XCTAssertEqual(result.value, reply)
        pair.input.close()
        pair.output.close()
    }

    func testAQueueSetAfterTheBytesArrivedGetsThemAsEvents() throws {
        let reply = Array("events for bytes that waited".utf8)
        let (port, done, _) = try server(expect: 1, reply: reply)
        let pair = SocketStreams.pair(toHost: "127.0.0.1", port: port)
        pair.input.open()
        pair.output.open()
        XCTAssertEqual(pair.output.write([0x21], maxLength: 1), 1)
        XCTAssertEqual(done.wait(timeout: .now() + 10), .success)
        let reader = EventReader()
        pair.input.delegate = reader
        CFReadStreamSetDispatchQueue(pair.input, reader.queue)
        XCTAssertEqual(
            reader.ended.wait(timeout: .now() + 10), .success, "no end event for a dormant input given a queue")
        XCTAssertEqual(reader.queue.sync { reader.received }, reply)
        pair.input.close()
        pair.output.close()
    }
}

/// Reads whatever its stream's events announce, on its own queue, until the end.
private final class EventReader: NSObject, StreamDelegate, @unchecked Sendable {
    // @unchecked: `received` is used only on `queue`, where the delegate calls come.
    let queue = DispatchQueue(label: "dormant-reader")
    let ended = DispatchSemaphore(value: 0)
    var received: [UInt8] = []

    func stream(_ aStream: Stream, handle eventCode: Stream.Event) {
        guard let input = aStream as? InputStream else { return }
        switch eventCode {
        case .hasBytesAvailable:
            var buffer = [UInt8](repeating: 0, count: 64)
            let n = input.read(&buffer, maxLength: buffer.count)
            if n > 0 { received += buffer[..<n] }
        case .endEncountered, .errorOccurred:
            ended.signal()
        default:
            break
        }
    }
}

extension DormantInputTests {
    func testHasBytesAvailableAsTheFirstUseSeesWhatIsAlreadyThere() throws {
        let reply = Array("waiting in the socket".utf8)
        let (port, done, _) = try server(expect: 1, reply: reply)
        let pair = SocketStreams.pair(toHost: "127.0.0.1", port: port)
        pair.input.open()
        pair.output.open()
        XCTAssertEqual(pair.output.write([0x21], maxLength: 1), 1)
        XCTAssertEqual(done.wait(timeout: .now() + 10), .success)
        // The reply and the end are in the socket before anything looked at the input.
        var entry = pollfd(fd: -1, events: 0, revents: 0)
        _ = poll(&entry, 0, 100)  // a moment for loopback to deliver the FIN (no waiting on Salut)
        XCTAssertTrue(pair.input.hasBytesAvailable, "the first look finds the bytes already in the socket")
        var buffer = [UInt8](repeating: 0, count: 64)
        var got: [UInt8] = []
        while pair.input.hasBytesAvailable {
            let n = pair.input.read(&buffer, maxLength: buffer.count)
            if n <= 0 { break }
            got += buffer[..<n]
        }
        XCTAssertEqual(got, reply, "a loop on hasBytesAvailable reads it all")
        pair.input.close()
        pair.output.close()
    }

    func testAWriterThatNeverReadsLetsTheSocketGoWhenBothEndsHaveClosed() throws {
        let (port, done, _) = try server(expect: 2, reply: [])
        let pair = SocketStreams.pair(toHost: "127.0.0.1", port: port)
        pair.input.open()
        pair.output.open()
        XCTAssertEqual(pair.output.write([0x68, 0x69], maxLength: 2), 2)
        XCTAssertEqual(done.wait(timeout: .now() + 10), .success, "the server got the bytes and closed")
        let local = pair.output.property(forKey: .salutLocalAddress) as? String
        let localPort = try XCTUnwrap(
            local?.split(separator: ":").last.flatMap { UInt16($0) }, "the connection's local port")
        pair.output.close()
        // The input stream is still open and was never used: the peer's end must still let the
        // connection go.
        eventually(timeout: 10, interval: 0.02) { !holdsSocket(boundTo: localPort) }
        XCTAssertFalse(holdsSocket(boundTo: localPort), "the socket stayed open while the unused input stream was held")
        XCTAssertEqual(pair.input.streamStatus, .open, "the input stream itself is untouched")
        pair.input.close()
    }

    /// Whether one of this process's descriptors is a socket bound to `port` on this end.
    private func holdsSocket(boundTo port: UInt16) -> Bool {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? []
        for fd in names.compactMap(Int32.init) {
            var address = sockaddr_in()
            var length = socklen_t(MemoryLayout<sockaddr_in>.size)
            let named = withUnsafeMutablePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) == 0 }
            }
            if named, address.sin_family == sa_family_t(AF_INET), UInt16(bigEndian: address.sin_port) == port {
                return true
            }
        }
        return false
    }
}

extension DormantInputTests {
    func testTLSAskedForAfterThePeerSpokeInTheClearIsRefusedEvenUnread() async throws {
        let banner = Array("220 plaintext banner\r\n".utf8)
        let (port, done, _) = try server(expect: 0, reply: banner, holdOpen: true)
        let pair = SocketStreams.pair(toHost: "127.0.0.1", port: port)
        try await withDeadline(10, "opening") { try await pair.open() }
        XCTAssertEqual(done.wait(timeout: .now() + 10), .success, "the server sent its banner")
        var entry = pollfd(fd: -1, events: 0, revents: 0)
        _ = poll(&entry, 0, 100)  // a moment for loopback to deliver it (nothing of Salut's is waited on)
        let accepted = pair.input.setProperty(
            [kCFStreamSSLValidatesCertificateChain as String: false] as NSDictionary,
            forKey: kCFStreamPropertySSLSettings as Stream.PropertyKey)
        XCTAssertFalse(accepted, "TLS after the peer's plain bytes is refused, read or not")
        XCTAssertTrue(
            "\(pair.input.streamError.map { "\($0)" } ?? "")".contains("clear"),
            "\(String(describing: pair.input.streamError))")
    }
}
