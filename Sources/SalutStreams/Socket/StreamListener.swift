import Dispatch
import Foundation
import Glibc

/// A connection accepted by a ``StreamListener``: an unopened stream pair and who connected.
public struct AcceptedConnection: Sendable {
    /// The streams; open them (either one starts the connection, and with TLS the handshake).
    public let streams: BoundStreamPair
    /// The peer's address and port.
    public let remoteAddress: SocketAddress?

    /// The reading end.
    public var input: InputStream { streams.input }
    /// The writing end.
    public var output: OutputStream { streams.output }
}

/// Listens for TCP connections on one port on IPv4 and IPv6 (two sockets, the IPv6 one
/// `IPV6_V6ONLY`) and hands each accepted connection over as an unopened stream pair.
///
/// ```swift
/// let listener = try StreamListener(port: 0)
/// print("listening on", listener.port)
/// for await connection in listener.connections {
///     connection.input.open(); connection.output.open()
///     // …
/// }
/// ```
///
/// Accepting runs on the process's one socket-readiness thread; no thread is used per
/// connection. ``stop()`` (or releasing the listener) closes the listening sockets; accepted
/// connections live on.
public final class StreamListener: Sendable {
    /// The port listened on (the one picked by the system when 0 was asked for).
    public let port: UInt16
    /// The addresses the sockets are bound to (the IPv4 and IPv6 wildcard addresses).
    public let localAddresses: [SocketAddress]
    private let sockets: [Int32]
    private let tls: TLSContext?
    private let trustEvaluator: TLSTrustEvaluator?
    private let bufferSize: Int
    /// The bounds every accepted connection gets.
    public let limits: ConnectionLimits
    private let settingUp: SetupQueue
    private let queue = DispatchQueue(label: "salut.listener", target: .global())
    /// The listening sockets' watches, once accepting has started (nil again after `stop`).
    private let running: Locked<[ReadinessWatch]?> = Locked(nil)
    private let stopped = Locked(false)

    /// Binds and listens.
    /// - Parameters:
    ///   - port: the port, or 0 for one the system picks (the same on IPv4 and IPv6).
    ///   - tls: a server configuration to run TLS on every accepted connection (the handshake
    ///     happens when its streams are opened).
    ///   - bufferSize: bytes buffered in each direction of each accepted connection (the output
    ///     by at least 16 KiB, one TLS record).
    ///   - backlog: the `listen` backlog.
    ///   - limits: how long an accepted connection may take to finish its TLS handshake and
    ///     carry its first byte (10 s each by default), how long it may stay idle (no bound by
    ///     default), and how many may be setting up at once (64; the oldest of the busiest
    ///     address is cut to make room). Accepted connections start at once, so these count from the accept, whenever
    ///     their streams are opened.
    ///   - trustEvaluator: judges each client during its TLS handshake (with `tls`): it gets the
    ///     client's ``TLSPeerTrust`` (its certificate's and public key's SHA-256, and
    ///     ``TLSPeerTrust/policyFailure`` when `tls`'s own checks, such as its pins or the chain,
    ///     refused it) and has the last word, as a client's evaluator does. A client it refuses
    ///     fails the accepted streams' `open()` before any of its bytes reach the application,
    ///     with that policy failure when there was one, ``TLSError/rejectedByEvaluator``
    ///     otherwise. It is called inside the handshake, once the client's chain is verified
    ///     and before the client has proved it holds the key: an evaluator that answers before
    ///     it returns refuses with a `bad_certificate` alert the client sees; record a client's
    ///     key only once `open()` has succeeded. Set `requiresClientCertificate` in `tls` so
    ///     that clients have a key to judge (and `validatesCertificateChain` to false for
    ///     self-signed ones); without `tls` it is not used.
    /// - Throws: ``SocketStreamError/invalidAddress(_:)`` for a port outside 0…65535,
    ///   ``SocketStreamError/system(call:errno:message:)`` when binding fails (the port is in use,
    ///   for example), or the ``TLSError`` of a bad TLS configuration as ``SocketStreamError/tls(_:)``.
    public init(
        port: Int = 0, tls: TLSConfiguration? = nil, bufferSize: Int = 64 * 1024, backlog: Int32 = 512,
        limits: ConnectionLimits = ConnectionLimits(), trustEvaluator: TLSTrustEvaluator? = nil
    ) throws {
        guard (0...65535).contains(port) else { throw SocketStreamError.invalidAddress("port \(port)") }
        self.trustEvaluator = tls == nil ? nil : trustEvaluator
        if var tls {
            tls.role = .server
            do { self.tls = try TLSContext(tls) } catch let error as TLSError { throw SocketStreamError.tls(error) }
        } else {
            self.tls = nil
        }
        self.bufferSize = bufferSize
        self.limits = limits
        settingUp = SetupQueue(capacity: limits.maximumConnectionsSettingUp)
        let bound = try Self.bindBoth(port: UInt16(port), backlog: backlog)
        sockets = bound.sockets
        self.port = bound.port
        localAddresses = bound.sockets.compactMap { SocketAddress.of($0, peer: false) }
    }

