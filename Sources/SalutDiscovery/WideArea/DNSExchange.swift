import Dispatch
import Foundation
import Glibc
import SalutStreams

/// Sends one DNS message to a server and waits for its answer: over UDP, tried again after
/// each `attemptTimeout` up to `attempts` times, then over TCP when the answer was truncated or
/// the message does not fit a UDP datagram (512 bytes). Every wait is bounded; the socket is
/// closed on every path.
///
/// The system calls block, so an exchange runs on a dispatch worker (the wait is bounded by the
/// timeouts), never on the Swift concurrency pool.
struct DNSExchange: Sendable {
    let server: SocketAddress
    var attemptTimeout: Duration = .seconds(2)
    var attempts = 3

    /// The answer to `message` (whose first two bytes are its ID).
    /// - Throws: ``DiscoveryError`` (``DiscoveryError/Code-swift.struct/serverUnreachable``) when no answer
    ///   came, saying from where and after how long.
    func send(_ message: [UInt8]) async throws -> [UInt8] {
        try await exchange(message).answer
    }

    /// Asks the server for `type` records of `name` (an ordinary query) and reads its answer.
    /// - Throws: as ``send(_:)``; ``DiscoveryError/Code-swift.struct/dnsFailure`` when the answer
    ///   cannot be read.
    func query(_ name: DNSName, _ type: UInt16) async throws -> DNSMessage {
        var query = DNSMessage(id: .random(in: 0 ... .max), opcode: DNSMessage.query, recursionDesired: true)
        query.questions = [DNSQuestion(name: name, type: type)]
        let bytes = try await send(query.encoded())
        do { return try DNSMessage(decoding: bytes) } catch {
            throw DiscoveryError.dnsFailure("\(server) sent an answer that cannot be read: \(error)")
        }
    }

    /// The answer, and whether the message was sent more than once before it came (a server
    /// may then have acted on an earlier copy: an update's prerequisite can fail on our own
    /// first copy).
    func exchange(_ message: [UInt8]) async throws -> (answer: [UInt8], retransmitted: Bool) {
        try await withCheckedThrowingContinuation { continuation in
            DispatchQueue.global().async {
                continuation.resume(with: Result { try self.sendNow(message) })
            }
        }
    }

    func sendNow(_ message: [UInt8]) throws -> (answer: [UInt8], retransmitted: Bool) {
        if message.count <= 512 {
            let (answer, retransmitted) = try overUDP(message)
            // TC: the answer did not fit; ask again over TCP.
            guard answer.count >= 3, answer[2] & 0x02 != 0 else { return (answer, retransmitted) }
            return (try overTCP(message), true)
        }
        return (try overTCP(message), false)
    }

    private func overUDP(_ message: [UInt8]) throws -> (answer: [UInt8], retransmitted: Bool) {
        let fd = try openSocket(type: SOCK_DGRAM)
        defer { close(fd) }
        var buffer = [UInt8](repeating: 0, count: 65_535)
        for attempt in 0..<max(1, attempts) {
            let sent = message.withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            guard sent == message.count else {
                throw failure("sending to \(server) failed: \(String(cString: strerror(errno)))")
            }
            let deadline = ContinuousClock.now + attemptTimeout
            while let wait = milliseconds(until: deadline), wait > 0 {
                var entry = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
                let ready = poll(&entry, 1, wait)
                if ready < 0, errno == EINTR { continue }
                guard ready > 0 else { break }
                let received = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
                if received < 0 {
                    // A refused port (ICMP) shows as ECONNREFUSED on a connected UDP socket.
                    if errno == EINTR || errno == EAGAIN { continue }
                    throw failure("\(server) did not answer: \(String(cString: strerror(errno)))")
                }
                // Only an answer to this message counts (same ID, QR set); anything else is dropped.
                if received >= 12, buffer[0] == message[0], buffer[1] == message[1], buffer[2] & 0x80 != 0 {
                    return (Array(buffer[..<received]), attempt > 0)
                }
            }
        }
        throw failure("\(server) did not answer over UDP (\(attempts) tries, \(attemptTimeout) each)")
    }

