import Dispatch
import Glibc

/// A one-shot multicast DNS query (RFC 6762 §5.1): one question sent to the mDNS group on one
/// interface from an ordinary port, so that responders answer straight back to that port. It
/// asks the responders themselves, never a cache: a service whose host is gone, or whose
/// withdrawal was lost on the way, gets no answer, whatever avahi-daemon's cache still lists.
///
/// The system calls block, so a query runs on a dispatch worker; every wait is bounded by
/// `attempts` × `interval`, and the socket is closed on every path.
struct OneShotQuery: Sendable {
    let question: DNSQuestion
    let interfaceIndex: Int32
    let overIPv6: Bool
    var attempts = 3
    var interval: Duration = .seconds(1)

    /// True once an answer holds a record of the question's name and type; false when none
    /// came after every attempt.
    /// - Throws: ``DiscoveryError`` (``DiscoveryError/Code-swift.struct/dnsFailure``) when the
    ///   query cannot be sent (the interface is gone, for example).
    func isAnswered() async throws -> Bool {
        try await withCheckedThrowingContinuation { continuation in
            DispatchQueue.global().async { continuation.resume(with: Result { try self.askNow() }) }
        }
    }

    private func askNow() throws -> Bool {
        let family = overIPv6 ? AF_INET6 : AF_INET
        let fd = socket(
            family, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw failure("socket") }
        defer { close(fd) }
        try leaveBy(fd)
        var query = DNSMessage(id: .random(in: 1 ... .max), opcode: DNSMessage.query)
        query.questions = [question]
        let message = query.encoded()
        var buffer = [UInt8](repeating: 0, count: 9_000)  // mDNS's largest message
        for _ in 0..<max(1, attempts) {
            try send(message, on: fd)
            let deadline = ContinuousClock.now + interval
            while let wait = milliseconds(until: deadline) {
                var entry = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
                let ready = poll(&entry, 1, wait)
                if ready < 0, errno == EINTR { continue }
                guard ready > 0 else { break }
                let received = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
                if received < 0 {
                    if errno == EINTR || errno == EAGAIN { continue }
                    throw failure("recv")
                }
                if answers(Array(buffer[..<received]), id: query.id) { return true }
            }
        }
        return false
    }

    /// Whether `bytes` answer the query: a response with its ID that holds the asked record
    /// (anything else on the port, malformed or not, is dropped).
    private func answers(_ bytes: [UInt8], id: UInt16) -> Bool {
        guard let message = try? DNSMessage(decoding: bytes), message.isResponse, message.id == id else { return false }
        return (message.answers + message.additionals).contains {
            $0.type == question.type && $0.name == question.name
        }
    }

    /// Sends on the sighting's interface, with the hop limit of 255 that mDNS asks for.
    private func leaveBy(_ fd: Int32) throws {
        var hops: Int32 = 255
        if overIPv6 {
            var index = UInt32(bitPattern: interfaceIndex)
            guard
                setsockopt(fd, Int32(IPPROTO_IPV6), IPV6_MULTICAST_IF, &index, socklen_t(MemoryLayout<UInt32>.size))
                    == 0
            else { throw interfaceFailure("IPV6_MULTICAST_IF") }
            guard
                setsockopt(fd, Int32(IPPROTO_IPV6), IPV6_MULTICAST_HOPS, &hops, socklen_t(MemoryLayout<Int32>.size))
                    == 0
            else { throw failure("setsockopt(IPV6_MULTICAST_HOPS)") }
        } else {
            var request = ip_mreqn()
            request.imr_ifindex = interfaceIndex
            guard
                setsockopt(fd, Int32(IPPROTO_IP), IP_MULTICAST_IF, &request, socklen_t(MemoryLayout<ip_mreqn>.size))
                    == 0
            else { throw interfaceFailure("IP_MULTICAST_IF") }
            guard setsockopt(fd, Int32(IPPROTO_IP), IP_MULTICAST_TTL, &hops, socklen_t(MemoryLayout<Int32>.size)) == 0
            else { throw failure("setsockopt(IP_MULTICAST_TTL)") }
        }
    }

    private func send(_ message: [UInt8], on fd: Int32) throws {
        let sent: Int
        if overIPv6 {
            var group = sockaddr_in6()
            group.sin6_family = sa_family_t(AF_INET6)
            group.sin6_port = in_port_t(5353).bigEndian
            group.sin6_addr.__in6_u.__u6_addr8 = (0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xfb)
            group.sin6_scope_id = UInt32(bitPattern: interfaceIndex)
            sent = withUnsafePointer(to: &group) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { address in
                    message.withUnsafeBytes {
                        sendto(
                            fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL), address,
                            socklen_t(MemoryLayout<sockaddr_in6>.size))
                    }
                }
            }
        } else {
            var group = sockaddr_in()
            group.sin_family = sa_family_t(AF_INET)
            group.sin_port = in_port_t(5353).bigEndian
            group.sin_addr.s_addr = in_addr_t(0xE000_00FB).bigEndian  // 224.0.0.251
            sent = withUnsafePointer(to: &group) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { address in
                    message.withUnsafeBytes {
                        sendto(
                            fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL), address,
                            socklen_t(MemoryLayout<sockaddr_in>.size))
                    }
                }
            }
        }
        // A datagram lost on the way is what the attempts are for; a refusal to send is not.
        if sent != message.count, errno != EAGAIN, errno != ENOBUFS {
            throw errno == ENODEV || errno == ENXIO ? interfaceFailure("sendto") : failure("sendto")
        }
    }

    private func milliseconds(until deadline: ContinuousClock.Instant) -> Int32? {
        let left = ContinuousClock.now.duration(to: deadline)
        guard left > .zero else { return nil }
        let (seconds, attoseconds) = left.components
        return Int32(clamping: seconds * 1000 + attoseconds / 1_000_000_000_000_000 + 1)
    }

    private func failure(_ call: String) -> DiscoveryError {
        .dnsFailure(
            "a one-shot mDNS query on interface \(interfaceIndex) failed: \(call): \(String(cString: strerror(errno)))")
    }

    private func interfaceFailure(_ call: String) -> DiscoveryError {
        .dnsFailure(
            "interface \(interfaceIndex) cannot send a one-shot mDNS query (is it gone?): \(call): \(String(cString: strerror(errno)))"
        )
    }
}
