import CAvahi
import Dispatch
import Glibc
import SalutStreams

/// An `AvahiPoll` whose callbacks all run on one dispatch queue.
///
/// Avahi asks its poll adapter for file-descriptor watches and wall-clock timeouts. Here a watch
/// is the descriptor on Salut's readiness loop (``ReadinessWatch``) and a timeout is a one-shot
/// dispatch timer, both reporting on `queue`: every Avahi callback runs there, and every Avahi
/// call Salut makes must run there too (the watch and timeout methods check it). The queue is the
/// one lock around the client library. Nothing polls or sleeps.
///
/// The `AvahiPoll` table lives in memory owned by this object and must outlive every client made
/// with it; the `DiscoveryContext` that made it keeps it for as long as the context lives.
final class DispatchPoll: @unchecked Sendable {
    // @unchecked: `table` is written once in init; watches and timeouts are touched only on `queue`.

    let queue: DispatchQueue
    /// The function table handed to `avahi_client_new`.
    let table: UnsafeMutablePointer<AvahiPoll>

    init(queue: DispatchQueue) {
        self.queue = queue
        table = .allocate(capacity: 1)
        table.initialize(to: AvahiPoll())
        table.pointee.userdata = Unmanaged.passUnretained(self).toOpaque()
        table.pointee.watch_new = { api, fd, events, callback, userdata in
            guard let api, let callback else { return nil }
            let poll = Unmanaged<DispatchPoll>.fromOpaque(api.pointee.userdata).takeUnretainedValue()
            // A descriptor epoll refuses is a watch Avahi cannot have: it gets nil, and fails the
            // client it was making.
            let watch: Watch
            do {
                watch = try Watch(fd: fd, queue: poll.queue, callback: callback, userdata: userdata)
            } catch {
                SalutLogging.logger.error("cannot watch Avahi's descriptor \(fd): \(error)")
                return nil
            }
            watch.update(events)
            return OpaquePointer(Unmanaged.passRetained(watch).toOpaque())
        }
        table.pointee.watch_update = { watch, events in
            guard let watch else { return }
            Watch.from(watch).update(events)
        }
        table.pointee.watch_get_events = { watch in
            guard let watch else { return AvahiWatchEvent(rawValue: 0) }
            return Watch.from(watch).happened
        }
        table.pointee.watch_free = { watch in
            guard let watch else { return }
            let box = Unmanaged<Watch>.fromOpaque(UnsafeRawPointer(watch)).takeRetainedValue()
            box.cancel()
        }
        table.pointee.timeout_new = { api, tv, callback, userdata in
            guard let api, let callback else { return nil }
            let poll = Unmanaged<DispatchPoll>.fromOpaque(api.pointee.userdata).takeUnretainedValue()
            let timeout = Timeout(queue: poll.queue, callback: callback, userdata: userdata)
            timeout.update(tv)
            return OpaquePointer(Unmanaged.passRetained(timeout).toOpaque())
        }
        table.pointee.timeout_update = { timeout, tv in
            guard let timeout else { return }
            Timeout.from(timeout).update(tv)
        }
        table.pointee.timeout_free = { timeout in
            guard let timeout else { return }
            let box = Unmanaged<Timeout>.fromOpaque(UnsafeRawPointer(timeout)).takeRetainedValue()
            box.update(nil)
        }
    }

    deinit {
        table.deinitialize(count: 1)
        table.deallocate()
    }
}

/// One `AvahiWatch`: the descriptor on Salut's readiness loop, reporting on `queue` what Avahi
/// asked to hear of.
///
/// Not libdispatch read and write sources, which this adapter used to make: Avahi closes its
/// D-Bus socket right after `watch_free`, while a dispatch source's cancellation completes
/// later. Closing a descriptor before its source's cancel handler has run is a misuse that
/// libdispatch does not survive on Linux: its epoll books kept the old number, the kernel handed
/// the number to a new descriptor, and a dispatch source on that one (a test's child pipe) died
/// with "source finalized twice". Sources made and cancelled fast on many threads have troubles
/// of their own there (swift-corelibs-libdispatch #949). A ``ReadinessWatch`` changes interest in
/// place, and its `cancel()` is done with the descriptor when it returns, so Avahi may close it
/// at once.
private final class Watch: @unchecked Sendable {
    // @unchecked: `happened`, `readiness` and `cancelled` are touched only on `queue` (Avahi
    // calls the poll table only there, and the readiness watch reports there).