    private func overTCP(_ message: [UInt8]) throws -> [UInt8] {
        let fd = try openSocket(type: SOCK_STREAM)
        defer { close(fd) }
        let deadline = ContinuousClock.now + attemptTimeout * max(1, attempts)
        var framed: [UInt8] = []
        framed.appendUInt16(UInt16(message.count))
        framed += message
        var offset = 0
        while offset < framed.count {
            try wait(fd, for: Int16(POLLOUT), until: deadline)
            let n = framed.withUnsafeBytes {
                Glibc.send(fd, $0.baseAddress! + offset, $0.count - offset, Int32(MSG_NOSIGNAL))
            }
            if n < 0, errno == EINTR || errno == EAGAIN { continue }
            guard n > 0 else {
                throw failure("sending to \(server) over TCP failed: \(String(cString: strerror(errno)))")
            }
            offset += n
        }
        let header = try read(fd, count: 2, until: deadline)
        let length = Int(header[0]) << 8 | Int(header[1])
        let answer = try read(fd, count: length, until: deadline)
        guard answer.count >= 12, answer[0] == message[0], answer[1] == message[1] else {
            throw DiscoveryError.dnsFailure("\(server) answered another message over TCP")
        }
        return answer
    }

    private func read(_ fd: Int32, count: Int, until deadline: ContinuousClock.Instant) throws -> [UInt8] {
        var out = [UInt8](repeating: 0, count: count)
        var got = 0
        while got < count {
            try wait(fd, for: Int16(POLLIN), until: deadline)
            let n = out.withUnsafeMutableBytes { recv(fd, $0.baseAddress! + got, count - got, 0) }
            if n < 0, errno == EINTR || errno == EAGAIN { continue }
            guard n > 0 else { throw failure("\(server) closed the TCP connection before its answer was complete") }
            got += n
        }
        return out
    }

    /// A non-blocking socket connected (or connecting) to the server.
    private func openSocket(type: __socket_type) throws -> Int32 {
        let fd = socket(
            server.family, Int32(type.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw failure("socket: \(String(cString: strerror(errno)))") }
        let result = server.withBytes {
            connect(fd, $0.baseAddress!.assumingMemoryBound(to: sockaddr.self), socklen_t($0.count))
        }
        if result != 0, errno != EINPROGRESS {
            let reason = String(cString: strerror(errno))
            close(fd)
            throw failure("cannot reach \(server): \(reason)")
        }
        return fd
    }

    private func wait(_ fd: Int32, for events: Int16, until deadline: ContinuousClock.Instant) throws {
        while true {
            guard let wait = milliseconds(until: deadline), wait > 0 else {
                throw failure("\(server) did not answer over TCP within \(attemptTimeout * max(1, attempts))")
            }
            var entry = pollfd(fd: fd, events: events, revents: 0)
            let ready = poll(&entry, 1, wait)
            if ready < 0, errno == EINTR { continue }
            if ready > 0 {
                if entry.revents & Int16(POLLERR) != 0 {
                    var code: Int32 = 0
                    var length = socklen_t(MemoryLayout<Int32>.size)
                    _ = getsockopt(fd, SOL_SOCKET, SO_ERROR, &code, &length)
                    throw failure("cannot reach \(server) over TCP: \(String(cString: strerror(code)))")
                }
                return
            }
        }
    }

    private func milliseconds(until deadline: ContinuousClock.Instant) -> Int32? {
        let left = ContinuousClock.now.duration(to: deadline)
        guard left > .zero else { return nil }
        let (seconds, attoseconds) = left.components
        return Int32(clamping: seconds * 1000 + attoseconds / 1_000_000_000_000_000 + 1)
    }

    private func failure(_ reason: String) -> DiscoveryError { .serverUnreachable(reason) }
}
