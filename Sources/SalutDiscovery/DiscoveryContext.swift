import CAvahi
import Dispatch
import Foundation
import SalutStreams

/// The state of a ``DiscoveryContext``'s connection to the avahi-daemon.
public enum ConnectionState: Sendable, Equatable {
    /// Waiting for the daemon to appear on the system bus (at start, or after it went away).
    case connecting
    /// The daemon answers and its host name is established: discovery works.
    case running
    /// The daemon is (re-)registering this host's name, after a start or a host-name collision;
    /// published services are withdrawn until it is running again.
    case registeringHostName
    /// The D-Bus system bus itself cannot be reached; the context retries every second.
    case failed(DiscoveryError)
}

/// Facts the avahi-daemon reports about itself and this host.
public struct DaemonInfo: Sendable, Equatable {
    /// The daemon's version string, for example `avahi 0.8`.
    public var version: String
    /// This host's mDNS name without the domain, for example `vm`.
    public var hostName: String
    /// This host's fully qualified mDNS name, for example `vm.local`.
    public var hostNameFQDN: String
    /// The domain the daemon publishes in, normally `local`.
    public var domainName: String
}

/// One connection to the avahi-daemon, shared by every browser, resolver and publication made
/// with it.
///
/// The connection is driven by an `AvahiPoll` built on libdispatch (`DispatchPoll`): every call
/// into Avahi happens on the context's serial queue. The client is created with
/// `AVAHI_CLIENT_NO_FAIL`, so a missing daemon is a state (`connecting`), not an error: when the
/// daemon goes away, every browser reports its services as removed; when it comes back, every
/// publication is registered again and every browser, resolver and monitor restarts by itself.
///
/// Most programs use ``shared``. Make another context to keep a group of objects on their own
/// connection (for example in tests). A context lives as long as something refers to it.
public final class DiscoveryContext: @unchecked Sendable {
    // @unchecked: every mutable property below is read and written only on `queue`.

    /// The process-wide context that `NetService`, `NetServiceBrowser` and the async API use
    /// unless told otherwise.
    public static let shared = DiscoveryContext(label: "shared")

    let queue: DispatchQueue
    /// Resolutions of the last few seconds, reused by `connect` (locks itself).
    let recentResolutions = RecentResolutions()
    /// Failed contacts with services, for this context's browsers (locks itself).
    let failedContacts = FailedContacts()
    private let poll: DispatchPoll
    private var client: OpaquePointer?
    private var current: ConnectionState = .connecting
    private var operations: [ObjectIdentifier: any AvahiOperation] = [:]
    /// The type browsers shared by resolutions (``InstancePaths``), by type and domain.
    var instancePaths: [String: InstancePaths] = [:]
    /// How many unwatched names each of them remembers (``InstancePaths/rememberedNames``;
    /// lowered by tests).
    var rememberedInstanceNames = InstancePaths.rememberedNames
    private var watchers: [UUID: AsyncStream<ConnectionState>.Continuation] = [:]
    private var retry: DispatchWorkItem?
    /// Set by `deinit` (on any thread, hence the lock): freeing the client, or an Avahi event
    /// already on the queue, may call back into the context (a last state change), and nothing
    /// may then keep a reference to it (`queue.async { self… }` would).
    private let closing = Locked(false)
    /// Marks `queue`, so that `deinit` knows whether it runs there.
    private static let queueKey = DispatchSpecificKey<ObjectIdentifier>()

    /// Makes a context with its own connection to the daemon. The connection starts at once.
    /// - Parameter label: a name for the context's dispatch queue, shown in debuggers.
    public init(label: String = "context") {
        queue = DispatchQueue(label: "salut.avahi.\(label)")
        poll = DispatchPoll(queue: queue)
        queue.setSpecific(key: Self.queueKey, value: ObjectIdentifier(self))
        queue.async { self.connect() }
    }

    deinit {
        // No other reference exists, and every operation holds one, so none is attached. But
        // Avahi runs on `queue`: an event of its D-Bus socket already handed to the queue may be
        // inside the client library now. So the client is freed on the queue, after that event.
        closing.withLock { $0 = true }
        if DispatchQueue.getSpecific(key: Self.queueKey) == ObjectIdentifier(self) {
            releaseClient()
        } else {
            queue.sync { releaseClient() }
        }
    }

