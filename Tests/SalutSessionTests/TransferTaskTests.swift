import Foundation
@testable import SalutSession
import SalutStreams
import SalutTestSupport
import XCTest

/// A receiver that keeps what it got across connections: each connection says where it thinks
/// it stopped (`START <offset>\n`, from its checkpoint); the receiver answers with what it
/// really has (8 bytes: a chunk may have arrived whose acknowledgement the sender never read),
/// which must not be less; then chunks follow, each acknowledged with the receiver's total.
final class ResumableReceiver: @unchecked Sendable {
    // @unchecked: every property is a constant; `received` and `connections` lock themselves.
    let listener: StreamListener
    let received = Locked(Data())
    let connections = Locked(0)
    /// How each connection ended, in order: "clean" (the sender finished sending), "failed"
    /// (a reset, an error), or "done" (every byte in).
    let endings = Locked<[String]>([])
    let chunk: Int
    let total: Int

    init(total: Int, chunk: Int) throws {
        self.total = total
        self.chunk = chunk
        listener = try StreamListener(port: 0)
        // Weak: the listener's handler must not keep the receiver (and so the listener) alive.
        listener.accept { [weak self] connection in
            guard let self else { return }
            self.connections.withLock { $0 += 1 }
            Task { await self.serve(connection.streams) }
        }
    }

    private func serve(_ pair: BoundStreamPair) async {
        guard (try? await pair.open()) != nil else { return }
        var header = Data()
        while header.last != UInt8(ascii: "\n") {
            let part = await pair.read(minimum: 1, maximum: 1, limit: OperationLimit())
            guard !part.data.isEmpty else { return }
            header.append(part.data)
        }
        let offset = Int(String(decoding: header.dropFirst(6).dropLast(), as: UTF8.self)) ?? -1
        guard offset >= 0, offset <= received.value.count else { return pair.output.close() }
        var have = UInt64(received.value.count).bigEndian
        _ = await pair.write(Data(bytes: &have, count: 8), limit: OperationLimit())
        while received.value.count < total {
            let want = min(chunk, total - received.value.count)
            let part = await pair.read(minimum: want, maximum: want, limit: OperationLimit())
            guard part.data.count == want else {
                endings.withLock { $0.append(part.error != nil ? "failed" : part.atEnd ? "clean" : "short") }
                return
            }
            let count = received.withLock {
                $0.append(part.data); return $0.count
            }
            var ack = UInt64(count).bigEndian
            _ = await pair.write(Data(bytes: &ack, count: 8), limit: OperationLimit())
        }
        endings.withLock { $0.append("done") }
        pair.output.close()
    }

    deinit { listener.stop() }
}

/// The sending side, as an app (peerxfer) would write it.
struct ChunkedSend: PeerTransfer {
    let payload: Data
    let chunk: Int

    func run(_ context: PeerTransferContext) async throws {
        let task = context.streamTask
        let checkpoint = context.checkpoint.map { Int(String(decoding: $0, as: UTF8.self)) ?? 0 } ?? 0
        try await task.write(Data("START \(checkpoint)\n".utf8), timeout: 10)
        var offset = try await readCount(task)
        guard offset >= checkpoint else {
            throw PeerSessionError.transferFailed("receiver has less than the checkpoint")
        }
        while offset < payload.count {
            let end = min(offset + chunk, payload.count)
            try await task.write(payload[offset..<end], timeout: 10)
            let confirmed = try await readCount(task)
            guard confirmed == end else {
                throw PeerSessionError.transferFailed("receiver has \(confirmed), expected \(end)")
            }
            offset = end
            context.save(checkpoint: Data(String(offset).utf8))
            context.reportProgress(completed: Int64(offset), total: Int64(payload.count))
        }
    }

    private func readCount(_ task: PeerStreamTask) async throws -> Int {
        let (count, _) = try await task.readData(ofMinLength: 8, maxLength: 8, timeout: 10)
        guard count.count == 8 else { throw PeerSessionError.transferFailed("the receiver closed the connection") }
        return Int(count.withUnsafeBytes { UInt64(bigEndian: $0.loadUnaligned(as: UInt64.self)) })
    }
}

