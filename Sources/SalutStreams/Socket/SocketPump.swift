import Dispatch
import Foundation
import Glibc

/// Moves bytes between a connected non-blocking socket and the two buffers behind a socket
/// stream pair, driven by libdispatch sources on one serial queue: no thread per connection.
///
/// Inbound, the pump is the buffer's writer: it reads from the socket only as much as the buffer
/// has room for, and pauses reading while it is full (backpressure reaches the peer through TCP).
/// Outbound, it is the reader: it sends what the user wrote, in pieces, with `MSG_NOSIGNAL` (no
/// SIGPIPE), and half-closes the socket (`SHUT_WR`) once the user closed the output and
/// everything is sent. The descriptor is closed when both streams are closed or the connection
/// fails.
final class SocketPump: @unchecked Sendable {
    // @unchecked: every mutable property is used only on `queue`.

    let queue: DispatchQueue
    let inbound: BoundBuffer
    let outbound: BoundBuffer
    private var fd: Int32 = -1
    private var reader: DispatchSourceRead?
    private var writer: DispatchSourceWrite?
    private var readerSuspended = false
    private var writerSuspended = false
    /// Bytes taken from `outbound` and not yet sent: `outScratch[sendFrom..<sendTo]`.
    private var outScratch = [UInt8](repeating: 0, count: 256 * 1024)
    private var sendFrom = 0
    private var sendTo = 0
    private var sentShutdown = false
    private var finished = false
    private var scratch = [UInt8](repeating: 0, count: 256 * 1024)
    /// Called (on the queue) when the connection breaks.
    var onFailure: (@Sendable (SocketStreamError) -> Void)?

    init(queue: DispatchQueue, inbound: BoundBuffer, outbound: BoundBuffer) {
        self.queue = queue
        self.inbound = inbound
        self.outbound = outbound
    }

    /// Starts pumping on a connected socket. Call on the queue.
    func run(_ fd: Int32) {
        self.fd = fd
        let read = DispatchSource.makeReadSource(fileDescriptor: fd, queue: queue)
        let write = DispatchSource.makeWriteSource(fileDescriptor: fd, queue: queue)
        // The descriptor is closed only after both sources are done with it.
        let closer = DescriptorCloser(fd: fd, users: 2)
        read.setEventHandler { [weak self] in self?.readable() }
        write.setEventHandler { [weak self] in self?.writable() }
        read.setCancelHandler { closer.release() }
        write.setCancelHandler { closer.release() }
        reader = read
        writer = write
        read.resume()
        write.resume()
    }

    /// The user read from the inbound buffer (room again) or closed the input stream.
    func inboundChanged() {
        queue.async {
            if self.inbound.readerClosed { self.stopReading() } else { self.resumeReading() }
            self.closeIfDone()
        }
    }

    /// The user wrote to the outbound buffer or closed the output stream.
    func outboundChanged() {
        queue.async {
            guard let writer = self.writer, self.writerSuspended else { return }
            self.writerSuspended = false
            writer.resume()
            self.writable()
        }
    }

    // MARK: Private

    /// Reads until the socket has nothing more (EAGAIN), the buffer is full, or the peer closed.
    /// libdispatch does not promise another event while data remains, so one event drains all.
    private func readable() {
        while reader != nil {
            let room = inbound.snapshot.space
            guard room > 0 else { return pauseReading() }
            let n = scratch.withUnsafeMutableBytes { recv(fd, $0.baseAddress!, min(room, $0.count), 0) }
            if n > 0 {
                _ = scratch.withUnsafeBufferPointer { inbound.write(from: $0.baseAddress!, length: n, blocking: false) }
            } else if n == 0 {
                inbound.closeWriter()          // the peer closed: end of data after the buffered bytes
                stopReading()
                closeIfDone()
                return
            } else if errno == EINTR {
                continue
            } else if errno == EAGAIN || errno == EWOULDBLOCK {
                return
            } else {
                return fail(.connectionLost(String(cString: strerror(errno))))
            }
        }
    }

    /// Sends until the socket is full (EAGAIN) or nothing is left to send; then pauses, or
    /// half-closes once the user has closed the output and everything is sent.
    private func writable() {
        while writer != nil {
            if sendFrom == sendTo {
                let got = outScratch.withUnsafeMutableBufferPointer { outbound.read(into: $0.baseAddress!, maxLength: $0.count, blocking: false) }
                if let got, got > 0 {
                    sendFrom = 0
                    sendTo = got
                } else if outbound.writerClosed || outbound.readerClosed {
                    if !sentShutdown { sentShutdown = true; shutdown(fd, Int32(SHUT_WR)) }
                    stopWriting()
                    closeIfDone()
                    return
                } else {
                    return pauseWriting()
                }
            }
            let n = outScratch.withUnsafeBytes { send(fd, $0.baseAddress! + sendFrom, sendTo - sendFrom, Int32(MSG_NOSIGNAL)) }
            if n > 0 {
                sendFrom += n
            } else if n < 0 && errno == EINTR {
                continue
            } else if n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) {
                return
            } else {
                return fail(.connectionLost(String(cString: strerror(errno))))
            }
        }
    }

    private func pauseReading() {
        guard let reader, !readerSuspended else { return }
        readerSuspended = true
        reader.suspend()
    }

    private func resumeReading() {
        guard let reader, readerSuspended else { return }
        readerSuspended = false
        reader.resume()
        // Bytes (or the peer's EOF) that arrived while suspended may not raise a new event;
        // look once now.
        readable()
    }

    private func pauseWriting() {
        guard let writer, !writerSuspended else { return }
        writerSuspended = true
        writer.suspend()
    }

    private func stopReading() {
        guard let reader else { return }
        if readerSuspended { reader.resume(); readerSuspended = false }
        reader.cancel()
        self.reader = nil
    }

    private func stopWriting() {
        guard let writer else { return }
        if writerSuspended { writer.resume(); writerSuspended = false }
        writer.cancel()
        self.writer = nil
    }

    /// Both directions finished (or both streams closed): release the socket.
    private func closeIfDone() {
        let inputDone = reader == nil || inbound.readerClosed
        let outputDone = writer == nil   // stopped after the half-close, or never to write again
        guard inputDone && outputDone, !finished else { return }
        finished = true
        stopReading()
        stopWriting()
    }

    private func fail(_ error: SocketStreamError) {
        guard !finished else { return }
        finished = true
        stopReading()
        stopWriting()
        inbound.closeWriter()
        outbound.closeReader()
        onFailure?(error)
    }
}

/// Closes a descriptor once every dispatch source using it has been cancelled.
final class DescriptorCloser: @unchecked Sendable {
    // @unchecked: `users` is guarded by `lock`.
    private let lock = NSLock()
    private let fd: Int32
    private var users: Int

    init(fd: Int32, users: Int) {
        self.fd = fd
        self.users = users
    }

    func release() {
        lock.lock()
        users -= 1
        let last = users == 0
        lock.unlock()
        if last { close(fd) }
    }
}
