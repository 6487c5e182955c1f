import Foundation
import SalutTestSupport
import XCTest

@testable import SalutStreams

/// Bulk TLS writes that meet a full socket: the pump sends straight from the caller's bytes
/// and from its output buffer, and TLS must finish the record it began with the same bytes,
/// however the buffer has wrapped around meanwhile.
final class TLSFullSocketTests: SalutTestCase {
    var certificate: TestCertificate!

    override func setUpWithError() throws {
        certificate = try TestCertificate.make()
    }

    /// A listener on a free port of loopback, with TLS (the test certificate) or in the clear.
    private func makeListener(tls: Bool = true) throws -> StreamListener {
        try StreamListener(
            port: 0,
            tls: tls
                ? .server(certificateChainFile: certificate.certificateFile, privateKeyFile: certificate.keyFile)
                : nil)
    }

    /// An unopened pair to `listener`, pinning the test certificate when `tls`.
    private func connect(
        to listener: StreamListener, bufferSize: Int = 256 * 1024, tls: Bool = true
    )
        -> BoundStreamPair
    {
        SocketStreams.pair(
            toHost: "127.0.0.1", port: Int(listener.port), bufferSize: bufferSize,
            tls: tls ? TLSConfiguration(pinnedSHA256: [certificate.certificateSHA256]) : nil)
    }

    /// `count` bytes that repeat only every 512 KiB, so a byte out of place shows.
    private static func pattern(count: Int) -> Data {
        var data = Data(count: count)
        data.withUnsafeMutableBytes { raw in
            for i in 0..<raw.count { raw[i] = UInt8(truncatingIfNeeded: i &* 131 &+ i >> 11) }
        }
        return data
    }

    /// The writer fills the socket and its buffer before the reader takes a bite, again and
    /// again, in writes of odd sizes (so records and the buffer's wrap fall anywhere); every
    /// byte arrives, in order, whatever the buffer size (1 byte asked for is raised to one TLS
    /// record).
    func testBulkWritesIntoAFullSocketArriveWholeWhateverTheBufferSize() async throws {
        // (A buffer smaller than two records twice: where a record left to retry most often
        // meets the end of the buffer's storage.)
        for bufferSize in [1, 20_011, 20_011, 256 * 1024] {
            try await sendThroughAFullSocket(
                bufferSize: bufferSize, total: 32 << 20, writeSizes: [70_001, 9_001, 13_007, 30_011])
        }
    }

    /// A connection whose input buffer is smaller than what arrives first (its first receive
    /// goes through a little memory of its own, before the buffer is allocated) loses none of it.
    func testAnInputBufferSmallerThanTheFirstBytesLosesNoneOfThem() async throws {
        let sent = Self.pattern(count: 10_000)
        for tls in [false, true] {
            let listener = try makeListener(tls: tls)
            defer { listener.stop() }
            listener.accept { connection in
                Task {
                    guard (try? await connection.streams.open()) != nil else { return }
                    try? await connection.output.write(sent)
                    connection.output.close()
                }
            }
            let pair = connect(to: listener, bufferSize: 100, tls: tls)
            try await withDeadline(20, "open") { try await pair.open() }
            let got = try await withDeadline(20, "the bytes") { try await readBytes(pair.input, count: Int.max) }
            XCTAssertEqual(got, sent, tls ? "with TLS" : "in the clear")
            pair.input.close()
            pair.output.close()
        }
    }

