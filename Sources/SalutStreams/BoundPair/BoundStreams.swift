import Foundation
import Glibc

/// The reading end of a bound stream pair (see `Stream.getBoundStreams`).
final class BoundInputStream: InputStream {
    // State lives in `buffer` (locked) and `events` (locked): safe for one reader thread while
    // the writer runs on another.

    let buffer: BoundBuffer
    let events = StreamEvents()
    /// For socket streams: the connection behind the pair.
    let connection: SocketConnection?
    /// For socket streams: holds the stream in `opening` until connected.
    var gate: ConnectionGate? { connection?.gate }
    private weak var storedDelegate: (any StreamDelegate)?

    init(buffer: BoundBuffer, connection: SocketConnection? = nil) {
        self.buffer = buffer
        self.connection = connection
        super.init(data: Data())
    }

    /// A stream let go without `close()` is closed, as on Apple platforms: the writer sees the
    /// reader gone, and a socket connection can end.
    deinit {
        buffer.closeReader()
        connection?.streamClosed()
    }

    override var delegate: (any StreamDelegate)? {
        get { storedDelegate }
        set { storedDelegate = newValue }
    }

    override var streamStatus: Stream.Status { events.streamStatus }
    override var streamError: (any Error)? { events.streamError }

    override func open() {
        events.open(self, gate: gate, then: refresh)
    }

    /// The connection is made or has failed: finish opening (or fail).
    func connectionSettled() {
        events.settle(self, gate: gate, then: refresh)
    }

    override func close() {
        guard events.streamStatus != .closed else { return }
        events.set(.closed)
        events.scheduler.removeFromAll()  // as on Apple's systems: a closed stream keeps no run loop
        buffer.closeReader()
        connection?.streamClosed()
    }

    /// Reads what is buffered (at most `len` bytes). Blocks while the buffer is empty and the
    /// writer is open. Returns 0 at the end of the data, -1 when the stream is not open.
    override func read(_ buffer: UnsafeMutablePointer<UInt8>, maxLength len: Int) -> Int {
        read(buffer, maxLength: len, blocking: true)
    }

    /// A read that never blocks (for the async side, after waiting for readability).
    func readWithoutBlocking(_ buffer: UnsafeMutablePointer<UInt8>, maxLength len: Int) -> Int {
        read(buffer, maxLength: len, blocking: false)
    }

    private func read(_ buffer: UnsafeMutablePointer<UInt8>, maxLength len: Int, blocking: Bool) -> Int {
        connection?.inputWanted()
        if blocking, events.streamStatus == .opening { gate?.waitUntilSettled(); connectionSettled() }
        let status = events.streamStatus
        // After a connection failed, the bytes that arrived before the failure are still read;
        // then the reader gets -1 and the error, never an end of data.
        let failedWithBytesLeft = status == .error && self.buffer.snapshot.available > 0
        guard status == .open || status == .atEnd || failedWithBytesLeft else { return -1 }
        guard len > 0 else { return 0 }
        events.consumed(.hasBytesAvailable)
        connection?.startPendingUpgrade()  // TLS asked for after opening starts before any read
        let n = self.buffer.read(into: buffer, maxLength: len, blocking: blocking) ?? 0
        if n > 0 { connection?.carriedBytes.store(true, ordering: .releasing) }
        if n == 0 && self.buffer.writerClosed {
            // A failure ends the buffer too: woken by that end, report the failure.
            if events.streamStatus == .error { return -1 }
            events.set(.atEnd)
        }
        refresh()
        return n
    }

    override func getBuffer(
        _ buffer: UnsafeMutablePointer<UnsafeMutablePointer<UInt8>?>, length len: UnsafeMutablePointer<Int>
    ) -> Bool {
        false
    }

    /// True when a read would not block: bytes are buffered, or the writer has closed (a read
    /// then returns 0).
    override var hasBytesAvailable: Bool {
        connection?.inputWanted()
        let state = buffer.snapshot
        return state.available > 0 || state.writerClosed
    }

