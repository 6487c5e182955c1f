import CAvahi
import Dispatch
import Glibc

/// An `AvahiPoll` implemented on libdispatch.
///
/// Avahi asks its poll adapter for file-descriptor watches and wall-clock timeouts. Here a watch
/// is a dispatch read source and/or write source on the descriptor, and a timeout is a one-shot
/// dispatch timer. Every source targets `queue`, so every Avahi callback runs there, and every
/// Avahi call Salut makes must run there too: the queue is the one lock around the client
/// library. Nothing polls or sleeps.
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
            let watch = Watch(fd: fd, queue: poll.queue, callback: callback, userdata: userdata)
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

/// One `AvahiWatch`: dispatch sources that exist only while Avahi wants their event.
///
/// Sources are created when an event is asked for and cancelled when it no longer is, so no
/// source is ever left suspended (libdispatch forbids releasing a suspended source).
private final class Watch: @unchecked Sendable {
    // @unchecked: all state is touched only on `queue` (Avahi calls the poll table only there).

    let fd: Int32
    let queue: DispatchQueue
    let callback: AvahiWatchCallback
    let userdata: UnsafeMutableRawPointer?
    private var read: DispatchSourceRead?
    private var write: DispatchSourceWrite?
    /// The events being delivered by the callback now running (Avahi's `watch_get_events`).
    private(set) var happened = AvahiWatchEvent(rawValue: 0)

    init(fd: Int32, queue: DispatchQueue, callback: @escaping AvahiWatchCallback, userdata: UnsafeMutableRawPointer?) {
        self.fd = fd
        self.queue = queue
        self.callback = callback
        self.userdata = userdata
    }

    static func from(_ pointer: OpaquePointer) -> Watch {
        Unmanaged<Watch>.fromOpaque(UnsafeRawPointer(pointer)).takeUnretainedValue()
    }

    func update(_ events: AvahiWatchEvent) {
        let wantsRead = events.rawValue & AVAHI_WATCH_IN.rawValue != 0
        let wantsWrite = events.rawValue & AVAHI_WATCH_OUT.rawValue != 0
        if wantsRead, read == nil {
            let source = DispatchSource.makeReadSource(fileDescriptor: fd, queue: queue)
            source.setEventHandler { [weak self] in self?.fire(AVAHI_WATCH_IN) }
            source.resume()
            read = source
        } else if !wantsRead, let source = read {
            source.cancel()
            read = nil
        }
        if wantsWrite, write == nil {
            let source = DispatchSource.makeWriteSource(fileDescriptor: fd, queue: queue)
            source.setEventHandler { [weak self] in self?.fire(AVAHI_WATCH_OUT) }
            source.resume()
            write = source
        } else if !wantsWrite, let source = write {
            source.cancel()
            write = nil
        }
    }

    private func fire(_ event: AvahiWatchEvent) {
        // `self` is held by the caller's strong reference for the whole call, even if the
        // callback frees the watch.
        happened = event
        callback(OpaquePointer(Unmanaged.passUnretained(self).toOpaque()), fd, event, userdata)
        happened = AvahiWatchEvent(rawValue: 0)
    }

    func cancel() {
        read?.cancel()
        write?.cancel()
        read = nil
        write = nil
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
        timer?.cancel()
        timer = nil
        guard let tv else { return }
        var now = timeval()
        gettimeofday(&now, nil)
        let micros = (Int64(tv.pointee.tv_sec) - Int64(now.tv_sec)) * 1_000_000
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