    let fd: Int32
    let queue: DispatchQueue
    let callback: AvahiWatchCallback
    let userdata: UnsafeMutableRawPointer?
    private var readiness: ReadinessWatch?
    private var cancelled = false
    /// The events being delivered by the callback now running (Avahi's `watch_get_events`).
    private(set) var happened = AvahiWatchEvent(rawValue: 0)

    /// Watches `fd`, for nothing yet.
    /// - Throws: ``SocketStreamError`` when epoll refuses the descriptor.
    init(
        fd: Int32, queue: DispatchQueue, callback: @escaping AvahiWatchCallback, userdata: UnsafeMutableRawPointer?
    ) throws(SocketStreamError) {
        self.fd = fd
        self.queue = queue
        self.callback = callback
        self.userdata = userdata
        readiness = try ReadinessWatch(fd: fd, queue: queue) { [weak self] result in self?.report(result) }
    }

    static func from(_ pointer: OpaquePointer) -> Watch {
        Unmanaged<Watch>.fromOpaque(UnsafeRawPointer(pointer)).takeUnretainedValue()
    }

    /// Says what Avahi wants to hear of from now on.
    func update(_ events: AvahiWatchEvent) {
        dispatchPrecondition(condition: .onQueue(queue))
        var interest: Readiness = []
        if events.rawValue & AVAHI_WATCH_IN.rawValue != 0 { interest.insert(.readable) }
        if events.rawValue & AVAHI_WATCH_OUT.rawValue != 0 { interest.insert(.writable) }
        do {
            try readiness?.want(interest)
        } catch {
            // The socket cannot be heard of any more: Avahi learns it as an error on it, on a
            // later turn of the queue (not from inside the Avahi call that asked).
            queue.async { [weak self] in self?.report(.failure(error)) }
        }
    }

    /// On `queue`: hands what became ready (or the failure that stopped the watch, as an error
    /// on the socket) to Avahi's callback.
    private func report(_ result: Result<Readiness, SocketStreamError>) {
        guard !cancelled else { return }
        var event: UInt32 = 0
        switch result {
        case .success(let ready):
            if ready.contains(.readable) { event |= AVAHI_WATCH_IN.rawValue }
            if ready.contains(.writable) { event |= AVAHI_WATCH_OUT.rawValue }
        case .failure:
            event = AVAHI_WATCH_ERR.rawValue | AVAHI_WATCH_HUP.rawValue
        }
        guard event != 0 else { return }
        // `self` is held by the caller's strong reference for the whole call, even if the
        // callback frees the watch.
        happened = AvahiWatchEvent(rawValue: event)
        callback(OpaquePointer(Unmanaged.passUnretained(self).toOpaque()), fd, happened, userdata)
        happened = AvahiWatchEvent(rawValue: 0)
    }

    /// Stops the watch; from the return Avahi may close the descriptor.
    func cancel() {
        dispatchPrecondition(condition: .onQueue(queue))
        cancelled = true
        readiness?.cancel()
        readiness = nil
    }
}

/// One `AvahiTimeout`: a one-shot dispatch timer at an absolute wall-clock time.
private final class Timeout: @unchecked Sendable {
    // @unchecked: all state is touched only on `queue`.

    let queue: DispatchQueue
    let callback: AvahiTimeoutCallback
    let userdata: UnsafeMutableRawPointer?
    private var timer: DispatchSourceTimer?

    init(queue: DispatchQueue, callback: @escaping AvahiTimeoutCallback, userdata: UnsafeMutableRawPointer?) {
        self.queue = queue
        self.callback = callback
        self.userdata = userdata
    }

    static func from(_ pointer: OpaquePointer) -> Timeout {
        Unmanaged<Timeout>.fromOpaque(UnsafeRawPointer(pointer)).takeUnretainedValue()
    }

    /// Arms the timer for the absolute time `tv`, or disarms it when `tv` is nil.
    func update(_ tv: UnsafePointer<timeval>?) {
        dispatchPrecondition(condition: .onQueue(queue))
        timer?.cancel()
        timer = nil
        guard let tv else { return }
        var now = timeval()
        gettimeofday(&now, nil)
        let micros =
            (Int64(tv.pointee.tv_sec) - Int64(now.tv_sec)) * 1_000_000
            + (Int64(tv.pointee.tv_usec) - Int64(now.tv_usec))
        let source = DispatchSource.makeTimerSource(queue: queue)
        source.schedule(deadline: .now() + .microseconds(Int(max(0, micros))))
        source.setEventHandler { [weak self] in
            guard let self else { return }
            self.timer?.cancel()
            self.timer = nil
            self.callback(OpaquePointer(Unmanaged.passUnretained(self).toOpaque()), self.userdata)
        }
        source.resume()
        timer = source
    }
}