    override func schedule(in aRunLoop: RunLoop, forMode mode: RunLoop.Mode) {
        connection?.inputWanted()
        events.scheduler.schedule(in: aRunLoop, forMode: mode)
        refresh()
    }

    override func remove(from aRunLoop: RunLoop, forMode mode: RunLoop.Mode) {
        events.scheduler.remove(from: aRunLoop, forMode: mode)
    }

    /// Delivers delegate calls on `queue` instead of a run loop (see
    /// `CFReadStreamSetDispatchQueue`).
    func setDispatchQueue(_ queue: DispatchQueue?) {
        guard events.streamStatus != .closed else { return }
        if queue != nil { connection?.inputWanted() }
        events.scheduler.setDispatchQueue(queue)
        refresh()
    }

    /// Socket streams answer the security level, SSL settings and, once connected, Salut's TLS
    /// and address properties; bound pairs have none.
    override func property(forKey key: Stream.PropertyKey) -> AnyObject? {
        connection?.property(forKey: key)
    }

    /// Socket streams take the security level and SSL settings before they are opened (see
    /// `kCFStreamPropertySSLSettings`); false for anything else, or after opening.
    override func setProperty(_ property: AnyObject?, forKey key: Stream.PropertyKey) -> Bool {
        connection?.setProperty(property, forKey: key) ?? false
    }

    /// Posts whatever has become true (only a scheduled stream posts events).
    func refresh() {
        guard events.scheduler.isScheduled else { return }
        let status = events.streamStatus
        guard status == .open || status == .atEnd else { return }
        let state = buffer.snapshot
        if state.available > 0 {
            events.post(.hasBytesAvailable, to: self)
        } else if state.writerClosed {
            events.set(.atEnd)
            events.post(.endEncountered, to: self, once: true)
        }
    }
}

/// The writing end of a bound stream pair.
final class BoundOutputStream: OutputStream {
    // State lives in `buffer` (locked) and `events` (locked).

    let buffer: BoundBuffer
    let events = StreamEvents()
    private weak var storedDelegate: (any StreamDelegate)?
    /// For socket streams: the connection behind the pair.
    let connection: SocketConnection?
    /// For socket streams: holds the stream in `opening` until connected.
    var gate: ConnectionGate? { connection?.gate }

    init(buffer: BoundBuffer, connection: SocketConnection? = nil) {
        self.buffer = buffer
        self.connection = connection
        super.init(toMemory: ())
    }

    /// A stream let go without `close()` is closed: the reader sees the end of the data once
    /// what was written is read (for a socket: sent, then half-closed).
    deinit {
        buffer.closeWriter()
        connection?.streamClosed()
    }

    /// Required by `OutputStream`; makes a writer whose reader is already gone (every write
    /// fails). Use `Stream.getBoundStreams` or `BoundStreamPair` instead.
    required init(toMemory: ()) {
        connection = nil
        buffer = BoundBuffer(capacity: 1)
        buffer.closeReader()
        super.init(toMemory: ())
    }

    override var delegate: (any StreamDelegate)? {
        get { storedDelegate }
        set { storedDelegate = newValue }
    }

    override var streamStatus: Stream.Status { events.streamStatus }
    override var streamError: (any Error)? { events.streamError }

    override func open() {
        events.open(self, gate: gate, then: refresh)
    }

    /// The connection is made or has failed: finish opening (or fail).
    func connectionSettled() {
        events.settle(self, gate: gate, then: refresh)
    }

    override func close() {
        guard events.streamStatus != .closed else { return }
        events.set(.closed)
        events.scheduler.removeFromAll()  // as on Apple's systems: a closed stream keeps no run loop
        buffer.closeWriter()
        connection?.streamClosed()
    }

    /// Writes as much of `buffer` as fits (at most the free space) and returns how much it
    /// took. Blocks while the buffer is full and the reader is open. Returns -1 with
    /// `streamError` set to ``StreamFailure/readerClosed`` once the reader has closed, or -1
    /// when the stream is not open.
    override func write(_ buffer: UnsafePointer<UInt8>, maxLength len: Int) -> Int {
        write(buffer, length: len, blocking: true)
    }

