import Dispatch
import Foundation
import Glibc
import SalutStreams

/// A one-shot multicast DNS query (RFC 6762 §5.1): one question sent to the mDNS group on one
/// interface from an ordinary port, so that responders answer straight back to that port. It
/// asks the responders themselves, never a cache: a service whose host is gone, or whose
/// withdrawal was lost on the way, gets no answer, whatever avahi-daemon's cache still lists.
///
/// Nothing blocks: the socket is non-blocking, read by a dispatch source and paced by a timer
/// on one serial queue shared by every query of the process, so many queries at once cost one
/// thread; a read event takes at most 32 datagrams, so a flood on the port cannot hold off a
/// query's timer. A datagram's header (port, ID, QR, error) is checked before it is decoded. Every wait is
/// bounded by `attempts` × `interval`; a cancelled caller ends its query at once. The socket
/// is closed on every path (by the read source's cancel handler).
struct OneShotQuery: Sendable {
    let question: DNSQuestion
    let interfaceIndex: Int32
    let overIPv6: Bool
    var attempts = 3
    var interval: Duration = .seconds(1)

    /// True once an answer holds a live record (TTL above 0) of the question's name and type;
    /// false when none came after every attempt, or the caller was cancelled.
    /// - Throws: ``DiscoveryError`` (``DiscoveryError/Code-swift.struct/dnsFailure``) when the
    ///   query cannot be sent (the interface is gone, for example).
    func isAnswered() async throws -> Bool {
        let socket = try QuerySocket(interfaceIndex: interfaceIndex, overIPv6: overIPv6)
        let run = QueryRun(query: self, socket: socket)
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in run.start(continuation) }
        } onCancel: {
            run.cancel()
        }
    }

    /// Whether `bytes`, from port `sourcePort`, answer the question: a response (QR set, no
    /// error) from the mDNS port with the query's ID that holds a live record of the asked name
    /// and type. Anything else on the port, malformed or not, is dropped.
    func isAnswer(_ bytes: [UInt8], id: UInt16, sourcePort: UInt16) -> Bool {
        // The header first (port, ID, QR, no error): most strangers' datagrams cost nothing more.
        guard sourcePort == 5353, bytes.count >= 12, UInt16(bytes[0]) << 8 | UInt16(bytes[1]) == id,
            bytes[2] & 0x80 != 0, bytes[3] & 0x0F == 0
        else { return false }
        guard let message = try? DNSMessage(decoding: bytes), message.isResponse, message.id == id,
            message.rcode == 0
        else { return false }
        return (message.answers + message.additionals).contains {
            $0.type == question.type && $0.recordClass & 0x7FFF == question.questionClass && $0.ttl > 0
                && $0.name == question.name
        }
    }
}

/// One query's life on its serial queue: send, wait an interval, send again, until an answer
/// or the last attempt's interval ends; then the continuation is resumed once and the socket
/// released.
// @unchecked: every stored property is touched only on `queue`, one serial queue shared by all
// queries (start, the read sources, the timers and cancel all run there).
private final class QueryRun: @unchecked Sendable {
    private let query: OneShotQuery
    private let socket: QuerySocket
    /// One serial queue for every query of the process: the work of an event is small, and a
    /// queue each made a thread each when hundreds of checks ran at once.
    private static let sharedQueue = DispatchQueue(label: "salut.one-shot-query")
    private var queue: DispatchQueue { Self.sharedQueue }
    private var continuation: CheckedContinuation<Bool, any Error>?
    private var reader: (any DispatchSourceRead)?
    private var timer: (any DispatchSourceTimer)?
    private var sent = 0
    /// Attempts that got out, and the last refusal of one that did not.
    private var left = 0
    private var lastRefusal: DiscoveryError?
    private var finished = false
    private let id = UInt16.random(in: 1 ... .max)
    private lazy var message: [UInt8] = {
        var message = DNSMessage(id: id, opcode: DNSMessage.query)
        message.questions = [query.question]
        return message.encoded()
    }()

    init(query: OneShotQuery, socket: QuerySocket) {
        self.query = query
        self.socket = socket
    }