    /// On `queue`, from `deinit`: frees the client (Avahi frees its watches and timeouts, and
    /// closes its socket) and ends every state stream.
    private func releaseClient() {
        retry?.cancel()
        if let client { avahi_client_free(client) }
        client = nil
        for watcher in watchers.values { watcher.finish() }
    }

    // MARK: Public surface

    /// The connection state now.
    public var state: ConnectionState {
        queue.sync { current }
    }

    /// The connection state now and every change after it, as an async sequence. The sequence
    /// ends when the consuming task is cancelled.
    public var states: AsyncStream<ConnectionState> {
        AsyncStream { continuation in
            let id = UUID()
            queue.async {
                continuation.yield(self.current)
                self.watchers[id] = continuation
            }
            continuation.onTermination = { [weak self] _ in
                guard let self else { return }
                self.queue.async { self.watchers[id] = nil }
            }
        }
    }

    /// Waits until the daemon answers, then returns its version and this host's names.
    /// - Parameter timeout: how long to wait for the daemon, in seconds. NaN, zero or a negative
    ///   value takes the default (5 s); at most a billion seconds are waited.
    /// - Throws: ``DiscoveryError/daemonUnavailable(_:)`` when no daemon is running by then.
    public func daemonInfo(timeout: TimeInterval = 5) async throws -> DaemonInfo {
        try await whenRunning(timeout: timeout) { client in
            DaemonInfo(
                version: String(cString: avahi_client_get_version_string(client)),
                hostName: String(cString: avahi_client_get_host_name(client)),
                hostNameFQDN: String(cString: avahi_client_get_host_name_fqdn(client)),
                domainName: String(cString: avahi_client_get_domain_name(client))
            )
        }
    }

    // MARK: Internal: operations