    /// A write given up while the socket is full (the writing task cancelled), then a close: the
    /// reader gets a clean end (the close_notify went) after a prefix of the bytes, unchanged.
    func testAWriteCancelledAtAFullSocketThenClosedEndsCleanlyAfterAPrefix() async throws {
        let listener = try makeListener()
        defer { listener.stop() }
        let (reading, startReading) = AsyncStream<Void>.makeStream()
        let received = Locked<Result<Data, any Error>?>(nil)
        listener.accept { connection in
            Task {
                guard (try? await connection.streams.open()) != nil else { return }
                for await _ in reading { break }
                do {
                    let bytes = try await readBytes(connection.input, count: Int.max)
                    received.withLock { $0 = .success(bytes) }
                } catch {
                    received.withLock { $0 = .failure(error) }
                }
            }
        }
        let pair = connect(to: listener)
        try await withDeadline(20, "open") { try await pair.open() }
        let payload = Self.pattern(count: 16 << 20)
        let sent = payload
        let writer = Task { try await pair.output.write(sent) }
        try await eventually("the writer held up", timeout: 20, interval: 0.001) { Self.isHeldUp(pair) }
        writer.cancel()
        let outcome = await writer.result
        guard case .failure(let error) = outcome, error is CancellationError else {
            return XCTFail("the write was not given up: \(outcome)")
        }
        pair.output.close()
        startReading.yield()
        try await eventually("the reader at the end", timeout: 30) { received.withLock { $0 != nil } }
        switch received.withLock({ $0 })! {
        case .success(let bytes):
            XCTAssertGreaterThan(bytes.count, 0)
            XCTAssertLessThan(bytes.count, payload.count)
            XCTAssertTrue(bytes == payload.prefix(bytes.count), "the bytes that came are not the first ones sent")
        case .failure(let error):
            XCTFail("the reader saw \(error), not a clean end")
        }
    }

    /// Whether the pair's writer waits for room: the socket is full, and so is its buffer (or
    /// nearly: an async writer waits for a quarter of it).
    private static func isHeldUp(_ pair: BoundStreamPair) -> Bool {
        guard let output = pair.output as? BoundOutputStream else { return false }
        return !output.hasSpaceAvailable || output.buffer.parkedWriters > 0
    }

    private func sendThroughAFullSocket(bufferSize: Int, total: Int, writeSizes: [Int]) async throws {
        let listener = try makeListener()
        defer { listener.stop() }
        let writing = Locked<BoundStreamPair?>(nil)
        let received = Locked<Data?>(nil)
        listener.accept { connection in
            Task {
                guard (try? await connection.streams.open()) != nil else { return }
                // Over and over: once the writer is held up (its buffer full), a bite that moves
                // the start of its buffered bytes anywhere; then 2 MB taken a few bytes at a time,
                // so that its writes, straight to the socket, keep meeting a socket that is full
                // or nearly so.
                var bytes = Data()
                let piece = UnsafeMutableRawBufferPointer.allocate(byteCount: 3_001, alignment: 1)
                defer { piece.deallocate() }
                reading: while true {
                    do {
                        try await eventually("the writer held up", timeout: 20, interval: 0.001) {
                            writing.withLock { $0.map(Self.isHeldUp) ?? false }
                                || writing.withLock { $0?.output.streamStatus == .closed }
                        }
                        let bite = try await readBytes(connection.input, count: 50_021)
                        bytes.append(bite)
                        if bite.isEmpty { break }
                        let goal = bytes.count + 2_000_000
                        while bytes.count < goal {
                            let n = try await connection.input.read(into: piece)
                            if n <= 0 { break reading }
                            bytes.append(contentsOf: UnsafeRawBufferPointer(rebasing: piece[0..<n]))
                        }
                    } catch {
                        break
                    }
                }
                received.withLock { $0 = bytes }
            }
        }
        let pair = connect(to: listener, bufferSize: bufferSize)
        try await withDeadline(20, "open") { try await pair.open() }
        writing.withLock { $0 = pair }
        let payload = Self.pattern(count: total)
        let sent = payload
        let writer = Task {
            var offset = 0
            for writeSize in (0...).lazy.map({ writeSizes[$0 % writeSizes.count] }) {
                guard offset < sent.count else { break }
                let end = min(offset + writeSize, sent.count)
                try await pair.output.write(sent.subdata(in: offset..<end))
                offset = end
            }
            pair.output.close()
        }
        try await withDeadline(60, "the writes (buffer \(bufferSize))") { try await writer.value }
        try await eventually("every byte read (buffer \(bufferSize))", timeout: 60) {
            received.withLock { $0 != nil }
        }
        let got = received.withLock { $0 } ?? Data()
        XCTAssertEqual(got.count, payload.count, "buffer \(bufferSize): bytes received")
        XCTAssertTrue(got == payload, "buffer \(bufferSize): the bytes received differ from those sent")
        XCTAssertNil(pair.output.streamError, "buffer \(bufferSize): \(String(describing: pair.output.streamError))")
    }
}