final class TransferTaskTests: SalutTestCase {
    func testCancelIntoResumeDataAndFinishFromItWithEveryByteOnce() async throws {
        let payload = pattern(4 << 20, seed: 3)
        let receiver = try ResumableReceiver(total: payload.count, chunk: 64 * 1024)
        let delegate = RecordingDelegate()
        let session = PeerSession(configuration: .ephemeral, delegate: delegate)
        defer { session.invalidateAndCancel() }
        let first = session.transferTask(
            withHostName: "127.0.0.1", port: Int(receiver.listener.port),
            transfer: ChunkedSend(payload: payload, chunk: 64 * 1024))
        first.taskDescription = "photo.raw"
        first.resume()
        try await eventually("a quarter of the transfer", timeout: 30, interval: 0.002) {
            first.progress.completedUnitCount >= Int64(payload.count / 4)
        }
        let produced = await first.cancelByProducingResumeData()
        let resumeData = try XCTUnwrap(produced)
        try await delegate.wait(for: "complete \(first.taskIdentifier)")
        XCTAssertEqual(first.error as? PeerSessionError, .cancelled)
        let part = receiver.received.value.count
        XCTAssertGreaterThanOrEqual(part, payload.count / 4)
        XCTAssertLessThan(part, payload.count, "cancelled before the end")
        // The receiver's read failed (a reset): a cancel is never taken for a finished upload.
        try await eventually("the receiver sees the first connection end", interval: 0.002) {
            !receiver.endings.value.isEmpty
        }
        XCTAssertEqual(receiver.endings.value, ["failed"])

        let second = try session.transferTask(
            withResumeData: resumeData, transfer: ChunkedSend(payload: payload, chunk: 64 * 1024))
        XCTAssertEqual(second.taskDescription, "photo.raw")
        second.resume()
        try await delegate.wait(for: "complete \(second.taskIdentifier)", seconds: 60)
        XCTAssertNil(second.error)
        XCTAssertEqual(second.progress.completedUnitCount, Int64(payload.count))
        XCTAssertEqual(second.progress.fractionCompleted, 1)
        XCTAssertTrue(receiver.received.value == payload, "every byte arrived once, in order")
        XCTAssertEqual(receiver.connections.value, 2)
        XCTAssertEqual(receiver.endings.value, ["failed", "done"])
        XCTAssertLessThan(second.countOfBytesSent, Int64(payload.count), "the second attempt sent only the rest")
    }

    func testBadResumeDataIsATypedErrorAndAFreshCancelHasNone() async throws {
        let session = PeerSession(configuration: .ephemeral)
        defer { session.invalidateAndCancel() }
        XCTAssertThrowsError(
            try session.transferTask(
                withResumeData: Data("nope".utf8), transfer: ChunkedSend(payload: Data(), chunk: 1))
        ) { error in
            XCTAssertEqual((error as? PeerSessionError)?.code, .invalidResumeData, "\(error)")
        }
        let task = session.transferTask(
            withHostName: "127.0.0.1", port: 9, transfer: ChunkedSend(payload: Data(count: 10), chunk: 1))
        let data = await task.cancelByProducingResumeData()
        XCTAssertNil(data, "nothing saved, nothing to resume")
        XCTAssertEqual(task.state, .completed)
    }

    func testStreamTaskToADiscoveredServiceAndANetService() async throws {
        let type = "_s\(String(UInt32.random(in: 0..<UInt32.max), radix: 36))._tcp"
        let ad = try await ServiceAdvertisement.listen(name: "Session Echo", type: type)
        defer { ad.cancel() }
        Task {
            for await connection in ad.connections {
                Task {
                    try await connection.streams.open()
                    for try await chunk in connection.input.chunks { try await connection.output.write(chunk) }
                    connection.output.close()
                }
            }
        }
        let session = PeerSession(configuration: .ephemeral)
        defer { session.invalidateAndCancel() }
        for task in [
            session.streamTask(with: DiscoveredService(name: "Session Echo", type: type)),
            session.streamTask(with: NetService(domain: "local.", type: type + ".", name: "Session Echo")),
        ] {
            task.resume()
            try await task.write(Data("by name".utf8), timeout: 10)
            let (echo, _) = try await task.readData(ofMinLength: 7, maxLength: 7, timeout: 10)
            XCTAssertEqual(echo, Data("by name".utf8))
            task.cancel()
        }
    }
}