    /// Runs `body` on the queue with the client once the connection is running, or throws
    /// `daemonUnavailable` after `timeout` seconds.
    func whenRunning<T: Sendable>(
        timeout: TimeInterval,
        _ body: @escaping @Sendable (OpaquePointer) throws -> T
    ) async throws -> T {
        let waiter = OneShot<T>()
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                waiter.set(continuation)
                queue.async {
                    let op = RunningWaiter(context: self, waiter: waiter, body: body)
                    self.attach(op)
                    let seconds = OperationLimit.clampedSeconds(timeout, default: 5)
                    // Weakly: a context whose operation ended must not live on (with its
                    // connection to the daemon) until the bound passes. While the operation
                    // waits, the caller holds the context and the context holds `op`.
                    self.queue.asyncAfter(deadline: .now() + seconds) { [weak self, weak op] in
                        if let self, let op { self.detach(op) }
                        waiter.fail(.daemonUnavailable("no answer within \(seconds) s"))
                    }
                }
            }
        } onCancel: {
            waiter.fail(.cancelled)
        }
    }

    /// Registers an operation: it is started now if the daemon is running, and restarted after
    /// every reconnection until it is detached. Call on `queue`.
    func attach(_ operation: any AvahiOperation) {
        dispatchPrecondition(condition: .onQueue(queue))
        operations[ObjectIdentifier(operation)] = operation
        if current == .running, let client { operation.clientIsRunning(client) }
    }

    /// Unregisters an operation. The operation frees its own Avahi objects. Call on `queue`.
    func detach(_ operation: any AvahiOperation) {
        dispatchPrecondition(condition: .onQueue(queue))
        operations[ObjectIdentifier(operation)] = nil
    }

    /// The client when the connection is running. Call on `queue`.
    var runningClient: OpaquePointer? {
        current == .running ? client : nil
    }

    // MARK: Private: the client's life

    private func connect() {
        dispatchPrecondition(condition: .onQueue(queue))
        var error: Int32 = 0
        let me = Unmanaged.passUnretained(self).toOpaque()
        let made = avahi_client_new(
            poll.table, AVAHI_CLIENT_NO_FAIL,
            { client, state, userdata in
                guard let client, let userdata else { return }
                let context = Unmanaged<DiscoveryContext>.fromOpaque(userdata).takeUnretainedValue()
                context.clientChanged(client, state)
            }, me, &error)
        guard let made else {
            // Without NO_FAIL's daemon wait, this happens when the system bus is not there.
            set(
                .failed(
                    .daemonUnavailable(
                        "cannot reach the D-Bus system bus: "
                            + DiscoveryError.avahiMessage(error))))
            scheduleReconnect()
            return
        }
        client = made
        // The callback has already run for the initial state; make sure state reflects it.
        clientChanged(made, avahi_client_get_state(made))
    }

    private func scheduleReconnect() {
        let item = DispatchWorkItem { [weak self] in
            self?.retry = nil
            self?.connect()
        }
        retry = item
        queue.asyncAfter(deadline: .now() + 1, execute: item)
    }

    private func clientChanged(_ client: OpaquePointer, _ state: AvahiClientState) {
        guard !closing.value else { return }
        switch state {
        case AVAHI_CLIENT_S_RUNNING:
            guard current != .running else { return }
            set(.running)
            for op in operations.values { op.clientIsRunning(client) }
        case AVAHI_CLIENT_S_REGISTERING, AVAHI_CLIENT_S_COLLISION:
            guard current != .registeringHostName else { return }
            let wasRunning = current == .running
            set(.registeringHostName)
            if wasRunning { for op in operations.values { op.clientIsReregistering() } }
        case AVAHI_CLIENT_CONNECTING:
            set(.connecting)
        case AVAHI_CLIENT_FAILURE:
            let code = avahi_client_errno(client)
            for op in operations.values { op.clientIsLost() }
            set(
                code == Int32(AVAHI_ERR_DISCONNECTED)
                    ? .connecting
                    : .failed(DiscoveryError(avahiCode: code)))
            // The daemon went away: this client is dead. Make a new one (NO_FAIL waits for
            // the daemon), outside Avahi's own callback.
            let dead = UInt(bitPattern: client)
            queue.async {
                if let old = self.client, UInt(bitPattern: old) == dead {
                    avahi_client_free(old)
                    self.client = nil
                }
                if self.client == nil { self.connect() }
            }
        default:
            break
        }
    }

    private func set(_ state: ConnectionState) {
        guard state != current else { return }
        current = state
        switch state {
        case .running: SalutLogging.logger.debug("avahi-daemon: running")
        case .connecting: SalutLogging.logger.debug("avahi-daemon: waiting for it on the system bus")
        case .registeringHostName: SalutLogging.logger.debug("avahi-daemon: registering this host's name")
        case .failed(let error):
            SalutLogging.logger.warning("avahi-daemon: unreachable (\(error)); retrying every second")
        }
        for watcher in watchers.values { watcher.yield(state) }
    }
}

/// An object built from Avahi objects that must be (re)created whenever the daemon is running.
///
/// All methods are called on the context's queue.
protocol AvahiOperation: AnyObject, Sendable {
    /// The daemon is running: create the Avahi objects if they do not exist.
    func clientIsRunning(_ client: OpaquePointer)
    /// The host name is being registered again: published entries must be withdrawn (reset);
    /// `clientIsRunning` follows.
    func clientIsReregistering()
    /// The daemon went away: free the Avahi objects and report what was lost.
    func clientIsLost()
}

extension AvahiOperation {
    func clientIsReregistering() {}
}

/// Resumes a waiter with `body`'s result as soon as the connection runs.
private final class RunningWaiter<T: Sendable>: AvahiOperation, @unchecked Sendable {
    // @unchecked: immutable after init, used only on the context's queue.
    let context: DiscoveryContext
    let waiter: OneShot<T>
    let body: @Sendable (OpaquePointer) throws -> T

    init(context: DiscoveryContext, waiter: OneShot<T>, body: @escaping @Sendable (OpaquePointer) throws -> T) {
        self.context = context
        self.waiter = waiter
        self.body = body
    }

    func clientIsRunning(_ client: OpaquePointer) {
        context.detach(self)
        do { waiter.succeed(try body(client)) } catch {
            waiter.fail(error as? DiscoveryError ?? .avahi(code: -1, message: "\(error)"))
        }
    }

    func clientIsLost() {}
}
