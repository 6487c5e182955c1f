import Foundation
import Glibc

/// What one receive or send on a transport did.
enum TransferOutcome {
    /// This many bytes moved (more than 0).
    case moved(Int)
    /// Nothing can move until the socket is ready in the same direction again.
    case wouldBlock
    /// Nothing can move until the socket is ready in the *other* direction (TLS may need to
    /// write to read, or read to write).
    case needsOtherDirection
    /// The peer finished sending (receive), or our sending side is now closed (finishSending).
    case ended
    /// The connection is broken.
    case failed(SocketStreamError)

    /// The bytes moved: 0 for every other outcome.
    var movedCount: Int {
        if case .moved(let n) = self { return n }
        return 0
    }
}

/// How the socket pump moves bytes over a connected non-blocking descriptor: in the clear, or
/// through TLS.
protocol ByteTransport: AnyObject {
    func receive(into buffer: UnsafeMutableRawPointer, count: Int) -> TransferOutcome
    func send(from buffer: UnsafeRawPointer, count: Int) -> TransferOutcome
    /// Ends our direction of the connection (TLS close_notify, then TCP half-close).
    func finishSending() -> TransferOutcome
}

/// Bytes in the clear: `recv`/`send` with `MSG_NOSIGNAL`, `shutdown(SHUT_WR)` to finish.
final class PlainTransport: ByteTransport {
    let fd: Int32
    /// Bytes already read from the socket, delivered before anything `recv` returns: those that
    /// TLS read ahead past the peer's close_notify, when a connection leaves TLS.
    private var carriedOver: [UInt8]
    /// How many of `carriedOver` were delivered.
    private var carriedFrom = 0

    init(fd: Int32, carriedOver: [UInt8] = []) {
        self.fd = fd
        self.carriedOver = carriedOver
    }

    /// Takes back the carried-over bytes not delivered yet: when TLS starts again, they are
    /// bytes after that point, which belong to TLS.
    func takeCarriedOver() -> [UInt8] {
        defer { carriedOver = []; carriedFrom = 0 }
        return Array(carriedOver[carriedFrom...])
    }

    func receive(into buffer: UnsafeMutableRawPointer, count: Int) -> TransferOutcome {
        if carriedFrom < carriedOver.count {
            let n = min(count, carriedOver.count - carriedFrom)
            carriedOver.withUnsafeBytes { buffer.copyMemory(from: $0.baseAddress! + carriedFrom, byteCount: n) }
            carriedFrom += n
            if carriedFrom == carriedOver.count { carriedOver = []; carriedFrom = 0 }
            return .moved(n)
        }
        while true {
            let n = recv(fd, buffer, count, 0)
            if n > 0 { return .moved(n) }
            if n == 0 { return .ended }
            if errno == EINTR { continue }
            if errno == EAGAIN || errno == EWOULDBLOCK { return .wouldBlock }
            return .failed(.connectionLost(String(cString: strerror(errno))))
        }
    }

    func send(from buffer: UnsafeRawPointer, count: Int) -> TransferOutcome {
        while true {
            let n = Glibc.send(fd, buffer, count, Int32(MSG_NOSIGNAL))
            if n > 0 { return .moved(n) }
            if n < 0 && errno == EINTR { continue }
            if n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) { return .wouldBlock }
            return .failed(.connectionLost(n == 0 ? "send wrote nothing" : String(cString: strerror(errno))))
        }
    }

    func finishSending() -> TransferOutcome {
        guard shutdown(fd, Int32(SHUT_WR)) == 0 else {
            // ENOTCONN: the peer already reset; what was written may not have reached it.
            return .failed(.connectionLost("the half-close failed: \(String(cString: strerror(errno)))"))
        }
        return .ended
    }
}