    func start(_ continuation: CheckedContinuation<Bool, any Error>) {
        queue.async { [self] in
            self.continuation = continuation
            guard !finished else { return finish(.success(false)) }  // cancelled before it began
            let reader = DispatchSource.makeReadSource(fileDescriptor: socket.descriptor, queue: queue)
            reader.setEventHandler { [self] in readAll() }
            let socket = self.socket
            reader.setCancelHandler { socket.close() }
            self.reader = reader
            reader.resume()
            let timer = DispatchSource.makeTimerSource(queue: queue)
            timer.schedule(deadline: .now(), repeating: OperationLimit.dispatchInterval(query.interval))
            timer.setEventHandler { [self] in tick() }
            self.timer = timer
            timer.resume()
        }
    }

    func cancel() {
        queue.async { [self] in finish(.success(false)) }
    }

    /// Each interval: the next attempt, or the end.
    private func tick() {
        guard sent < max(1, query.attempts) else {
            // Silence counts only when an attempt got out; otherwise the answer is unknown.
            return finish(left > 0 || lastRefusal == nil ? .success(false) : .failure(lastRefusal!))
        }
        sent += 1
        // A refusal by a firewall on the way out (EPERM, which a random drop also says) is
        // tried again at once, up to three sends an attempt: the datagram did not leave, so a second copy
        // cannot reach anyone twice, and a link that drops one packet in ten no longer loses
        // a whole check one time in a thousand. A filter that drops every query is still
        // told apart from silence (`lastRefusal`).
        for _ in 0..<Self.sendsPerAttempt {
            do {
                try socket.send(message)
                left += 1
                return
            } catch let lost as QuerySocket.SendLost {
                guard case .refused(let error, let code) = lost else { return }  // no room now: the next attempt
                lastRefusal = error
                guard code == EPERM else { return }  // another refusal would be the same at once
            } catch {
                return finish(.failure(error))
            }
        }
    }

    /// How many times one attempt is sent when a firewall refuses the send on the way out.
    private static let sendsPerAttempt = 3

    /// Reads what waits, at most 32 datagrams an event: a flood on the port cannot keep the
    /// shared queue from the timers (the next attempt, the end) and the other queries.
    private func readAll() {
        var budget = 32
        while !finished && budget > 0 {
            budget -= 1
            switch socket.receive() {
            case .datagram(let bytes, let port):
                if query.isAnswer(bytes, id: id, sourcePort: port) { return finish(.success(true)) }
            case .none:
                return
            case .failed(let error):
                return finish(.failure(error))
            }
        }
    }

    private func finish(_ result: Result<Bool, any Error>) {
        if !finished {
            finished = true
            timer?.cancel()
            if let reader { reader.cancel() } else { socket.close() }
        }
        continuation?.resume(with: result)
        continuation = nil
    }
}

/// The query's UDP socket (C interop): non-blocking, sending on one interface with the hop
/// limit of 255 that mDNS asks for, to the mDNS group.
// @unchecked: the descriptor is set once; `close()` runs once, on the query's queue.
private final class QuerySocket: @unchecked Sendable {
    /// An attempt that did not leave; the query goes on with the next one.
    enum SendLost: Error {
        case lost(Int32)
        case refused(DiscoveryError, code: Int32)
    }

    enum Received {
        case datagram([UInt8], sourcePort: UInt16)
        case none
        case failed(DiscoveryError)
    }

    let descriptor: Int32
    private let interfaceIndex: Int32
    private let overIPv6: Bool
    /// The mDNS group, 224.0.0.251 or ff02::fb on the interface, port 5353.
    private let group: SocketAddress
    private var buffer = [UInt8](repeating: 0, count: 9_000)  // mDNS's largest message
    private var closed = false

