import Foundation
import Glibc
import XCTest
@testable import PeerTransferCore
import SalutStreams

/// Small files kept in memory until their batch is published: written, synced and named in
/// the batch's order beside files already written, each with its sender's mode, time and key;
/// a part file an earlier try left is replaced and gone; one that cannot be written where it
/// goes fails alone.
final class BufferedFileTests: XCTestCase {
    private var folder = ""

    override func setUpWithError() throws {
        folder = FileManager.default.temporaryDirectory.appendingPathComponent("px-buffered-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: folder + "/inbox", withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: folder + "/outside", withIntermediateDirectories: true)
    }

    override func tearDown() {
        try? FileManager.default.removeItem(atPath: folder)
    }

    /// Skips a test of direct writes where the temporary folder's file system takes none.
    private func requireDirectWrites() throws {
        let root = open(folder + "/inbox", O_RDONLY | O_DIRECTORY)
        defer { close(root) }
        try XCTSkipUnless(DirectWrites.isSuitable(root), "the temporary folder's file system takes no direct writes")
    }

    private func buffered(_ name: String, _ bytes: Data, replacesPart: Bool = false) throws -> BufferedFile {
        var file = BufferedFile(
            path: try RelativePath(validating: name), size: UInt64(bytes.count), replacesPart: replacesPart)
        // In two pieces, as two chunks of a file would come.
        let half = bytes.count / 2
        file.append(bytes.prefix(half), at: 0)
        file.append(bytes.dropFirst(half), at: UInt64(half))
        return file
    }

    func testBufferedFilesAreWrittenAndNamedInTheBatchsOrderBesideWrittenOnes() throws {
        let inbox = try Inbox(path: folder + "/inbox")
        var batch = VerifiedBatch()
        let first = Data("first buffered file".utf8)
        let firstBuffered = try buffered("t/first.txt", first)
        XCTAssertEqual(firstBuffered.digest, SHA256Hasher.hash(first))
        batch.append(0, buffered: firstBuffered, mode: 0o600, modified: 1_000_000.5)
        let part = try inbox.openPart(try RelativePath(validating: "t/written.txt"), for: "k")
        try part.write(Data("written".utf8), at: 0)
        try part.finishWriting(mode: 0o644, modified: 0)
        batch.append(1, part, size: 7)
        batch.append(2, buffered: try buffered("t/empty.txt", Data()), mode: 0o755, modified: 2_000_000)
        // A part file an earlier try of this sender left for the path: emptied, not appended to.
        try Data(repeating: 0x41, count: 5000).write(
            to: URL(fileURLWithPath: folder + "/inbox/t/" + TransferLimits.partName(of: "again.txt", from: "k")))
        batch.append(
            3, buffered: try buffered("t/again.txt", Data("short".utf8), replacesPart: true), mode: 0o644, modified: 0)
        XCTAssertEqual(batch.bufferedBytes, UInt64(first.count + 5))

        var told: [String] = []
        let results = try batch.publish(in: inbox, for: "k") { result, path in told.append(path.description) }
        XCTAssertEqual(results.map(\.index), [0, 1, 2, 3])
        XCTAssertEqual(results.map(\.verified), [true, true, true, true], "\(results)")
        XCTAssertEqual(told, ["t/first.txt", "t/written.txt", "t/empty.txt", "t/again.txt"])
        XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: folder + "/inbox/t/first.txt")), first)
        XCTAssertEqual(try String(contentsOfFile: folder + "/inbox/t/again.txt", encoding: .utf8), "short")
        var info = stat()
        XCTAssertEqual(stat(folder + "/inbox/t/first.txt", &info), 0)
        XCTAssertEqual(info.st_mode & 0o777, 0o600)
        XCTAssertEqual(info.st_mtim.tv_sec, 1_000_000)
        XCTAssertEqual(stat(folder + "/inbox/t/empty.txt", &info), 0)
        XCTAssertEqual(info.st_size, 0)
        XCTAssertEqual(info.st_mode & 0o777, 0o755)
        let delivered = open(folder + "/inbox/t/first.txt", O_RDONLY)
        defer { close(delivered) }
        XCTAssertEqual(PartFile.deliverer(of: delivered), "k", "its sender is recorded")
        let left = try FileManager.default.contentsOfDirectory(atPath: folder + "/inbox/t").filter {
            $0.hasSuffix(".peerxfer-part")
        }
        XCTAssertEqual(left, [], "no part file is left once the batch is named")
    }

    /// Whole pages of a buffered file go straight to the disk and its last partial page through
    /// the page cache (on ext4 or XFS); what lands must be the bytes received, whatever the size.
    func testBufferedFilesOfWholePagesAndATailArriveByteForByte() throws {
        try requireDirectWrites()
        let inbox = try Inbox(path: folder + "/inbox")
        var batch = VerifiedBatch()
        let sizes = [4095, 4096, 4097, 8192 + 5, 3 * 4096, 100_000]
        let contents = sizes.map { size in Data((0..<size).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ size) }) }
        for (index, bytes) in contents.enumerated() {
            batch.append(index, buffered: try buffered("p/\(index)", bytes), mode: 0o644, modified: 0)
        }
        // A longer part file an earlier try left: emptied before the pages are written over it.
        try FileManager.default.createDirectory(atPath: folder + "/inbox/p", withIntermediateDirectories: true)
        try Data(repeating: 0x41, count: 20_000).write(
            to: URL(fileURLWithPath: folder + "/inbox/p/" + TransferLimits.partName(of: "again", from: "k")))
        let again = contents[3]
        batch.append(
            sizes.count, buffered: try buffered("p/again", again, replacesPart: true), mode: 0o644, modified: 0)

        let results = try batch.publish(in: inbox, for: "k") { _, _ in }
        XCTAssertEqual(results.map(\.verified), Array(repeating: true, count: sizes.count + 1), "\(results)")
        for (index, bytes) in contents.enumerated() {
            XCTAssertEqual(
                try Data(contentsOf: URL(fileURLWithPath: folder + "/inbox/p/\(index)")), bytes, "\(sizes[index]) bytes"
            )
        }
        XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: folder + "/inbox/p/again")), again)
    }

    /// More files than one writer's group holds, by count and by bytes, of sizes on and off a
    /// page, some over part files of earlier tries: every one arrives byte for byte.
    func testManyBufferedFilesWrittenInGroupsArriveByteForByte() throws {
        try requireDirectWrites()
        let inbox = try Inbox(path: folder + "/inbox")
        var batch = VerifiedBatch()
        try FileManager.default.createDirectory(atPath: folder + "/inbox/g", withIntermediateDirectories: true)
        var contents: [Data] = []
        for index in 0..<150 {
            let size = [0, 1, 4095, 4096, 4097, 12_288, 40_000, 65_536, 300_000][index % 9] + index % 3
            let bytes = Data((0..<size).map { UInt8(truncatingIfNeeded: $0 &* 13 &+ index) })
            contents.append(bytes)
            let replaces = index % 10 == 0
            if replaces {
                try Data(repeating: 0x41, count: 70_000).write(
                    to: URL(fileURLWithPath: folder + "/inbox/g/" + TransferLimits.partName(of: "\(index)", from: "k")))
            }
            batch.append(
                index, buffered: try buffered("g/\(index)", bytes, replacesPart: replaces), mode: 0o640, modified: 0)
        }
        let results = try batch.publish(in: inbox, for: "k") { _, _ in }
        XCTAssertEqual(results.filter(\.verified).count, contents.count, "\(results.filter { !$0.verified })")
        for (index, bytes) in contents.enumerated() {
            XCTAssertEqual(
                try Data(contentsOf: URL(fileURLWithPath: folder + "/inbox/g/\(index)")), bytes, "file \(index)")
        }
        let left = try FileManager.default.contentsOfDirectory(atPath: folder + "/inbox/g").filter {
            $0.hasSuffix(TransferLimits.partSuffix)
        }
        XCTAssertEqual(left, [], "every part file was written over and named")
    }

    func testABufferedFileThatCannotBeWrittenWhereItGoesFailsAloneAndNothingIsWrittenThroughASymlink() throws {
        let inbox = try Inbox(path: folder + "/inbox")
        var batch = VerifiedBatch()
        batch.append(0, buffered: try buffered("ok/a.txt", Data("a".utf8)), mode: 0o644, modified: 0)
        batch.append(1, buffered: try buffered("planted/b.txt", Data("b".utf8)), mode: 0o644, modified: 0)
        batch.append(2, buffered: try buffered("ok/c.txt", Data("c".utf8)), mode: 0o644, modified: 0)
        // A folder of the path is a symlink leading out of the inbox.
        XCTAssertEqual(symlink(folder + "/outside", folder + "/inbox/planted"), 0)
        let results = try batch.publish(in: inbox, for: "k") { _, _ in }
        XCTAssertEqual(results.map(\.verified), [true, false, true])
        XCTAssertTrue(results[1].error?.contains("symlink") == true, "\(results[1])")
        XCTAssertEqual(
            try FileManager.default.contentsOfDirectory(atPath: folder + "/outside"), [], "nothing written through it")
        XCTAssertEqual(try String(contentsOfFile: folder + "/inbox/ok/c.txt", encoding: .utf8), "c")
    }

    func testWithoutUnnamedFilesAnOldPartFileIsEmptiedBeforeItIsWritten() throws {
        let inbox = try Inbox(path: folder + "/inbox")
        inbox.usesUnnamedFiles = false  // as on a file system without O_TMPFILE
        let part = folder + "/inbox/" + TransferLimits.partName(of: "a.txt", from: "k")
        // Left by an earlier try, longer than the file is now, and not found when the offer
        // was answered (so the file does not know it replaces it).
        try Data(repeating: 0x5a, count: 5000).write(to: URL(fileURLWithPath: part))
        var batch = VerifiedBatch()
        batch.append(0, buffered: try buffered("a.txt", Data("new".utf8)), mode: 0o644, modified: 0)
        let results = try batch.publish(in: inbox, for: "k") { _, _ in }
        XCTAssertEqual(results.map(\.verified), [true], "\(results)")
        XCTAssertEqual(try String(contentsOfFile: folder + "/inbox/a.txt", encoding: .utf8), "new", "no old tail")
        XCTAssertFalse(FileManager.default.fileExists(atPath: part))
    }

    func testASenderRacingItselfForASmallFileGetsOneCopyNotTwo() throws {
        let inbox = try Inbox(path: folder + "/inbox")
        let path = try RelativePath(validating: "d/same.txt")
        var first: ReceivingClaim? = try inbox.claim(path, for: "k")
        XCTAssertThrowsError(try inbox.claim(path, for: "k")) { error in
            XCTAssertTrue("\(error)".contains("another transfer is receiving"), "\(error)")
            XCTAssertTrue((error as? PeerTransferError)?.failsOneFileOnly == true, "\(error)")
        }
        // Another sender gets a copy of its own, as with part files.
        XCTAssertNoThrow(try inbox.claim(path, for: "other"))
        XCTAssertNotNil(first)
        first = nil
        XCTAssertNoThrow(try inbox.claim(path, for: "k"), "given back when the file that held it went")
    }

    func testADiskThatFillsWhileABatchIsWrittenStillNamesWhatWasWrittenThenFails() throws {
        try fillTheDisk(withUnnamedFiles: true)
    }

    /// On ext4 the files' whole pages go to the disk in groups, by direct writes handed over
    /// together: a group the disk fills on still names, in order, the files written before the
    /// one that did not fit, and says that one's disk is full.
    /// A small ext4 disk, mounted at `disk` (a loop device) until `body` returns.
    private func withExt4Disk(_ body: (_ disk: String) throws -> Void) throws {
        let image = folder + "/disk.img", disk = folder + "/ext4-disk"
        try FileManager.default.createDirectory(atPath: disk, withIntermediateDirectories: true)
        guard run("/usr/bin/truncate", ["-s", "4M", image]),
            run("/usr/sbin/mkfs.ext4", ["-q", "-F", "-m", "0", "-O", "^has_journal", "-b", "4096", image]),
            run("/bin/mount", ["-o", "loop", image, disk])
        else { throw XCTSkip("cannot make and mount a small ext4 disk here") }
        defer { _ = run("/bin/umount", [disk]) }
        try body(disk)
    }

    /// After a full disk the files from the first that failed are written again one at a time,
    /// so a file that fits alone is named even when, written in its group, the later files'
    /// last pages took the space first: 30 pages, then 31 files of a page and a bit, with 40
    /// blocks free. Written in order, the first and five small ones fit.
    func testAFileThatFitsAloneIsNamedThoughItsGroupFilledTheDisk() throws {
        try withExt4Disk { disk in
            let inbox = try Inbox(path: disk)
            let root = open(disk, O_RDONLY | O_DIRECTORY)
            defer { close(root) }
            var space = statvfs()
            XCTAssertEqual(fstatvfs(root, &space), 0)
            // Leave 40 blocks free.
            XCTAssertTrue(
                run("/usr/bin/fallocate", ["-l", String((Int(space.f_bavail) - 40) * 4096), disk + "/filler"]))
            var batch = VerifiedBatch()
            let large = Data((0..<(30 * 4096)).map { UInt8(truncatingIfNeeded: $0 &* 3) })
            batch.append(0, buffered: try buffered("large.bin", large), mode: 0o644, modified: 0)
            let small = Data((0..<(4096 + 100)).map { UInt8(truncatingIfNeeded: $0) })
            for index in 1...31 {
                batch.append(index, buffered: try buffered("s\(index).bin", small), mode: 0o644, modified: 0)
            }
            var told: [FileResult] = []
            XCTAssertThrowsError(try batch.publish(in: inbox, for: "k") { result, _ in told.append(result) })
            let named = told.filter(\.verified).map(\.index)
            XCTAssertEqual(named.first, 0, "the large file fits alone and is named: \(told.filter { !$0.verified })")
            XCTAssertEqual(named, Array(0..<named.count), "in order")
            XCTAssertTrue((4...7).contains(named.count), "about five small files after it: \(named)")
            XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: disk + "/large.bin")), large)
        }
    }

    func testAnExt4DiskThatFillsUnderGroupedDirectWritesNamesTheFilesBeforeInOrder() throws {
        try withExt4Disk { disk in try fillTheExt4Disk(disk) }
    }

    private func fillTheExt4Disk(_ disk: String) throws {
        let inbox = try Inbox(path: disk)
        let root = open(disk, O_RDONLY | O_DIRECTORY)
        defer { close(root) }
        XCTAssertTrue(DirectWrites.isSuitable(root))
        var space = statvfs()
        XCTAssertEqual(fstatvfs(root, &space), 0)
        // 60 files of 15 pages and a tail each (about 3.7 MB): more than the disk holds.
        let piece = Data((0..<(15 * 4096 + 100)).map { UInt8(truncatingIfNeeded: $0) })
        let fits = Int(space.f_bavail) / 16
        XCTAssertLessThan(fits, 60)
        var batch = VerifiedBatch()
        for index in 0..<60 {
            batch.append(index, buffered: try buffered("f\(index).bin", piece), mode: 0o644, modified: 0)
        }
        var told: [FileResult] = []
        XCTAssertThrowsError(try batch.publish(in: inbox, for: "k") { result, _ in told.append(result) }) { error in
            XCTAssertEqual((error as? PeerTransferError)?.wireCode, PeerTransferError.noSpace("").wireCode, "\(error)")
        }
        XCTAssertEqual(told.count, 60, "every file has its result")
        let named = told.filter(\.verified).map(\.index)
        XCTAssertEqual(named, Array(0..<named.count), "in order, and none after the failure")
        // As many as fit, give or take the blocks the file system takes for its own records.
        XCTAssertTrue((fits - 2...fits).contains(named.count), "\(named.count) named, \(fits) fit")
        let firstFailed = try XCTUnwrap(told.first { !$0.verified })
        XCTAssertTrue(
            firstFailed.error?.contains("disk is full (writing f\(firstFailed.index).bin)") == true, "\(firstFailed)")
        for index in named {
            XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: disk + "/f\(index).bin")), piece)
        }
        let stray = try FileManager.default.contentsOfDirectory(atPath: disk).filter {
            $0.hasSuffix(".bin") && !named.contains(Int($0.dropFirst().dropLast(4)) ?? -1)
        }
        XCTAssertEqual(stray, [], "nothing after the failure is named")
    }

    /// Without `O_TMPFILE` the files are written over part files: those let go after the disk
    /// filled are removed, so the files before them still find their space, and no part file of
    /// a failed write is left taking it.
    func testADiskThatFillsWhileABatchIsWrittenOverPartFilesNamesAsManyAndLeavesNoPartFile() throws {
        try fillTheDisk(withUnnamedFiles: false)
    }

    private func fillTheDisk(withUnnamedFiles unnamed: Bool) throws {
        let disk = folder + "/small-disk"
        try FileManager.default.createDirectory(atPath: disk, withIntermediateDirectories: true)
        guard run("/bin/mount", ["-t", "tmpfs", "-o", "size=3m", "tmpfs", disk]) else {
            throw XCTSkip("cannot mount a tmpfs here")
        }
        defer { _ = run("/bin/umount", [disk]) }
        let inbox = try Inbox(path: disk)
        inbox.usesUnnamedFiles = unnamed
        var batch = VerifiedBatch()
        let piece = Data(repeating: 0x33, count: 700_000)
        for index in 0..<6 {  // 4.2 MB for a 3 MiB disk
            batch.append(index, buffered: try buffered("f\(index).bin", piece), mode: 0o644, modified: 0)
        }
        var told: [FileResult] = []
        XCTAssertThrowsError(try batch.publish(in: inbox, for: "k") { result, _ in told.append(result) }) { error in
            XCTAssertEqual((error as? PeerTransferError)?.wireCode, PeerTransferError.noSpace("").wireCode, "\(error)")
        }
        let named = told.filter(\.verified).map(\.index)
        // Each failed file's reason is about that file: the one the disk filled on names itself,
        // the ones after it say they were not written (a log line "f5.bin failed: … (writing
        // f2.bin)" named the wrong file).
        let failed = told.filter { !$0.verified }
        if let first = failed.first {
            XCTAssertTrue(first.error?.contains("disk is full (writing f\(first.index).bin)") == true, "\(failed)")
        }
        for later in failed.dropFirst() {
            XCTAssertTrue(
                later.error?.hasPrefix("not written: the inbox's disk filled up with f\(failed[0].index).bin") == true,
                "\(later)")
        }
        XCTAssertFalse(named.isEmpty, "the files written before the disk filled are named: \(told)")
        XCTAssertEqual(named, Array(0..<named.count), "in order, and none after the failure")
        // Written several at a time, the files still fill the disk in the batch's order: the four
        // that fit (2.8 MB of 3 MiB) are named, as written one after another.
        XCTAssertEqual(named.count, 4, "\(told)")
        XCTAssertEqual(told.count, 6, "every file has its result")
        for index in named {
            XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: disk + "/f\(index).bin")), piece)
        }
        for index in named.count..<6 {
            XCTAssertFalse(FileManager.default.fileExists(atPath: disk + "/f\(index).bin"))
        }
        let parts = try FileManager.default.contentsOfDirectory(atPath: disk).filter { $0.hasSuffix(".peerxfer-part") }
        XCTAssertEqual(parts, [], "no part file is left taking the space")
    }

    private func run(_ tool: String, _ arguments: [String]) -> Bool {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: tool)
        process.arguments = arguments
        guard (try? process.run()) != nil else { return false }
        process.waitUntilExit()
        return process.terminationStatus == 0
    }

    func testOnlyFilesOfAChunkOrLessReceivedFromTheirStartAreBuffered() {
        XCTAssertTrue(BufferedFile.isBuffered(size: 0, from: 0))
        XCTAssertTrue(BufferedFile.isBuffered(size: BufferedFile.sizeLimit, from: 0))
        XCTAssertFalse(BufferedFile.isBuffered(size: BufferedFile.sizeLimit + 1, from: 0))
        XCTAssertFalse(BufferedFile.isBuffered(size: 100, from: 50), "a resumed file goes on in its part file")
    }

    func testABatchIsFullOnceItHoldsItsShareOfMemory() throws {
        var batch = VerifiedBatch()
        var index = 0
        while !batch.isFull {
            batch.append(
                index, buffered: BufferedFile(path: try RelativePath(validating: "f\(index)"), size: 0), mode: 0o644,
                modified: 0)
            index += 1
            XCTAssertLessThanOrEqual(index, VerifiedBatch.maximumFiles)
        }
        XCTAssertEqual(index, VerifiedBatch.maximumFiles, "empty files fill a batch by count")
        // Buffered bytes fill it long before the 256 MiB a batch of written files may hold.
        var big = VerifiedBatch()
        let piece = Data(count: Int(BufferedFile.sizeLimit))
        while !big.isFull {
            var file = BufferedFile(path: try RelativePath(validating: "b\(big.count)"), size: BufferedFile.sizeLimit)
            file.append(piece, at: 0)
            big.append(big.count, buffered: file, mode: 0o644, modified: 0)
        }
        XCTAssertEqual(big.bufferedBytes, VerifiedBatch.maximumBufferedBytes)
        // A file that would take a batch past its share waits for the next batch.
        var almost = VerifiedBatch()
        var file = BufferedFile(path: try RelativePath(validating: "a"), size: 10)
        file.append(Data(count: 10), at: 0)
        almost.append(0, buffered: file, mode: 0o644, modified: 0)
        XCTAssertTrue(almost.hasRoom(forBuffered: VerifiedBatch.maximumBufferedBytes - 10))
        XCTAssertFalse(almost.hasRoom(forBuffered: VerifiedBatch.maximumBufferedBytes - 9))
        XCTAssertTrue(
            VerifiedBatch().hasRoom(forBuffered: VerifiedBatch.maximumBufferedBytes + 1), "an empty batch takes any")
    }
}