    deinit { stop() }

    /// Starts accepting; each connection goes to `handler` (on an internal queue). Call once;
    /// later calls are ignored. Accepting stops with ``stop()``.
    public func accept(_ handler: @escaping @Sendable (AcceptedConnection) -> Void) {
        guard !stopped.value else { return }
        let queue = self.queue, sockets = self.sockets
        let setup = ConnectionSetup(
            tls: tls, evaluator: trustEvaluator, bufferSize: bufferSize, limits: limits, queue: settingUp)
        running.withLock { current in
            guard current == nil, !stopped.value else { return }
            var watches: [ReadinessWatch] = []
            for fd in sockets {
                let pausable = PausableWatch(queue: queue)
                var watch: ReadinessWatch?
                do {
                    let made = try ReadinessWatch(fd: fd, queue: queue) { ready in
                        guard case .success = ready else {
                            // epoll could not arm the socket again (kernel memory): try later.
                            pausable.pause(for: 0.1)
                            return
                        }
                        Self.drain(fd, pausable: pausable, setup: setup, handler: handler)
                    }
                    watch = made
                    pausable.watch = made
                    try made.want(.readable)
                } catch {
                    watch?.cancel()
                    watch = nil
                    // Only when the kernel is out of memory for epoll: this socket stays unheard.
                    SalutLogging.logger.error("cannot watch listening socket \(fd): \(error)")
                }
                if let watch { watches.append(watch) }
            }
            current = watches
        }
    }

    /// The accepted connections as an asynchronous sequence (starts accepting). The sequence
    /// ends when the listener stops.
    public var connections: AsyncStream<AcceptedConnection> {
        let (stream, continuation) = AsyncStream.makeStream(of: AcceptedConnection.self)
        accept { continuation.yield($0) }
        ended.withLock { $0.append(continuation) }
        if stopped.value { continuation.finish() }
        return stream
    }
    private let ended = Locked<[AsyncStream<AcceptedConnection>.Continuation]>([])

    /// Closes the listening sockets: from its return, new connections are refused. Connections
    /// already accepted are not affected.
    public func stop() {
        guard !stopped.exchange(true) else { return }
        // Stop watching (first: a shut-down listening socket reads as hung up), then stop
        // listening now (new connections are refused at once); the descriptors are closed on
        // the queue, after an accept loop that may be running.
        for watch in running.exchange(nil) ?? [] { watch.cancel() }
        for fd in sockets { _ = shutdown(fd, Int32(SHUT_RDWR)) }
        let sockets = self.sockets
        queue.async { for fd in sockets { close(fd) } }
        for continuation in ended.exchange([]) { continuation.finish() }
    }

    // MARK: Private

    /// How the listener sets up what it accepts.
    private struct ConnectionSetup: @unchecked Sendable {
        // @unchecked: TLSContext is read-only after creation; the rest is Sendable.
        let tls: TLSContext?
        let evaluator: TLSTrustEvaluator?
        let bufferSize: Int
        let limits: ConnectionLimits
        let queue: SetupQueue
    }

    /// Connections accepted and still setting up (their handshake or first byte pending).
    public var connectionsSettingUp: Int { settingUp.count }

