import Foundation
import SalutStreams
import SalutTestSupport
import XCTest

/// Salut's socket BIO reads ahead (one `recv` for several TLS records): the bytes after a
/// peer's close_notify may already be in it when TLS ends. These tests send the close_notify
/// and the plain bytes after it in one write, from Python's `ssl` over memory BIOs, so that
/// they always arrive together.
final class TLSReadAheadTests: SalutTestCase {
    private var certificate: TestCertificate!

    override func setUpWithError() throws {
        certificate = try TestCertificate.make(commonName: "read-ahead", alternativeNames: "IP:127.0.0.1")
    }

    /// A TLS server in Python: handshake, read a line, then (`after-ours`, `after-ours-big`)
    /// wait for our close_notify or (`at-once`) not, and send its close_notify and
    /// `plain after tls\n` in one write (`after-ours-big`: 100,000 bytes `0`-`9` and a newline,
    /// more than the socket BIO reads ahead); then echo one line in the clear, prefixed with
    /// "echo ".
    private static let server = #"""
        import socket, ssl, sys
        port, cert, key, mode = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", port))
        listener.listen(1)
        print("LISTENING", flush=True)
        conn, _ = listener.accept()
        conn.settimeout(20)
        incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        tls = context.wrap_bio(incoming, outgoing, server_side=True)
        def flush():
            data = outgoing.read()
            if data:
                conn.sendall(data)
        def feed():
            data = conn.recv(65536)
            if not data:
                raise EOFError("the client went away")
            incoming.write(data)
        while True:
            try:
                tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                flush()
                feed()
        flush()
        line = b""
        while not line.endswith(b"\n"):
            try:
                line += tls.read(100)
            except ssl.SSLWantReadError:
                flush()
                feed()
        if mode.startswith("after-ours"):
            # Our close_notify: read() returns b"" (or raises SSLZeroReturnError, by version).
            while True:
                try:
                    if tls.read(100) == b"":
                        break
                except ssl.SSLZeroReturnError:
                    break
                except ssl.SSLWantReadError:
                    flush()
                    feed()
        try:
            tls.unwrap()
        except ssl.SSLWantReadError:
            pass
        plain = bytes(48 + i % 10 for i in range(100000)) + b"\n" if mode == "after-ours-big" else b"plain after tls\n"
        conn.sendall(outgoing.read() + plain)
        print("SENT", flush=True)
        if mode.startswith("after-ours"):
            plain = b""
            while not plain.endswith(b"\n"):
                data = conn.recv(100)
                if not data:
                    break
                plain += data
            conn.sendall(b"echo " + plain)
        conn.close()
        """#

    private func startServer(_ mode: String) throws -> (Foreign, Int) {
        let port = freeLoopbackPort()
        let server = try Foreign([
            "python3", "-c", Self.server, "\(port)", certificate.certificateFile,
            certificate.keyFile, mode,
        ])
        guard server.waitForOutput(containing: "LISTENING", seconds: 10) else {
            throw DeadlineExceeded(what: "the Python server listening: \(server.output)", seconds: 10)
        }
        return (server, port)
    }

    func testPlainBytesThatCameWithThePeersCloseNotifyAreReadAfterStopTLS() async throws {
        let (server, port) = try startServer("after-ours")
        defer { server.stop() }
        let pair = SocketStreams.pair(
            toHost: "127.0.0.1", port: port,
            tls: TLSConfiguration(pinnedSHA256: [certificate.certificateSHA256]))
        try await withDeadline(20, "open") { try await pair.open() }
        try await pair.output.write(Data("stop\n".utf8))
        let stopped: Result<Void, SocketStreamError>
        do {
            stopped = try await withDeadline(10, "TLS stop") {
                await withCheckedContinuation { done in pair.stopTLS { done.resume(returning: $0) } }
            }
        } catch {
            return XCTFail("\(error); the server: \(server.output)")
        }
        if case .failure(let error) = stopped { XCTFail("stopTLS: \(error); server: \(server.output)") }
        // Sent in the same write as the close_notify: already read, with it, by the TLS side.
        let plain = try await withDeadline(10, "the plain bytes") { try await readBytes(pair.input, count: 16) }
        XCTAssertEqual(String(decoding: plain, as: UTF8.self), "plain after tls\n")
        try await pair.output.write(Data("hello\n".utf8))
        let echo = try await withDeadline(10, "the echo") { try await readBytes(pair.input, count: 11) }
        XCTAssertEqual(String(decoding: echo, as: UTF8.self), "echo hello\n")
    }

    func testMorePlainBytesThanTheBIOReadsAheadComeWholeAndInOrderAfterStopTLS() async throws {
        let (server, port) = try startServer("after-ours-big")
        defer { server.stop() }
        let pair = SocketStreams.pair(
            toHost: "127.0.0.1", port: port,
            tls: TLSConfiguration(pinnedSHA256: [certificate.certificateSHA256]))
        try await withDeadline(20, "open") { try await pair.open() }
        try await pair.output.write(Data("stop\n".utf8))
        let stopped = try await withDeadline(10, "TLS stop") {
            await withCheckedContinuation { done in pair.stopTLS { done.resume(returning: $0) } }
        }
        if case .failure(let error) = stopped { return XCTFail("stopTLS: \(error); server: \(server.output)") }
        // Part of them came with the close_notify into the BIO's read-ahead; the rest is read
        // from the socket after it, behind those.
        let plain = try await withDeadline(10, "the plain bytes") { try await readBytes(pair.input, count: 100_001) }
        XCTAssertEqual(plain, Data((0..<100_000).map { UInt8(48 + $0 % 10) } + [10]))
        try await pair.output.write(Data("big\n".utf8))
        let echo = try await withDeadline(10, "the echo") { try await readBytes(pair.input, count: 9) }
        XCTAssertEqual(String(decoding: echo, as: UTF8.self), "echo big\n")
    }

    func testPlainBytesRightAfterAnUnaskedCloseNotifyAreAnErrorNotAWait() async throws {
        let (server, port) = try startServer("at-once")
        defer { server.stop() }
        let pair = SocketStreams.pair(
            toHost: "127.0.0.1", port: port,
            tls: TLSConfiguration(pinnedSHA256: [certificate.certificateSHA256]))
        try await withDeadline(20, "open") { try await pair.open() }
        try await pair.output.write(Data("hi\n".utf8))
        XCTAssertTrue(server.waitForOutput(containing: "SENT", seconds: 10), server.output)
        // Nobody asked to leave TLS: the plain bytes are the peer's error, seen at once even
        // though they came in the same read as the close_notify (no byte of them is data).
        let outcome: Result<Data, any Error> = try await withDeadline(10, "the error") {
            do { return .success(try await readBytes(pair.input, count: 1)) } catch { return .failure(error) }
        }
        guard case .failure(let error) = outcome else {
            return XCTFail("read \(outcome) after the peer's close_notify")
        }
        XCTAssertEqual(
            error as? SocketStreamError,
            .tls(.protocolError("the peer sent bytes in the clear after its close_notify")), "\(error)")
    }
}