    private func write(_ buffer: UnsafePointer<UInt8>, length: Int, blocking: Bool) -> Int {
        if blocking, events.streamStatus == .opening { gate?.waitUntilSettled(); connectionSettled() }
        guard events.streamStatus == .open else { return -1 }
        guard length > 0 else { return 0 }
        startingToWrite()
        if let pump = connection?.pump {
            while true {
                switch pump.sendDirectly(from: buffer, length: length) {
                case .sent(let n):
                    refresh()
                    return n
                case .socketFull(let fd) where blocking:
                    // Wait for the socket to drain on this thread (a blocking write may block),
                    // briefly, then look again: the connection may have changed meanwhile.
                    var entry = pollfd(fd: fd, events: Int16(POLLOUT), revents: 0)
                    _ = poll(&entry, 1, 50)
                    continue
                case .socketFull, .useBuffer:
                    break
                }
                break
            }
        }
        return bufferedWrite(buffer, length: length, blocking: blocking)
    }

    /// A write for a task, after it waited for space, that never blocks: what fits of `data`
    /// from `offset` (0 when full), as a non-blocking write takes it, except that a direct send
    /// to the socket is made on the connection's queue while the task waits suspended, never
    /// with its thread blocked on that queue (see `SocketPump.sendDirectly(_:from:)`).
    func write(_ data: Data, from offset: Int) async -> Int {
        guard events.streamStatus == .open else { return -1 }
        guard offset < data.count else { return 0 }
        startingToWrite()
        // (Bytes already queued go first: then the buffer takes these too, without the hop.)
        if let pump = connection?.pump, self.buffer.snapshot.available == 0,
            case .sent(let n) = await pump.sendDirectly(data, from: offset)
        {
            refresh()
            return n
        }
        return data.withUnsafeBytes { raw in
            bufferedWrite(
                raw.bindMemory(to: UInt8.self).baseAddress! + offset, length: data.count - offset, blocking: false)
        }
    }

    /// What every write does before its bytes go: the space event is taken, and TLS asked for
    /// after opening starts before this byte leaves (asked for from now on, it comes too late).
    private func startingToWrite() {
        events.consumed(.hasSpaceAvailable)
        connection?.startPendingUpgrade()
        connection?.carriedBytes.store(true, ordering: .releasing)
    }

    /// Copies into the buffer the pump sends from.
    private func bufferedWrite(_ buffer: UnsafePointer<UInt8>, length: Int, blocking: Bool) -> Int {
        switch self.buffer.write(from: buffer, length: length, blocking: blocking) {
        case .wrote(let n):
            refresh()
            return n
        case .wouldBlock:
            return 0
        case .readerGone:
            events.fail(StreamFailure.readerClosed)
            refresh()
            return -1
        }
    }

    /// True when a write would not block: there is free space (or the reader has gone, when a
    /// write fails at once).
    override var hasSpaceAvailable: Bool {
        let state = buffer.snapshot
        return state.space > 0 || state.readerClosed
    }

    override func schedule(in aRunLoop: RunLoop, forMode mode: RunLoop.Mode) {
        events.scheduler.schedule(in: aRunLoop, forMode: mode)
        refresh()
    }

    override func remove(from aRunLoop: RunLoop, forMode mode: RunLoop.Mode) {
        events.scheduler.remove(from: aRunLoop, forMode: mode)
    }

    /// Delivers delegate calls on `queue` instead of a run loop (see
    /// `CFReadStreamSetDispatchQueue`).
    func setDispatchQueue(_ queue: DispatchQueue?) {
        guard events.streamStatus != .closed else { return }
        events.scheduler.setDispatchQueue(queue)
        refresh()
    }

    /// Socket streams answer the security level, SSL settings and, once connected, Salut's TLS
    /// and address properties; bound pairs have none.
    override func property(forKey key: Stream.PropertyKey) -> AnyObject? {
        connection?.property(forKey: key)
    }

