import Dispatch
import Foundation
import Glibc

/// Connects a non-blocking TCP socket to the first of several addresses that answers, the
/// Happy Eyeballs way (RFC 8305). The decisions are ``HappyEyeballs.StateMachine``'s; this shell
/// opens the sockets, watches them in the ``ReadinessLoop`` and runs the two timers (pacing
/// and the overall deadline), all on `queue`.
final class HappyEyeballs: @unchecked Sendable {
    // @unchecked: every mutable property is used only on `queue`.

    /// One connection attempt: its socket and the watch that waits for it to become writable.
    private struct Attempt {
        let fd: Int32
        let address: SocketAddress
        let watch: ReadinessWatch

        /// Stops watching and closes the socket (the attempt lost or failed).
        func abandon() {
            watch.cancel()
            close(fd)
        }
    }
    /// An attempt that connected within its `connect` call, never watched.
    private var settledAtOnce: [ID: Connected] = [:]

    /// The winning socket, and the address it is connected to.
    struct Connected: Sendable {
        let fd: Int32
        let address: SocketAddress
    }

    private typealias ID = HappyEyeballs.StateMachine.AttemptID
    private let queue: DispatchQueue
    private var machine: HappyEyeballs.StateMachine
    private var completion: (@Sendable (Result<Connected, SocketStreamError>) -> Void)?
    private var attempts: [ID: Attempt] = [:]
    private var pacer: DispatchSourceTimer?
    private var deadline: DispatchSourceTimer?
    /// Keeps the connector alive while it works (its watches hold it only weakly).
    private var keepAlive: HappyEyeballs?
    /// Applied to each new socket before it connects (socket options).
    private let prepare: @Sendable (Int32, SocketAddress) throws -> Void

    /// - Parameters:
    ///   - addresses: where to connect, in the resolver's order.
    ///   - target: how to name the destination in errors (`host:port`).
    init(
        addresses: [SocketAddress], target: ConnectTarget, queue: DispatchQueue,
        attemptDelay: TimeInterval = 0.25, timeout: TimeInterval = 30,
        prepare: @escaping @Sendable (Int32, SocketAddress) throws -> Void = { _, _ in },
        completion: @escaping @Sendable (Result<Connected, SocketStreamError>) -> Void
    ) {
        self.prepare = prepare
        self.queue = queue
        self.completion = completion
        machine = HappyEyeballs.StateMachine(
            addresses: addresses, target: target,
            attemptDelay: Self.duration(OperationLimit.clampedSeconds(attemptDelay, default: 0.25)),
            timeout: Self.duration(OperationLimit.clampedSeconds(timeout, default: 30)))
    }

    /// Whole microseconds (`Duration.seconds(Double)` scales through floating point, slowly).
    private static func duration(_ seconds: TimeInterval) -> Duration {
        .microseconds(Int64(seconds * 1_000_000))
    }

    /// Starts the first attempt. Call on the queue.
    func start() {
        dispatchPrecondition(condition: .onQueue(queue))
        let actions = machine.start()
        guard !actions.isEmpty else { return }  // cancelled before it started: nothing to keep
        keepAlive = self
        perform(actions)
    }

    /// Gives up: open attempts are closed and the completion gets ``SocketStreamError/cancelled``.
    func cancel() {
        queue.async { self.perform(self.machine.cancelled()) }
    }

    private func perform(_ actions: [HappyEyeballs.StateMachine.Action]) {
        var work = actions[...]
        while let action = work.popFirst() {
            let more = perform(action)
            if !more.isEmpty { work = more[...] + work }
        }
        // The deadline is armed only if the first attempts did not settle at once (loopback).
        if let after = pendingDeadline {
            pendingDeadline = nil
            if completion != nil { deadline = timer(after) { $0.deadlineReached() } }
        }
    }
    private var pendingDeadline: Duration?

    private func perform(_ action: HappyEyeballs.StateMachine.Action) -> [HappyEyeballs.StateMachine.Action] {
        switch action {
        case .startDeadline(let after):
            pendingDeadline = after
        case .schedulePacer(let after):
            pacer?.cancel()
            pacer = timer(after) { $0.pacerFired() }
        case .beginAttempt(let id, let address):
            return begin(id, address)
        case .abandonAttempt(let id):
            attempts.removeValue(forKey: id)?.abandon()
            if let settled = settledAtOnce.removeValue(forKey: id) { close(settled.fd) }
        case .succeed(let id):
            if let settled = settledAtOnce.removeValue(forKey: id) {
                finish(.success(settled))
                break
            }
            guard let attempt = attempts.removeValue(forKey: id) else { break }
            // From `cancel`'s return the loop is done with the descriptor: the pump can watch
            // it afresh.
            attempt.watch.cancel()
            finish(.success(Connected(fd: attempt.fd, address: attempt.address)))
        case .fail(let error):
            SalutLogging.logger.debug("connecting failed: \(error)")
            finish(.failure(error))
        }
        return []
    }

