import Foundation
import Glibc

/// An IPv4 or IPv6 socket address (address, port, and for IPv6 the scope id), convertible to and
/// from the `sockaddr` bytes Apple's APIs hand around as `Data` (for example
/// `NetService.addresses`).
public struct SocketAddress: Sendable, Hashable, CustomStringConvertible {
    /// The `sockaddr_in` or `sockaddr_in6`, kept inline (an address costs no allocation; a
    /// `sockaddr_in` fits in the first bytes of a `sockaddr_in6`).
    private var storage = sockaddr_in6()
    /// How many bytes of `storage` are the address: the size of a `sockaddr_in` or a `sockaddr_in6`.
    private var length = 0

    /// The raw `sockaddr_in` or `sockaddr_in6` bytes.
    public var data: Data { withBytes { Data($0) } }

    /// Calls `body` with the raw `sockaddr` bytes.
    package func withBytes<T>(_ body: (UnsafeRawBufferPointer) throws -> T) rethrows -> T {
        try withUnsafeBytes(of: storage) { try body(UnsafeRawBufferPointer(rebasing: $0.prefix(length))) }
    }

    fileprivate init(copying raw: UnsafeRawBufferPointer) {
        length = raw.count
        withUnsafeMutableBytes(of: &storage) { $0.copyMemory(from: raw) }
    }

    /// Reads a `sockaddr_in` / `sockaddr_in6` from `data`; nil when it is neither, or too short.
    public init?(_ data: Data) {
        guard let address = data.withUnsafeBytes({ SocketAddress(bytes: $0) }) else { return nil }
        self = address
    }

    /// An IPv4 address from its 4 network-order bytes.
    public init(ipv4 bytes: [UInt8], port: UInt16) {
        precondition(bytes.count == 4, "an IPv4 address has 4 bytes")
        var sin = sockaddr_in()
        sin.sin_family = sa_family_t(AF_INET)
        sin.sin_port = port.bigEndian
        withUnsafeMutableBytes(of: &sin.sin_addr) { $0.copyBytes(from: bytes) }
        self = withUnsafeBytes(of: &sin) { SocketAddress(copying: $0) }
    }

    /// An IPv6 address from its 16 bytes, with the interface index as scope id (0 for none).
    public init(ipv6 bytes: [UInt8], port: UInt16, scopeID: UInt32 = 0) {
        precondition(bytes.count == 16, "an IPv6 address has 16 bytes")
        var sin6 = sockaddr_in6()
        sin6.sin6_family = sa_family_t(AF_INET6)
        sin6.sin6_port = port.bigEndian
        sin6.sin6_scope_id = scopeID
        withUnsafeMutableBytes(of: &sin6.sin6_addr) { $0.copyBytes(from: bytes) }
        self = withUnsafeBytes(of: &sin6) { SocketAddress(copying: $0) }
    }

    /// Equal when the `sockaddr` bytes are (family, port, address and, for IPv6, scope).
    public static func == (a: SocketAddress, b: SocketAddress) -> Bool {
        a.withBytes { x in b.withBytes { y in x.elementsEqual(y) } }
    }

    /// Hashes the `sockaddr` bytes, as `==` compares them.
    public func hash(into hasher: inout Hasher) {
        withBytes { hasher.combine(bytes: $0) }
    }

    /// `AF_INET` or `AF_INET6`.
    public var family: Int32 {
        withBytes { Int32($0.loadUnaligned(as: sa_family_t.self)) }
    }

    /// Whether this is an IPv6 address.
    public var isIPv6: Bool { family == AF_INET6 }

    /// Whether this is an IPv6 link-local address (`fe80::/10`), meaningful on one link only.
    package var isIPv6LinkLocal: Bool {
        guard isIPv6 else { return false }
        let bytes = rawBytes
        return bytes[0] == 0xFE && bytes[1] & 0xC0 == 0x80
    }

    /// The port, in host byte order.
    public var port: UInt16 {
        withBytes { raw in
            isIPv6
                ? UInt16(bigEndian: raw.loadUnaligned(as: sockaddr_in6.self).sin6_port)
                : UInt16(bigEndian: raw.loadUnaligned(as: sockaddr_in.self).sin_port)
        }
    }