    init(interfaceIndex: Int32, overIPv6: Bool) throws {
        self.interfaceIndex = interfaceIndex
        self.overIPv6 = overIPv6
        group =
            overIPv6
            ? SocketAddress(
                ipv6: [0xff, 0x02] + Array(repeating: 0, count: 13) + [0xfb], port: 5353,
                scopeID: UInt32(bitPattern: interfaceIndex))
            : SocketAddress(ipv4: [224, 0, 0, 251], port: 5353)
        let type = Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue)
        descriptor = Glibc.socket(overIPv6 ? AF_INET6 : AF_INET, type, 0)
        guard descriptor >= 0 else { throw Self.failure("socket", interfaceIndex) }
        do { try leaveBy() } catch {
            Glibc.close(descriptor)
            throw error
        }
    }

    func close() {
        guard !closed else { return }
        closed = true
        Glibc.close(descriptor)
    }

    private func leaveBy() throws {
        var hops: Int32 = 255
        let size = socklen_t(MemoryLayout<Int32>.size)
        if overIPv6 {
            var index = UInt32(bitPattern: interfaceIndex)
            guard
                setsockopt(
                    descriptor, Int32(IPPROTO_IPV6), IPV6_MULTICAST_IF, &index, socklen_t(MemoryLayout<UInt32>.size))
                    == 0
            else { throw Self.interfaceFailure("IPV6_MULTICAST_IF", interfaceIndex) }
            guard setsockopt(descriptor, Int32(IPPROTO_IPV6), IPV6_MULTICAST_HOPS, &hops, size) == 0 else {
                throw Self.failure("setsockopt(IPV6_MULTICAST_HOPS)", interfaceIndex)
            }
        } else {
            var request = ip_mreqn()
            request.imr_ifindex = interfaceIndex
            guard
                setsockopt(
                    descriptor, Int32(IPPROTO_IP), IP_MULTICAST_IF, &request, socklen_t(MemoryLayout<ip_mreqn>.size))
                    == 0
            else { throw Self.interfaceFailure("IP_MULTICAST_IF", interfaceIndex) }
            guard setsockopt(descriptor, Int32(IPPROTO_IP), IP_MULTICAST_TTL, &hops, size) == 0 else {
                throw Self.failure("setsockopt(IP_MULTICAST_TTL)", interfaceIndex)
            }
        }
    }

    /// Sends `message` to the group.
    /// - Throws: ``SendLost`` for an attempt that did not get out (no room now, or refused by
    ///   a filter): the next attempt may; ``DiscoveryError`` when the interface is gone.
    func send(_ message: [UInt8]) throws {
        let sent = group.withBytes { address in
            message.withUnsafeBytes {
                sendto(
                    descriptor, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL),
                    address.baseAddress!.assumingMemoryBound(to: sockaddr.self), socklen_t(address.count))
            }
        }
        guard sent != message.count else { return }
        let code = errno
        if sent >= 0 || code == EAGAIN || code == ENOBUFS || code == EINTR { throw SendLost.lost(code) }
        if code == ENODEV || code == ENXIO || code == EADDRNOTAVAIL || code == ENETDOWN {
            throw Self.interfaceFailure("sendto", interfaceIndex, code)
        }
        // Refused on the way out (a firewall's drop says EPERM): a lost attempt like a lost
        // datagram, unless no attempt gets out at all.
        throw SendLost.refused(Self.failure("sendto", interfaceIndex, code), code: code)
    }

    /// The next datagram waiting, with its source port, or `.none` when there is none now.
    func receive() -> Received {
        var source = sockaddr_storage()
        var sourceLength = socklen_t(MemoryLayout<sockaddr_storage>.size)
        let received = buffer.withUnsafeMutableBytes { bytes in
            withUnsafeMutablePointer(to: &source) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    recvfrom(descriptor, bytes.baseAddress, bytes.count, 0, $0, &sourceLength)
                }
            }
        }
        if received < 0 {
            let code = errno
            if code == EAGAIN || code == EWOULDBLOCK || code == EINTR { return .none }
            // An ICMP error for an earlier datagram: not an answer, not a reason to stop.
            if code == ECONNREFUSED || code == EHOSTUNREACH || code == ENETUNREACH { return .none }
            return .failed(Self.failure("recvfrom", interfaceIndex, code))
        }
        let port = SocketAddress(Data(bytes: &source, count: Int(sourceLength)))?.port ?? 0
        return .datagram(Array(buffer[..<received]), sourcePort: port)
    }

    private static func failure(_ call: String, _ index: Int32, _ code: Int32 = errno) -> DiscoveryError {
        .dnsFailure("a one-shot mDNS query on interface \(index) failed: \(call): \(String(cString: strerror(code)))")
    }

    private static func interfaceFailure(_ call: String, _ index: Int32, _ code: Int32 = errno) -> DiscoveryError {
        .dnsFailure(
            "interface \(index) cannot send a one-shot mDNS query (is it gone?): \(call): \(String(cString: strerror(code)))"
        )
    }
}