    private func timer(
        _ after: Duration, _ event: @escaping (inout HappyEyeballs.StateMachine) -> [HappyEyeballs.StateMachine.Action]
    ) -> DispatchSourceTimer {
        let timer = DispatchSource.makeTimerSource(queue: queue)
        timer.schedule(deadline: .now() + OperationLimit.dispatchInterval(after))
        timer.setEventHandler { [weak self] in
            guard let self else { return }
            self.perform(event(&self.machine))
        }
        timer.resume()
        return timer
    }

    private func begin(_ id: ID, _ address: SocketAddress) -> [HappyEyeballs.StateMachine.Action] {
        SalutLogging.logger.trace("connecting to \(address)")
        let fd = socket(
            address.family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue),
            0)
        guard fd >= 0 else {
            return machine.attemptFailed(
                id, .system(call: "socket", errno: errno, message: String(cString: strerror(errno))))
        }
        do {
            try prepare(fd, address)
        } catch {
            close(fd)
            return machine.attemptFailed(
                id, error as? SocketStreamError ?? .system(call: "setsockopt", errno: 0, message: "\(error)"))
        }
        let result = address.withBytes { raw in
            connect(fd, raw.baseAddress!.assumingMemoryBound(to: sockaddr.self), socklen_t(raw.count))
        }
        let code = errno
        guard result == 0 || code == EINPROGRESS else {
            close(fd)
            SalutLogging.logger.debug("connecting to \(address) failed: \(String(cString: strerror(code)))")
            return machine.attemptFailed(id, .connect(errno: code, target: "\(address)"))
        }
        // On loopback (and often on a fast LAN) the handshake is over when `connect` returns:
        // look once, and skip the watch and the event it would wait for.
        var entry = pollfd(fd: fd, events: Int16(POLLOUT), revents: 0)
        if result == 0 || poll(&entry, 1, 0) == 1 {
            // Writable with no error or hang-up is connected; otherwise `SO_ERROR` says why not.
            let clean = result == 0 || entry.revents & Int16(POLLERR | POLLHUP) == 0
            let error = clean ? 0 : Self.pendingError(fd)
            if error == 0 {
                settledAtOnce[id] = Connected(fd: fd, address: address)
                return machine.attemptConnected(id)
            }
            close(fd)
            SalutLogging.logger.debug("connecting to \(address) failed: \(String(cString: strerror(error)))")
            return machine.attemptFailed(id, .connect(errno: error, target: "\(address)"))
        }
        do throws(SocketStreamError) {
            let watch = try ReadinessWatch(fd: fd, queue: queue) { [weak self] ready in
                self?.settled(id, address, ready)
            }
            attempts[id] = Attempt(fd: fd, address: address, watch: watch)
            try watch.want(.writable)
        } catch {
            attempts.removeValue(forKey: id)?.watch.cancel()
            close(fd)
            return machine.attemptFailed(id, error)
        }
        return []
    }

    /// `SO_ERROR`: 0 once connected, else why the connection failed.
    private static func pendingError(_ fd: Int32) -> Int32 {
        var code: Int32 = 0
        var length = socklen_t(MemoryLayout<Int32>.size)
        return getsockopt(fd, SOL_SOCKET, SO_ERROR, &code, &length) == 0 ? code : errno
    }

    /// The attempt's socket became writable: connected, or failed (`SO_ERROR` says which).
    private func settled(_ id: ID, _ address: SocketAddress, _ ready: Result<Readiness, SocketStreamError>) {
        guard let attempt = attempts[id] else { return }
        if case .failure(let error) = ready {
            attempts.removeValue(forKey: id)?.abandon()
            return perform(machine.attemptFailed(id, error))
        }
        let code = Self.pendingError(attempt.fd)
        if code == 0 {
            _ = try? attempt.watch.want([])  // heard: no more events while the machine decides
            return perform(machine.attemptConnected(id))
        }
        attempts.removeValue(forKey: id)?.abandon()
        SalutLogging.logger.debug("connecting to \(address) failed: \(String(cString: strerror(code)))")
        perform(machine.attemptFailed(id, .connect(errno: code, target: "\(address)")))
    }

    private func stopTimers() {
        pacer?.cancel(); pacer = nil
        deadline?.cancel(); deadline = nil
    }

    private func finish(_ result: Result<Connected, SocketStreamError>) {
        stopTimers()
        for attempt in attempts.values { attempt.abandon() }
        attempts = [:]
        for settled in settledAtOnce.values { close(settled.fd) }
        settledAtOnce = [:]
        let completion = self.completion
        self.completion = nil
        // Whoever called this holds the connector for the rest of the call, so it can let go
        // of itself here: no extra block on the queue, which a caller about to `queue.sync`
        // (the first direct write) would otherwise wait behind, on another thread's wake-up.
        keepAlive = nil
        completion?(result)
    }
}
