import Foundation
import Glibc

/// A bare TCP client with blocking calls, for playing a peer that misbehaves: one that connects
/// and says nothing, sends a few bytes and stops, or resets the connection.
public final class RawClient {
    /// The connected socket.
    public let fd: Int32

    /// Connects to `port` on IPv4 loopback, from `source` (another loopback address, such as
    /// 127.0.0.2, plays another host) or the system's choice.
    /// - Throws: `POSIXError` when the connection cannot be made.
    public init(port: Int, from source: String? = nil) throws {
        fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
        if let source {
            var local = sockaddr_in()
            local.sin_family = sa_family_t(AF_INET)
            guard inet_pton(AF_INET, source, &local.sin_addr) == 1 else {
                close(fd)
                throw POSIXError(.EINVAL)
            }
            try Self.call(bind, fd, local)
        }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = UInt16(port).bigEndian
        address.sin_addr.s_addr = UInt32(0x7f00_0001).bigEndian
        try Self.call(connect, fd, address)
    }

    /// Calls `bind` or `connect` on `fd` with `address`; closes `fd` and throws its errno when it
    /// fails.
    private static func call(
        _ function: (Int32, UnsafePointer<sockaddr>?, socklen_t) -> Int32, _ fd: Int32, _ address: sockaddr_in
    ) throws {
        var address = address
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                function(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard result == 0 else {
            let code = errno
            close(fd)
            throw POSIXError(POSIXErrorCode(rawValue: code) ?? .EIO)
        }
    }

    deinit { close(fd) }

    /// Sends all of `bytes` (blocking).
    public func send(_ bytes: Data) {
        bytes.withUnsafeBytes { buffer in
            var offset = 0
            while offset < buffer.count {
                let n = Glibc.send(fd, buffer.baseAddress! + offset, buffer.count - offset, Int32(MSG_NOSIGNAL))
                if n <= 0 { return }
                offset += n
            }
        }
    }

    /// Waits until the other side closes or resets the connection, discarding what it sends;
    /// true when that happened within `seconds`.
    public func waitForClose(seconds: Double) -> Bool {
        let end = Date().addingTimeInterval(seconds)
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let left = end.timeIntervalSinceNow
            if left <= 0 { return false }
            var entry = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            let ready = poll(&entry, 1, Int32(min(left * 1000, 1000)) + 1)
            if ready < 0 && errno != EINTR { return true }
            guard ready > 0 else { continue }
            let n = recv(fd, &buffer, buffer.count, Int32(MSG_DONTWAIT))
            if n == 0 { return true }
            if n < 0 && errno != EAGAIN && errno != EINTR { return true }  // reset
        }
    }

    /// Reads until `count` bytes arrived or the connection ended; what arrived.
    public func receive(count: Int, seconds: Double) -> Data {
        let end = Date().addingTimeInterval(seconds)
        var received = Data()
        var buffer = [UInt8](repeating: 0, count: 4096)
        while received.count < count, end.timeIntervalSinceNow > 0 {
            var entry = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            guard poll(&entry, 1, 100) > 0 else { continue }
            let n = recv(fd, &buffer, min(buffer.count, count - received.count), Int32(MSG_DONTWAIT))
            if n <= 0 { if n < 0 && (errno == EAGAIN || errno == EINTR) { continue }; break }
            received.append(contentsOf: buffer[..<n])
        }
        return received
    }

    /// Ends the connection with a reset (RST) instead of a normal close.
    public func reset() {
        var linger = Glibc.linger(l_onoff: 1, l_linger: 0)
        _ = setsockopt(fd, SOL_SOCKET, SO_LINGER, &linger, socklen_t(MemoryLayout<Glibc.linger>.size))
        shutdown(fd, Int32(SHUT_RDWR))
    }
}
