import Foundation
import Glibc
import XCTest
@testable import PeerTransferCore

/// Direct writes of several files handed to the disk in one call (Linux's asynchronous I/O):
/// each write's outcome is its own, a write the kernel refuses fails alone, and a batch's
/// context serves the next batch.
final class DirectWriteBatchTests: XCTestCase {
    private var folder = ""

    override func setUpWithError() throws {
        folder = FileManager.default.temporaryDirectory.appendingPathComponent("px-aio-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
    }

    override func tearDown() {
        try? FileManager.default.removeItem(atPath: folder)
    }

    /// A file opened for direct writes, or a skip where the temporary folder takes none.
    private func directFile(_ name: String) throws -> Int32 {
        let fd = open(folder + "/" + name, O_CREAT | O_WRONLY | O_CLOEXEC, 0o600)
        XCTAssertGreaterThanOrEqual(fd, 0)
        guard DirectWrites.isSuitable(fd), DirectWrites.set(true, on: fd) else {
            close(fd)
            throw XCTSkip("the temporary folder's file system takes no direct writes")
        }
        return fd
    }

    private func pattern(_ count: Int, _ seed: Int) -> [UInt8] {
        (0..<count).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ seed) }
    }

    func testWritesHandedOverTogetherEachEndWithTheirOwnOutcome() throws {
        let batch = try XCTUnwrap(DirectWriteBatch(), "this kernel offers asynchronous I/O")
        let sizes = [4096, 3 * 4096, 16 * 4096]
        let pages = PageAlignedBytes()  // held to the end: the memory is its
        let memory = try XCTUnwrap(pages.reserve(sizes.reduce(0, +)))
        var fds: [Int32] = []
        defer { fds.forEach { close($0) } }
        var at = 0
        for (index, size) in sizes.enumerated() {
            let fd = try directFile("f\(index)")
            fds.append(fd)
            let bytes = pattern(size, index)
            (memory + at).copyMemory(from: bytes, byteCount: size)
            XCTAssertEqual(batch.add(fd, from: memory + at, count: size, at: 0), index)
            at += size
        }
        // A write from memory that is not page-aligned, which a direct write refuses: it fails
        // alone, with its own error, and the others are written.
        let misaligned = try directFile("misaligned")
        fds.append(misaligned)
        XCTAssertEqual(batch.add(misaligned, from: memory + 1, count: 4096, at: 0), sizes.count)
        // And one to a descriptor that is not open.
        XCTAssertEqual(batch.add(987_654, from: memory, count: 4096, at: 0), sizes.count + 1)

        let outcomes = batch.run()
        XCTAssertEqual(Array(outcomes.prefix(sizes.count)), sizes, "each write reports its own bytes")
        XCTAssertEqual(outcomes[sizes.count], -Int(EINVAL), "\(outcomes)")
        XCTAssertEqual(outcomes[sizes.count + 1], -Int(EBADF), "\(outcomes)")
        for (index, size) in sizes.enumerated() {
            XCTAssertEqual(
                try Data(contentsOf: URL(fileURLWithPath: folder + "/f\(index)")), Data(pattern(size, index)))
        }
        XCTAssertTrue(batch.run().isEmpty, "the batch is empty after a run")
        withExtendedLifetime(pages) {}
    }

    func testABatchsContextServesTheNextBatchAndNoMoreThanTheKeptNumberStay() throws {
        // More batches than are kept, one after another and then all at once: each writes.
        let fd = try directFile("again")
        defer { close(fd) }
        let pages = PageAlignedBytes()  // held to the end: the memory is its
        let memory = try XCTUnwrap(pages.reserve(4096))
        memory.initializeMemory(as: UInt8.self, repeating: 0x5c, count: 4096)
        for round in 0..<3 {
            var batches: [DirectWriteBatch] = []
            for _ in 0..<(round == 2 ? DirectWriteBatch.keptContexts + 4 : 1) {
                let batch = try XCTUnwrap(DirectWriteBatch())
                XCTAssertEqual(batch.add(fd, from: memory, count: 4096, at: 0), 0)
                XCTAssertEqual(batch.run(), [4096])
                batches.append(batch)
            }
        }
        XCTAssertEqual(
            try Data(contentsOf: URL(fileURLWithPath: folder + "/again")), Data(repeating: 0x5c, count: 4096))
        XCTAssertLessThanOrEqual(DirectWriteBatch.keptCount, DirectWriteBatch.keptContexts, "no more are kept")
        // A batch made now takes a kept context, and gives it back when it ends.
        let kept = DirectWriteBatch.keptCount
        XCTAssertGreaterThan(kept, 0)
        var again: DirectWriteBatch? = try XCTUnwrap(DirectWriteBatch())
        XCTAssertEqual(DirectWriteBatch.keptCount, kept - 1, "a kept context is used again")
        XCTAssertEqual(again?.add(fd, from: memory, count: 4096, at: 0), 0)
        XCTAssertEqual(again?.run(), [4096])
        again = nil
        XCTAssertEqual(DirectWriteBatch.keptCount, kept)
        withExtendedLifetime(pages) {}
    }

    /// What a batch's write did not write is written again through the page cache: a write that
    /// failed (or was never made) and one cut short both leave the file whole, at its size.
    func testPagesADirectWriteLeftUnwrittenAreWrittenAgainWhole() throws {
        let inbox = try Inbox(path: folder)
        let root = open(folder, O_RDONLY | O_DIRECTORY)
        defer { close(root) }
        try XCTSkipUnless(DirectWrites.isSuitable(root), "the temporary folder's file system takes no direct writes")
        let pages = PageAlignedBytes()
        let bytes = Data((0..<(3 * 4096 + 100)).map { UInt8(truncatingIfNeeded: $0 &* 7) })
        for (name, forged) in [("failed.bin", -Int(EIO)), ("cut.bin", 4096)] {
            let batch = try XCTUnwrap(DirectWriteBatch())
            let file = try inbox.openUnnamedFile(try RelativePath(validating: name), for: "k")
            let request = try bytes.withUnsafeBytes {
                try file.writeWhole($0, pagesIn: pages.reserve(3 * 4096), to: batch)
            }
            XCTAssertEqual(request, 0, "the whole pages were left to the batch")
            // The failed one is never run (as if refused); the cut one runs, then is told it
            // wrote only its first page.
            if forged > 0 { XCTAssertEqual(batch.run(), [3 * 4096]) }
            try bytes.withUnsafeBytes { try file.finishPages($0, outcome: forged) }
            try file.finishWriting(mode: 0o644, modified: 0)
            XCTAssertEqual(try file.publish(), name)
            file.closeFiles()
            XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: folder + "/" + name)), bytes, name)
        }
        withExtendedLifetime(pages) {}
    }
}
