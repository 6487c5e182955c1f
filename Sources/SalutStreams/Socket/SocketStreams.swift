import Dispatch
import Foundation
import Glibc

/// Turns a host name and port into socket addresses. Salut's discovery module supplies one that
/// resolves `.local` names through Avahi; ``SocketStreams/systemResolver`` uses `getaddrinfo`.
public typealias AddressResolver = @Sendable (_ host: String, _ port: UInt16) async throws -> [SocketAddress]

/// Streams to a host and port: the plumbing behind `Stream.getStreamsToHost`.
public enum SocketStreams {
    /// Makes an unopened stream pair that, when either stream is opened, resolves `host`, connects
    /// to its addresses the Happy Eyeballs way and then carries bytes both ways.
    ///
    /// Failures (name not found, refused, unreachable, timed out, lost) arrive as the streams'
    /// `streamError` (a ``SocketStreamError``) with status `.error` and, for scheduled streams,
    /// `errorOccurred`. Each direction is buffered by `bufferSize` bytes.
    public static func pair(toHost host: String, port: Int, bufferSize: Int = 256 * 1024,
                            connectTimeout: TimeInterval = 30,
                            resolver: @escaping AddressResolver = systemResolver) -> BoundStreamPair {
        let queue = DispatchQueue(label: "salut.socket")
        let inbound = BoundBuffer(capacity: bufferSize), outbound = BoundBuffer(capacity: bufferSize)
        let pump = SocketPump(queue: queue, inbound: inbound, outbound: outbound)
        let streams = StreamPairLink()
        let gate = ConnectionGate {
            Task.detached {
                let target = host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)"
                let addresses: [SocketAddress]
                do {
                    guard (0...65535).contains(port) else { throw SocketStreamError.invalidAddress("port \(port)") }
                    addresses = try await resolver(host, UInt16(port))
                    guard !addresses.isEmpty else { throw SocketStreamError.nameNotFound(host, detail: "no addresses") }
                } catch {
                    return streams.settle(.failed(error))
                }
                let connector = HappyEyeballs(addresses: addresses, target: target, queue: queue, timeout: connectTimeout) { result in
                    switch result {
                    case .success(let fd):
                        pump.run(fd)
                        streams.settle(.connected)
                    case .failure(let error):
                        streams.settle(.failed(error))
                    }
                }
                connector.start()
            }
        }
        let input = BoundInputStream(buffer: inbound, gate: gate)
        let output = BoundOutputStream(buffer: outbound, gate: gate)
        streams.link(gate: gate, input: input, output: output)
        inbound.readerChanged = { streams.input?.refresh() }
        inbound.writerChanged = { pump.inboundChanged() }
        outbound.readerChanged = { pump.outboundChanged() }
        outbound.writerChanged = { streams.output?.refresh() }
        pump.onFailure = { error in streams.fail(error) }
        return BoundStreamPair(input: input, output: output)
    }

    /// Resolves with `getaddrinfo` (numeric IPv4, IPv6 with `%scope`, and DNS names), off the
    /// caller's thread.
    /// - Throws: ``SocketStreamError/nameNotFound(_:detail:)`` when nothing resolves.
    public static let systemResolver: AddressResolver = { host, port in
        try await withCheckedThrowingContinuation { continuation in
            DispatchQueue.global().async {
                continuation.resume(with: Result { try resolveNow(host: host, port: port) })
            }
        }
    }

    static func resolveNow(host: String, port: UInt16) throws -> [SocketAddress] {
        var hints = addrinfo()
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        hints.ai_family = AF_UNSPEC
        var list: UnsafeMutablePointer<addrinfo>?
        let bare = host.hasPrefix("[") && host.hasSuffix("]") ? String(host.dropFirst().dropLast()) : host
        let status = getaddrinfo(bare, String(port), &hints, &list)
        guard status == 0, let list else {
            throw SocketStreamError.nameNotFound(host, detail: String(cString: gai_strerror(status)))
        }
        defer { freeaddrinfo(list) }
        var out: [SocketAddress] = []
        var node: UnsafeMutablePointer<addrinfo>? = list
        while let current = node {
            if let raw = current.pointee.ai_addr,
               let address = SocketAddress(Data(bytes: raw, count: Int(current.pointee.ai_addrlen))),
               !out.contains(address) {
                out.append(address)
            }
            node = current.pointee.ai_next
        }
        return out
    }
}

/// The two streams of a socket pair, held weakly, told together when the connection settles
/// or breaks.
final class StreamPairLink: @unchecked Sendable {
    // @unchecked: set once by `link` before the pair is handed out; the streams' own state is
    // locked inside them.
    private(set) weak var input: BoundInputStream?
    private(set) weak var output: BoundOutputStream?
    private var gate: ConnectionGate?

    func link(gate: ConnectionGate, input: BoundInputStream, output: BoundOutputStream) {
        self.gate = gate
        self.input = input
        self.output = output
    }

    func settle(_ state: ConnectionGate.State) {
        gate?.settle(state)
        input?.connectionSettled()
        output?.connectionSettled()
    }

    /// The connection broke after it was made.
    func fail(_ error: SocketStreamError) {
        if let input {
            input.events.fail(error)
            input.events.post(.errorOccurred, to: input, once: true)
        }
        if let output {
            output.events.fail(error)
            output.events.post(.errorOccurred, to: output, once: true)
        }
    }
}
