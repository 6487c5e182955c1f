import Foundation
import SalutStreams
import SalutTestSupport
import XCTest
@testable import PeerTransferCore

/// Protocol version 2's sender hashes each file while it sends it: what the receiver keeps is
/// exactly what was read, and a file that changes meanwhile is withdrawn, not delivered torn.
final class SenderHashingTests: XCTestCase {
    private let chunk = TransferLimits.chunkSize

    func testAFileThatChangesWhileItIsSentIsWithdrawnAndNothingIsDelivered() async throws {
        let lab = try PeerXferLab()
        let name = PeerXferLab.uniqueName("Changing")
        try lab.serve(name: name, config: "receiver", inbox: lab.path("inbox"))
        try lab.makeFile("src/moving.bin", size: 3 * chunk + 5)
        try lab.makeFile("src/still.txt", size: 700, seed: 3)
        let plan = try TransferPlan.make(paths: [lab.path("src/moving.bin"), lab.path("src/still.txt")])
        var sender = Sender(configuration: try PeerConfiguration(directory: lab.path("sender")), displayName: "test")
        sender.firstContact = .acceptNewKey
        let moving = lab.path("src/moving.bin")
        // The file is rewritten in place once its first chunk is out: its times change under
        // the read, and its part file on the receiver holds a chunk of the old bytes.
        let touched = OnceFlag()
        let report = try await sender.send(plan, to: name) { event in
            guard case .progress = event, touched.claim() else { return }
            let handle = FileHandle(forWritingAtPath: moving)!
            handle.seek(toFileOffset: UInt64(2 * TransferLimits.chunkSize))
            handle.write(Data("rewritten while it was being sent".utf8))
            handle.closeFile()
        }
        XCTAssertEqual(report.verified, 1, "\(report)")
        XCTAssertEqual(report.failed.count, 1, "\(report)")
        XCTAssertTrue(
            report.failed.first?.hasPrefix("moving.bin: the file changed while the sender read it") == true, "\(report)"
        )
        XCTAssertEqual(
            PeerXferLab.listing(lab.path("inbox")), ["still.txt"], "neither the torn file nor its part file stays")
        XCTAssertTrue(PeerXferLab.sameContents(lab.path("src/still.txt"), lab.path("inbox/still.txt")))

        // Sent again, unchanged now, it arrives whole.
        let again = try await sender.send(try TransferPlan.make(paths: [moving]), to: name)
        XCTAssertEqual(again.verified, 1, "\(again)")
        XCTAssertTrue(PeerXferLab.sameContents(moving, lab.path("inbox/moving.bin")))
    }

    func testAResumeHashesThePartItSkipsSoTheWholeFileIsVerified() throws {
        // The receiver's part file holds the first two chunks: the sender sends from there, and
        // its digest covers all of the file (the part it skipped hashed from its own copy).
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("px-resume-\(UUID().uuidString)")
            .path
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: folder) }
        var bytes = Data(count: 3 * chunk + 11)
        for i in stride(from: 0, to: bytes.count, by: 4093) { bytes[i] = UInt8(truncatingIfNeeded: i / 4093) }
        let source = folder + "/f.bin"
        try bytes.write(to: URL(fileURLWithPath: source))
        let have = [
            SHA256Hasher.hash(bytes[0..<chunk]).hex, SHA256Hasher.hash(bytes[chunk..<2 * chunk]).hex,
            String(repeating: "0", count: 64),
        ]
        let (offset, hasher) = try Sender.resumePoint(
            source: source, have: have, chunkSize: chunk, size: UInt64(bytes.count))
        XCTAssertEqual(offset, UInt64(2 * chunk), "resumes after the chunks that match, not the one that does not")
        hasher.update(bytes[(2 * chunk)...])
        XCTAssertEqual(hasher.finish(), SHA256Hasher.hash(bytes))

        // A part file that holds the whole file (the sender died before the file's end): the
        // last chunk is sent again, so that the file ends with a chunk and then its end.
        let whole = bytes[0..<(3 * chunk)]
        let exact = folder + "/exact.bin"
        try Data(whole).write(to: URL(fileURLWithPath: exact))
        let all = (0..<3).map { SHA256Hasher.hash(whole[($0 * chunk)..<(($0 + 1) * chunk)]).hex }
        let (resumeAt, _) = try Sender.resumePoint(source: exact, have: all, chunkSize: chunk, size: UInt64(3 * chunk))
        XCTAssertEqual(resumeAt, UInt64(2 * chunk))
    }

    func testTheHashPipelineHashesEverySlotBeforeItIsReusedAndInOrder() async throws {
        // As the sender uses it: three slots, each refilled only once `settle` says its
        // previous bytes were hashed. Were a slot refilled early, the digest would take in
        // bytes of a later block and differ from the digest of the blocks in order.
        let slots = 3, slotSize = 256 << 10, blocks = 40
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: slots * slotSize, alignment: 16)
        defer { buffer.deallocate() }
        let pipeline = HashPipeline()
        let hasher = SHA256Hasher(), expected = SHA256Hasher()
        for block in 0..<blocks {
            await pipeline.settle(toAtMost: slots - 1)
            let slot = UnsafeMutableRawBufferPointer(
                rebasing: buffer[(block % slots) * slotSize..<(block % slots + 1) * slotSize])
            for i in 0..<slot.count { slot[i] = UInt8(truncatingIfNeeded: block &* 131 &+ i &* 7) }
            expected.update(UnsafeRawBufferPointer(slot))
            pipeline.submit(UnsafeRawBufferPointer(slot), to: hasher)
        }
        await pipeline.settle(toAtMost: 0)
        XCTAssertEqual(hasher.finish(), expected.finish())
        pipeline.drain()
    }
}
