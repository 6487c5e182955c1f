import Dispatch
import Foundation
import Glibc

/// Turns a host name and port into socket addresses. Salut's discovery module supplies one that
/// resolves `.local` names through Avahi; ``SocketStreams/systemResolver`` uses `getaddrinfo`.
public typealias AddressResolver = @Sendable (_ host: String, _ port: UInt16) async throws -> [SocketAddress]

/// Like ``AddressResolver``, and also names the host the addresses belong to (a discovered
/// service's target host), which TLS then verifies the certificate against.
package typealias TargetResolver =
    @Sendable (_ host: String, _ port: UInt16) async throws -> (addresses: [SocketAddress], hostName: String?)

/// Streams to a host and port: the plumbing behind `Stream.getStreamsToHost`.
public enum SocketStreams {
    /// Makes an unopened stream pair that, when either stream is opened, resolves `host`, connects
    /// to its addresses the Happy Eyeballs way and then carries bytes both ways.
    ///
    /// Failures (name not found, refused, unreachable, timed out, lost, TLS) arrive as the
    /// streams' `streamError` (a ``SocketStreamError``) with status `.error` and, for scheduled
    /// streams, `errorOccurred`. Each direction is buffered by `bufferSize` bytes (the output by
    /// at least 16 KiB, one TLS record). With `tls`, the streams open only after the handshake
    /// and the trust decision (TLS can also be turned on with the streams'
    /// `socketSecurityLevelKey` and SSL-settings properties before opening).
    public static func pair(
        toHost host: String, port: Int, bufferSize: Int = 256 * 1024,
        connectTimeout: TimeInterval = 30, tls: TLSConfiguration? = nil,
        resolver: @escaping AddressResolver = systemResolver
    ) -> BoundStreamPair {
        let target: TargetResolver = { host, port in (try await resolver(host, port), nil) }
        return pair(
            toHost: host, port: port, bufferSize: bufferSize, connectTimeout: connectTimeout, tls: tls,
            targetResolver: target)
    }

    /// A pair whose resolver also names the target host (for TLS name checks).
    package static func pair(
        toHost host: String, port: Int, bufferSize: Int = 256 * 1024,
        connectTimeout: TimeInterval = 30, tls: TLSConfiguration? = nil,
        targetResolver: @escaping TargetResolver
    ) -> BoundStreamPair {
        // (A discovered service passes port 0: its resolver supplies the port.)
        SocketConnection(
            origin: .outgoing(host: host, port: port, connectTimeout: connectTimeout, resolver: targetResolver),
            bufferSize: bufferSize, tls: tls
        ).makePair()
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
                !out.contains(address)
            {
                out.append(address)
            }
            node = current.pointee.ai_next
        }
        return out
    }
}