    /// The address bytes in network order (4 for IPv4, 16 for IPv6), without port or scope.
    public var rawBytes: [UInt8] {
        withBytes { raw in
            if isIPv6 {
                var addr = raw.loadUnaligned(as: sockaddr_in6.self).sin6_addr
                return withUnsafeBytes(of: &addr) { Array($0) }
            }
            var addr = raw.loadUnaligned(as: sockaddr_in.self).sin_addr
            return withUnsafeBytes(of: &addr) { Array($0) }
        }
    }

    /// The IPv6 scope id (interface index); 0 for IPv4 or an unscoped address.
    public var scopeID: UInt32 {
        guard isIPv6 else { return 0 }
        return withBytes { $0.loadUnaligned(as: sockaddr_in6.self).sin6_scope_id }
    }

    /// The address in presentation form: `198.18.0.1`, `fe80::1%lab0` (scope as interface name
    /// when it has one, else as a number).
    public var host: String {
        var buffer = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN) + 1)
        withBytes { raw in
            if isIPv6 {
                var addr = raw.loadUnaligned(as: sockaddr_in6.self).sin6_addr
                _ = inet_ntop(AF_INET6, &addr, &buffer, socklen_t(buffer.count))
            } else {
                var addr = raw.loadUnaligned(as: sockaddr_in.self).sin_addr
                _ = inet_ntop(AF_INET, &addr, &buffer, socklen_t(buffer.count))
            }
        }
        let text = String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        guard scopeID != 0 else { return text }
        var name = [CChar](repeating: 0, count: Int(IF_NAMESIZE) + 1)
        if if_indextoname(scopeID, &name) != nil {
            return text + "%" + String(decoding: name.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        }
        return text + "%\(scopeID)"
    }

    /// `198.18.0.1:80` or `[fe80::1%lab0]:80`.
    public var description: String {
        isIPv6 ? "[\(host)]:\(port)" : "\(host):\(port)"
    }
}

extension SocketAddress {
    /// Reads a `sockaddr_in` / `sockaddr_in6` from raw bytes without an intermediate `Data`.
    init?(bytes raw: UnsafeRawBufferPointer) {
        guard raw.count >= MemoryLayout<sa_family_t>.size else { return nil }
        switch Int32(raw.loadUnaligned(as: sa_family_t.self)) {
        case AF_INET where raw.count >= MemoryLayout<sockaddr_in>.size:
            self.init(copying: UnsafeRawBufferPointer(rebasing: raw.prefix(MemoryLayout<sockaddr_in>.size)))
        case AF_INET6 where raw.count >= MemoryLayout<sockaddr_in6>.size:
            self.init(copying: UnsafeRawBufferPointer(rebasing: raw.prefix(MemoryLayout<sockaddr_in6>.size)))
        default:
            return nil
        }
    }

    /// The local (`peer: false`) or remote address of a connected socket; nil if the call fails.
    static func of(_ fd: Int32, peer: Bool) -> SocketAddress? {
        var storage = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        let result = withUnsafeMutablePointer(to: &storage) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                peer ? getpeername(fd, $0, &length) : getsockname(fd, $0, &length)
            }
        }
        guard result == 0 else { return nil }
        return withUnsafeBytes(of: &storage) {
            SocketAddress(bytes: UnsafeRawBufferPointer(rebasing: $0.prefix(Int(length))))
        }
    }
}

extension SocketAddress {
    /// The address a numeric host names (`198.18.0.1`, `::1`, `[fe80::1%lab0]`), or nil when
    /// `host` is a name that needs a resolver. An unknown scope interface is nil too.
    package static func literal(_ host: String, port: UInt16) -> SocketAddress? {
        var text = host
        if text.hasPrefix("["), text.hasSuffix("]") { text = String(text.dropFirst().dropLast()) }
        var v4 = in_addr()
        if inet_pton(AF_INET, text, &v4) == 1 {
            return SocketAddress(ipv4: withUnsafeBytes(of: &v4) { Array($0) }, port: port)
        }
        var scope: UInt32 = 0
        if let percent = text.firstIndex(of: "%") {
            let name = String(text[text.index(after: percent)...])
            text = String(text[..<percent])
            if let number = UInt32(name) {
                scope = number
            } else {
                scope = if_nametoindex(name)
                guard scope != 0 else { return nil }
            }
        }
        var v6 = in6_addr()
        guard inet_pton(AF_INET6, text, &v6) == 1 else { return nil }
        return SocketAddress(ipv6: withUnsafeBytes(of: &v6) { Array($0) }, port: port, scopeID: scope)
    }
}