    /// Socket streams take the security level and SSL settings before they are opened (see
    /// `kCFStreamPropertySSLSettings`); false for anything else, or after opening.
    override func setProperty(_ property: AnyObject?, forKey key: Stream.PropertyKey) -> Bool {
        connection?.setProperty(property, forKey: key) ?? false
    }

    func refresh() {
        guard events.scheduler.isScheduled, events.streamStatus == .open || buffer.snapshot.readerClosed else { return }
        let state = buffer.snapshot
        if state.readerClosed {
            events.fail(StreamFailure.readerClosed)
            events.post(.errorOccurred, to: self, once: true)
        } else if state.space > 0 {
            events.post(.hasSpaceAvailable, to: self)
        }
    }
}

extension Stream {
    /// Makes an input and an output stream joined by an in-memory buffer of `bufferSize`
    /// bytes, as Apple's `getBoundStreams` does: what is written to `outputStream` is read from
    /// `inputStream`, a write takes at most the free space, and both ends block (unscheduled) or
    /// post events (scheduled in a run loop) as Apple documents. Both streams start unopened.
    ///
    /// A `bufferSize` below 1 is treated as 1.
    public class func getBoundStreams(
        withBufferSize bufferSize: Int,
        inputStream: UnsafeMutablePointer<InputStream?>?,
        outputStream: UnsafeMutablePointer<OutputStream?>?
    ) {
        let pair = BoundStreamPair(bufferSize: bufferSize)
        inputStream?.pointee = pair.input
        outputStream?.pointee = pair.output
    }
}

/// A bound pair, for Swift callers who prefer a value to out-pointers.
///
/// (Apple's signature takes `AutoreleasingUnsafeMutablePointer`, which Linux lacks; call sites
/// written `&input`/`&output` compile unchanged against the `UnsafeMutablePointer` form here.)
public struct BoundStreamPair: @unchecked Sendable {
    // @unchecked: the streams are thread-safe between one reader and one writer.

    /// The reading end.
    public let input: InputStream
    /// The writing end.
    public let output: OutputStream

    init(input: InputStream, output: OutputStream) {
        self.input = input
        self.output = output
    }

    /// Makes a pair joined by a buffer of `bufferSize` bytes (at least 1).
    public init(bufferSize: Int) {
        let buffer = BoundBuffer(capacity: max(1, bufferSize))
        let input = BoundInputStream(buffer: buffer)
        let output = BoundOutputStream(buffer: buffer)
        // Safe from the other end's thread: a stream's `refresh` takes only its own locks.
        let weakInput = WeaklyHandedOver(input), weakOutput = WeaklyHandedOver(output)
        buffer.readerChanged = { weakInput.object?.refresh() }
        buffer.writerChanged = { weakOutput.object?.refresh() }
        self.input = input
        self.output = output
    }

    /// Closes both streams, as closing each one does: for socket streams, the connection is
    /// let go (with TLS's close_notify when it can still be sent).
    public func close() {
        input.close()
        output.close()
    }

    /// Makes the two ends of a connection held in memory: what one end's output writes, the
    /// other end's input reads, each way through a buffer of `bufferSize` bytes (at least 1).
    /// Two programs' halves can talk over it in one process, with no socket and no TLS (what a
    /// protocol's tests want). Closing an output ends the data the other end reads; closing an
    /// input makes the other end's writes fail. ``finishSending()`` closes the output and
    /// returns at once; there is no peer to trust (``peerTrust`` is nil).
    ///
    /// ```swift
    /// let (client, server) = BoundStreamPair.makeConnection(bufferSize: 64 * 1024)
    /// ```
    public static func makeConnection(bufferSize: Int) -> (BoundStreamPair, BoundStreamPair) {
        let there = BoundStreamPair(bufferSize: bufferSize), back = BoundStreamPair(bufferSize: bufferSize)
        return (
            BoundStreamPair(input: back.input, output: there.output),
            BoundStreamPair(input: there.input, output: back.output)
        )
    }
}
