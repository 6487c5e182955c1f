import Foundation
import Glibc
import SalutStreams
import SalutTestSupport
import XCTest

/// When a connection's streams are done with it, its socket is closed, whatever the order of
/// events: looked for among this process's descriptors by its own port.
final class ConnectionReleaseTests: SalutTestCase {
    /// A listening IPv4 loopback socket and its port.
    private func listener() throws -> (fd: Int32, port: Int) {
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
        return (fd, Int(UInt16(bigEndian: address.sin_port)))
    }

    /// Whether one of this process's descriptors is a socket bound to `port` on this end.
    private func holdsSocket(boundTo port: UInt16) -> Bool {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? []
        for fd in names.compactMap(Int32.init) {
            var address = sockaddr_storage()
            var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
            let named = withUnsafeMutablePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) == 0 }
            }
            guard named else { continue }  // not a socket (or already gone)
            let bound: UInt16? = withUnsafePointer(to: &address) { pointer in
                switch Int32(pointer.pointee.ss_family) {
                case AF_INET:
                    return pointer.withMemoryRebound(to: sockaddr_in.self, capacity: 1) {
                        UInt16(bigEndian: $0.pointee.sin_port)
                    }
                case AF_INET6:
                    return pointer.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) {
                        UInt16(bigEndian: $0.pointee.sin6_port)
                    }
                default: return nil
                }
            }
            if bound == port { return true }
        }
        return false
    }

    /// Waits up to `seconds` for `fd` to be readable (or hung up); false on timeout.
    private func readable(_ fd: Int32, seconds: Double) -> Bool {
        var entry = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        return poll(&entry, 1, Int32(seconds * 1000)) == 1
    }

    func testAnInputClosedWhileConnectingStillLetsTheSocketClose() throws {
        let (server, port) = try listener()
        defer { close(server) }
        // By name, so that connecting takes a resolver hop: the input is closed before the pump
        // starts, and its news must not be lost.
        let pair = SocketStreams.pair(toHost: "localhost", port: port)
        pair.output.open()
        pair.input.close()
        XCTAssertEqual(pair.output.write([0x68, 0x69], maxLength: 2), 2)
        pair.output.close()

        XCTAssertTrue(readable(server, seconds: 10), "the client connected")
        let peer = accept(server, nil, nil)
        XCTAssertGreaterThanOrEqual(peer, 0)
        defer { close(peer) }
        var buffer = [UInt8](repeating: 0, count: 16)
        var got: [UInt8] = []
        while readable(peer, seconds: 10) {
            let n = recv(peer, &buffer, buffer.count, 0)
            if n <= 0 { break }
            got += buffer.prefix(n)
        }
        XCTAssertEqual(got, [0x68, 0x69], "the bytes, then the client's end of data")
        // Both streams are closed: the client's socket must be too, while this peer stays
        // connected and silent (data from it would end the connection another way).
        var client = sockaddr_in()
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let known = withUnsafeMutablePointer(to: &client) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getpeername(peer, $0, &length) == 0 }
        }
        XCTAssertTrue(known)
        let clientPort = UInt16(bigEndian: client.sin_port)
        eventually(timeout: 10, interval: 0.01) { !holdsSocket(boundTo: clientPort) }
        XCTAssertFalse(holdsSocket(boundTo: clientPort), "the client's socket is still open")
    }
}
