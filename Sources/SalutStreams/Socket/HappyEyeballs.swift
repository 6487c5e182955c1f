import Dispatch
import Foundation
import Glibc

/// Connects a non-blocking TCP socket to the first of several addresses that answers, the
/// Happy Eyeballs way (RFC 8305): addresses are interleaved by family starting with IPv6, a new
/// attempt starts every `attemptDelay` seconds (or at once when one fails) while earlier ones
/// continue, and the first to connect wins; the others are closed.
final class HappyEyeballs: @unchecked Sendable {
    // @unchecked: every mutable property is used only on `queue`.

    /// One connection attempt. Its descriptor is closed by the source's cancel handler (libdispatch
    /// must be done with a descriptor before it is closed), unless the attempt won.
    private final class Attempt: @unchecked Sendable {
        // @unchecked: `keep` is set on the queue before `source.cancel()`, and read by the cancel
        // handler, which runs on the same queue afterwards.
        let fd: Int32
        let source: DispatchSourceWrite
        var keep = false
        init(fd: Int32, source: DispatchSourceWrite) {
            self.fd = fd
            self.source = source
            // A strong capture: libdispatch drops the handler (and this attempt) once it has run.
            source.setCancelHandler { if !self.keep { close(self.fd) } }
        }
    }

    private let queue: DispatchQueue
    private let target: String
    private var remaining: [SocketAddress]
    private let attemptDelay: TimeInterval
    private let timeout: TimeInterval
    private var completion: (@Sendable (Result<Int32, SocketStreamError>) -> Void)?
    private var attempts: [Int32: Attempt] = [:]
    private var lastError: SocketStreamError?
    private var pacer: DispatchSourceTimer?
    /// Keeps the connector alive while it works (its sources hold it only weakly).
    private var keepAlive: HappyEyeballs?
    private var deadline: DispatchSourceTimer?
    /// Applied to each new socket before it connects (socket options).
    private let prepare: @Sendable (Int32, SocketAddress) throws -> Void

    /// - Parameters:
    ///   - addresses: where to connect, in the resolver's order.
    ///   - target: how to name the destination in errors (`host:port`).
    init(addresses: [SocketAddress], target: String, queue: DispatchQueue,
         attemptDelay: TimeInterval = 0.25, timeout: TimeInterval = 30,
         prepare: @escaping @Sendable (Int32, SocketAddress) throws -> Void = { _, _ in },
         completion: @escaping @Sendable (Result<Int32, SocketStreamError>) -> Void) {
        self.prepare = prepare
        self.queue = queue
        self.target = target
        self.attemptDelay = attemptDelay
        self.timeout = timeout
        self.completion = completion
        remaining = Self.interleave(addresses)
    }

    /// IPv6 first, then alternating families (RFC 8305 §4).
    static func interleave(_ addresses: [SocketAddress]) -> [SocketAddress] {
        var v6 = addresses.filter(\.isIPv6)[...], v4 = addresses.filter { !$0.isIPv6 }[...]
        var out: [SocketAddress] = []
        while !v6.isEmpty || !v4.isEmpty {
            if let a = v6.popFirst() { out.append(a) }
            if let a = v4.popFirst() { out.append(a) }
        }
        return out
    }

    func start() {
        queue.async {
            self.keepAlive = self
            let timer = DispatchSource.makeTimerSource(queue: self.queue)
            timer.schedule(deadline: .now() + self.timeout)
            timer.setEventHandler { [weak self] in self?.finish(.failure(.timedOut(self?.target ?? ""))) }
            timer.resume()
            self.deadline = timer
            self.next()
        }
    }

    /// Gives up: open attempts are closed and the completion gets ``SocketStreamError/cancelled``.
    func cancel() {
        queue.async { self.finish(.failure(.cancelled)) }
    }

    private func next() {
        pacer?.cancel()
        pacer = nil
        guard completion != nil else { return }
        guard !remaining.isEmpty else {
            if attempts.isEmpty { finish(.failure(lastError ?? .unreachable(target))) }
            return
        }
        let address = remaining.removeFirst()
        begin(address)
        if !remaining.isEmpty {
            let timer = DispatchSource.makeTimerSource(queue: queue)
            timer.schedule(deadline: .now() + attemptDelay)
            timer.setEventHandler { [weak self] in self?.next() }
            timer.resume()
            pacer = timer
        }
    }

    private func begin(_ address: SocketAddress) {
        let fd = socket(address.family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else {
            lastError = .system(call: "socket", errno: errno, message: String(cString: strerror(errno)))
            return next()
        }
        do {
            try prepare(fd, address)
        } catch {
            lastError = error as? SocketStreamError ?? .system(call: "setsockopt", errno: 0, message: "\(error)")
            close(fd)
            return next()
        }
        let result = address.data.withUnsafeBytes { raw in
            connect(fd, raw.baseAddress!.assumingMemoryBound(to: sockaddr.self), socklen_t(raw.count))
        }
        if result == 0 { return won(fd) }
        guard errno == EINPROGRESS else {
            lastError = .connect(errno: errno, target: "\(address)")
            close(fd)
            return next()
        }
        let source = DispatchSource.makeWriteSource(fileDescriptor: fd, queue: queue)
        source.setEventHandler { [weak self] in self?.settled(fd, address) }
        attempts[fd] = Attempt(fd: fd, source: source)
        source.resume()
    }

    private func settled(_ fd: Int32, _ address: SocketAddress) {
        guard let attempt = attempts.removeValue(forKey: fd) else { return }
        var code: Int32 = 0
        var length = socklen_t(MemoryLayout<Int32>.size)
        if getsockopt(fd, SOL_SOCKET, SO_ERROR, &code, &length) != 0 { code = errno }
        attempt.keep = code == 0
        attempt.source.cancel()
        if code == 0 { return won(fd) }
        lastError = .connect(errno: code, target: "\(address)")
        next()
    }

    private func won(_ fd: Int32) {
        finish(.success(fd))
    }

    private func finish(_ result: Result<Int32, SocketStreamError>) {
        pacer?.cancel(); pacer = nil
        deadline?.cancel(); deadline = nil
        for attempt in attempts.values { attempt.source.cancel() }
        attempts = [:]
        remaining = []
        defer { keepAlive = nil }
        guard let completion else { return }
        self.completion = nil
        completion(result)
    }
}