    /// Accepts until nothing is pending.
    private static func drain(
        _ fd: Int32, pausable: PausableWatch, setup: ConnectionSetup,
        handler: @Sendable (AcceptedConnection) -> Void
    ) {
        while true {
            var storage = sockaddr_storage()
            var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
            let client = withUnsafeMutablePointer(to: &storage) { pointer in
                pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    Glibc.accept(fd, $0, &length)
                }
            }
            if client < 0 {
                switch errno {
                case EINTR, ECONNABORTED, EPROTO: continue
                case EMFILE, ENFILE, ENOBUFS, ENOMEM:
                    // Out of descriptors: pause instead of spinning on a pending connection.
                    pausable.pause(for: 0.1)
                    return
                case EAGAIN:
                    return  // nothing more pending
                default:
                    // Unexpected (the socket shut down under us, say): pause rather than spin
                    // on a level-triggered report that stays.
                    pausable.pause(for: 0.1)
                    return
                }
            }
            guard fcntl(client, F_SETFL, fcntl(client, F_GETFL) | O_NONBLOCK) == 0,
                fcntl(client, F_SETFD, FD_CLOEXEC) == 0
            else {
                close(client)
                continue
            }
            let remote = withUnsafeBytes(of: &storage) {
                SocketAddress(bytes: UnsafeRawBufferPointer(rebasing: $0.prefix(Int(length))))
            }
            guard (try? SocketOptions.disableNagle(client)) != nil else {
                close(client)  // not a TCP socket we can use (it may already be reset)
                continue
            }
            let connection = SocketConnection(
                origin: .accepted(fd: client, tls: setup.tls, limits: setup.limits),
                bufferSize: setup.bufferSize)
            connection.pump.onSetUpEnded = setup.queue.admit(connection.pump, from: SetupQueue.source(of: remote))
            if let evaluator = setup.evaluator { connection.state.withLock { $0.evaluator = evaluator } }
            let streams = connection.makePair()
            connection.startAccepted()
            handler(AcceptedConnection(streams: streams, remoteAddress: remote))
        }
    }

    /// Binds an IPv4 and an IPv6 socket to the same port (for port 0: the port the IPv4 socket
    /// got, retried when IPv6 already has it in use). A host without IPv6 gets IPv4 only.
    private static func bindBoth(port: UInt16, backlog: Int32) throws -> (sockets: [Int32], port: UInt16) {
        var lastError: SocketStreamError?
        for _ in 0..<16 {
            let v4 = try open(family: AF_INET, port: port, backlog: backlog)
            guard let v4 else {
                throw SocketStreamError.system(call: "socket", errno: EAFNOSUPPORT, message: "IPv4 unavailable")
            }
            let chosen = SocketAddress.of(v4, peer: false)?.port ?? port
            do {
                if let v6 = try open(family: AF_INET6, port: chosen, backlog: backlog) {
                    return ([v4, v6], chosen)
                }
                return ([v4], chosen)  // no IPv6 on this host
            } catch let error as SocketStreamError {
                close(v4)
                lastError = error
                if port != 0 { throw error }  // a fixed port: nothing to retry
            }
        }
        throw lastError
            ?? SocketStreamError.system(call: "bind", errno: EADDRINUSE, message: "no port free on both IPv4 and IPv6")
    }

    /// A listening socket, or nil when the family is not supported here.
    private static func open(family: Int32, port: UInt16, backlog: Int32) throws -> Int32? {
        let fd = socket(
            family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else {
            if errno == EAFNOSUPPORT { return nil }
            throw SocketStreamError.system(call: "socket", errno: errno, message: String(cString: strerror(errno)))
        }
        var on: Int32 = 1
        let size = socklen_t(MemoryLayout<Int32>.size)
        func failure(_ call: String) -> SocketStreamError {
            let code = errno
            close(fd)
            return .system(call: call, errno: code, message: String(cString: strerror(code)))
        }
        guard setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, size) == 0 else {
            throw failure("setsockopt(SO_REUSEADDR)")
        }
        let address: SocketAddress
        if family == AF_INET6 {
            guard setsockopt(fd, Int32(IPPROTO_IPV6), IPV6_V6ONLY, &on, size) == 0 else {
                throw failure("setsockopt(IPV6_V6ONLY)")
            }
            address = SocketAddress(ipv6: [UInt8](repeating: 0, count: 16), port: port)
        } else {
            address = SocketAddress(ipv4: [0, 0, 0, 0], port: port)
        }
        let bound = address.withBytes {
            bind(fd, $0.baseAddress!.assumingMemoryBound(to: sockaddr.self), socklen_t($0.count))
        }
        if bound != 0 && family == AF_INET6 && errno == EADDRNOTAVAIL { close(fd); return nil }
        guard bound == 0 else { throw failure("bind to port \(port)") }
        guard listen(fd, backlog) == 0 else { throw failure("listen") }
        return fd
    }
}

/// A listening socket's watch, which can be paused for a while (when descriptors run out).
private final class PausableWatch: @unchecked Sendable {
    // @unchecked: `watch` is set once, before the watch is armed, and is then only read on
    // `queue`, where the watch's events are handled.
    var watch: ReadinessWatch?
    private let queue: DispatchQueue
    init(queue: DispatchQueue) {
        self.queue = queue
    }

    /// Hears nothing for `seconds`, then listens again (unless the watch was cancelled).
    func pause(for seconds: TimeInterval) {
        _ = try? watch?.want([])
        queue.asyncAfter(deadline: .now() + seconds) { [self] in
            do { try watch?.want(.readable) } catch { pause(for: seconds) }
        }
    }
}
