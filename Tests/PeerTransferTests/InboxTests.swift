import Foundation
import Glibc
import SalutStreams
import XCTest
@testable import PeerTransferCore

/// What the inbox refuses to write through, whoever planted it, and who may write a part file.
final class InboxTests: XCTestCase {
    private var folder = ""

    override func setUpWithError() throws {
        folder = FileManager.default.temporaryDirectory.appendingPathComponent("px-inbox-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: folder + "/inbox", withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: folder + "/outside", withIntermediateDirectories: true)
    }

    override func tearDown() {
        try? FileManager.default.removeItem(atPath: folder)
    }

    func testAFileRenamedOverAVerifiedPartFileIsNeverPublishedInItsPlace() throws {
        let inbox = try Inbox(path: folder + "/inbox")
        let path = try RelativePath(validating: "report.txt")
        let part = try inbox.openPart(path)
        try part.write(Data("the verified bytes".utf8), at: 0)
        try part.finishWriting(mode: 0o644, modified: 0, deliveredBy: "k")
        // Between verification and naming, someone renames their own file over the part file.
        let partPath = folder + "/inbox/report.txt" + TransferLimits.partSuffix
        try Data("EVIL".utf8).write(to: URL(fileURLWithPath: folder + "/outside/evil"))
        XCTAssertEqual(rename(folder + "/outside/evil", partPath), 0)
        XCTAssertThrowsError(try part.publish()) { error in
            XCTAssertTrue("\(error)".contains("replaced or removed after it was verified"), "\(error)")
        }
        part.closeFiles()
        XCTAssertFalse(FileManager.default.fileExists(atPath: folder + "/inbox/report.txt"), "nothing is published in its place")
        XCTAssertEqual(try String(contentsOfFile: partPath, encoding: .utf8), "EVIL", "someone else's file is left where it was")

        // Or moves the part file aside and plants a symlink under its name: the verified file
        // itself gets the name, and the symlink is left alone.
        let second = try inbox.openPart(try RelativePath(validating: "b.txt"))
        try second.write(Data("b".utf8), at: 0)
        try second.finishWriting(mode: 0o644, modified: 0, deliveredBy: "k")
        let secondPart = folder + "/inbox/b.txt" + TransferLimits.partSuffix
        XCTAssertEqual(rename(secondPart, folder + "/inbox/moved-aside"), 0)
        XCTAssertEqual(symlink(folder + "/outside/target", secondPart), 0)
        XCTAssertEqual(try second.publish(), "b.txt")
        second.closeFiles()
        var info = stat()
        XCTAssertEqual(lstat(folder + "/inbox/b.txt", &info), 0)
        XCTAssertEqual(info.st_mode & S_IFMT, S_IFREG, "the name is the verified file, not the planted symlink")
        XCTAssertEqual(try String(contentsOfFile: folder + "/inbox/b.txt", encoding: .utf8), "b")
        XCTAssertEqual(lstat(secondPart, &info), 0)
        XCTAssertEqual(info.st_mode & S_IFMT, S_IFLNK, "the planted symlink is not removed as if it were the part file")
        XCTAssertFalse(FileManager.default.fileExists(atPath: folder + "/outside/target"), "nothing was written through it")
    }

    func testFreeSpaceIsPromisedToOneTransferAtATime() throws {
        let inbox = try Inbox(path: folder + "/inbox")
        let free = try inbox.freeBytes()
        let first = free / 10 * 6, second = free / 10 * 5   // each fits alone; not both
        try inbox.promise(first)
        XCTAssertThrowsError(try inbox.promise(second)) { error in
            let message = "\(error)"
            XCTAssertTrue(message.contains("bytes free for this transfer, which needs \(second)"), message)
            // The first transfer's promise is the receiver's business: no number in the
            // message is it.
            let numbers = message.split(whereSeparator: { !$0.isNumber }).compactMap { UInt64($0) }
            XCTAssertFalse(numbers.contains(first), message)
        }
        inbox.keptPromise(first)   // the first transfer ended (or wrote it all)
        XCTAssertNoThrow(try inbox.promise(second), "free again once the promise is kept")
        inbox.keptPromise(second)
    }

    func testTwoTransfersOfOnePathNeverWriteTheSamePartFile() throws {
        let inbox = try Inbox(path: folder + "/inbox")
        let path = try RelativePath(validating: "shared.bin")
        let first = try inbox.openPart(path)
        XCTAssertThrowsError(try inbox.openPart(path)) { error in
            XCTAssertTrue("\(error)".contains("another transfer is receiving"), "\(error)")
        }
        // Its chunk digests are not offered to another sender while it is being written.
        try first.write(Data(count: 2 * TransferLimits.chunkSize), at: 0)
        XCTAssertEqual(inbox.partChunkDigests(path, chunkSize: TransferLimits.chunkSize), [])
        // Verified and waiting for its name, it still holds the lock.
        try first.finishWriting(mode: 0o644, modified: 0, deliveredBy: "k")
        XCTAssertThrowsError(try inbox.openPart(path))
        XCTAssertEqual(try first.publish(), "shared.bin")
        first.closeFiles()
        XCTAssertNoThrow(try inbox.openPart(try RelativePath(validating: "shared.bin")).closeFiles())
    }

    func testAPartFilePlantedAsAHardLinkToAFileOutsideIsNotWrittenThrough() throws {
        let target = folder + "/outside/precious.txt"
        try Data("precious".utf8).write(to: URL(fileURLWithPath: target))
        XCTAssertEqual(link(target, folder + "/inbox/x.txt" + TransferLimits.partSuffix), 0)
        let inbox = try Inbox(path: folder + "/inbox")
        let path = try RelativePath(validating: "x.txt")
        XCTAssertThrowsError(try inbox.openPart(path)) { error in
            XCTAssertTrue("\(error)".contains("hard link"), "\(error)")
        }
        XCTAssertEqual(inbox.partChunkDigests(path, chunkSize: 4), [], "its digests are not offered either")
        XCTAssertEqual(try String(contentsOfFile: target, encoding: .utf8), "precious")
    }

    func testAFIFOPlantedInTheInboxNeverBlocksTheDaemon() throws {
        XCTAssertEqual(mkfifo(folder + "/inbox/pipe.txt", 0o644), 0)
        XCTAssertEqual(mkfifo(folder + "/inbox/pipe2.txt" + TransferLimits.partSuffix, 0o644), 0)
        let inbox = try Inbox(path: folder + "/inbox")
        // Each of these would block for ever on a FIFO opened for reading without O_NONBLOCK.
        XCTAssertNil(inbox.digest(ofFile: try RelativePath(validating: "pipe.txt"), size: 0, deliveredBy: "k"))
        XCTAssertEqual(inbox.partChunkDigests(try RelativePath(validating: "pipe2.txt"), chunkSize: 4), [])
        XCTAssertThrowsError(try inbox.openPart(try RelativePath(validating: "pipe2.txt"))) { error in
            XCTAssertTrue("\(error)".contains("FIFO"), "\(error)")
        }
    }
}
