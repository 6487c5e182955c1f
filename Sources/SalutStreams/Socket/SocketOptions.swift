import Foundation
import Glibc

/// Options applied to a socket before it connects: traffic class and priority (from a
/// network service type), an interface to stay on, and which address families to use.
package struct SocketOptions: Sendable, Hashable {
    /// Which address families a connection may use.
    package enum Families: Sendable, Hashable { case any, ipv4Only, ipv6Only }

    /// `IP_TOS` / `IPV6_TCLASS` (DSCP << 2), or nil to leave the system default.
    package var trafficClass: Int32?
    /// `SO_PRIORITY` (0…6 without privileges), or nil for the default.
    package var priority: Int32?
    /// Bind the socket to this interface (`SO_BINDTODEVICE`), or nil for any.
    package var interface: String?
    package var families: Families = .any

    package init(
        trafficClass: Int32? = nil, priority: Int32? = nil, interface: String? = nil, families: Families = .any
    ) {
        self.trafficClass = trafficClass
        self.priority = priority
        self.interface = interface
        self.families = families
    }

    /// Keeps the addresses the families allow.
    func filter(_ addresses: [SocketAddress]) -> [SocketAddress] {
        switch families {
        case .any: return addresses
        case .ipv4Only: return addresses.filter { !$0.isIPv6 }
        case .ipv6Only: return addresses.filter(\.isIPv6)
        }
    }

    /// Applies the options to a new socket for `address`.
    /// - Throws: ``SocketStreamError/system(call:errno:message:)`` naming the option that failed
    ///   (binding to an interface needs `CAP_NET_RAW`, for example).
    func apply(to fd: Int32, for address: SocketAddress) throws {
        try Self.disableNagle(fd)
        if let trafficClass {
            if address.isIPv6 {
                try set(fd, Int32(IPPROTO_IPV6), IPV6_TCLASS, trafficClass, "IPV6_TCLASS")
            } else {
                try set(fd, Int32(IPPROTO_IP), IP_TOS, trafficClass, "IP_TOS")
            }
        }
        if let priority { try set(fd, SOL_SOCKET, SO_PRIORITY, priority, "SO_PRIORITY") }
        if let interface {
            let result = interface.withCString { name in
                setsockopt(fd, SOL_SOCKET, SO_BINDTODEVICE, name, socklen_t(strlen(name) + 1))
            }
            if result != 0 {
                throw SocketStreamError.system(
                    call: "setsockopt(SO_BINDTODEVICE \(interface))", errno: errno,
                    message: String(cString: strerror(errno)))
            }
        }
    }

    /// `TCP_NODELAY`, on dialled and accepted sockets alike: small writes go out at once.
    /// - Throws: ``SocketStreamError/system(call:errno:message:)`` when the option cannot be set.
    static func disableNagle(_ fd: Int32) throws {
        var on: Int32 = 1
        guard setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &on, socklen_t(MemoryLayout<Int32>.size)) == 0 else {
            throw SocketStreamError.system(
                call: "setsockopt(TCP_NODELAY)", errno: errno, message: String(cString: strerror(errno)))
        }
    }

    private func set(_ fd: Int32, _ level: Int32, _ name: Int32, _ value: Int32, _ label: String) throws {
        var value = value
        guard setsockopt(fd, level, name, &value, socklen_t(MemoryLayout<Int32>.size)) == 0 else {
            throw SocketStreamError.system(
                call: "setsockopt(\(label))", errno: errno, message: String(cString: strerror(errno)))
        }
    }

    /// Reads an integer option; nil if the call fails.
    static func read(_ fd: Int32, level: Int32, name: Int32) -> Int32? {
        var value: Int32 = 0
        var length = socklen_t(MemoryLayout<Int32>.size)
        return getsockopt(fd, level, name, &value, &length) == 0 ? value : nil
    }
}
