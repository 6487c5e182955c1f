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
        let part = try inbox.openPart(path, for: "k")
        try part.write(Data("the verified bytes".utf8), at: 0)
        try part.finishWriting(mode: 0o644, modified: 0)
        // Between verification and naming, someone renames their own file over the part file.
        let partPath = folder + "/inbox/" + TransferLimits.partName(of: "report.txt", from: "k")
        try Data("EVIL".utf8).write(to: URL(fileURLWithPath: folder + "/outside/evil"))
        XCTAssertEqual(rename(folder + "/outside/evil", partPath), 0)
        XCTAssertThrowsError(try part.publish()) { error in
            XCTAssertTrue("\(error)".contains("replaced or removed after it was verified"), "\(error)")
        }
        part.closeFiles()
        XCTAssertFalse(
            FileManager.default.fileExists(atPath: folder + "/inbox/report.txt"), "nothing is published in its place")
        XCTAssertEqual(
            try String(contentsOfFile: partPath, encoding: .utf8), "EVIL", "someone else's file is left where it was")

        // Or moves the part file aside and plants a symlink under its name: the verified file
        // itself gets the name, and the symlink is left alone.
        let second = try inbox.openPart(try RelativePath(validating: "b.txt"), for: "k")
        try second.write(Data("b".utf8), at: 0)
        try second.finishWriting(mode: 0o644, modified: 0)
        let secondPart = folder + "/inbox/" + TransferLimits.partName(of: "b.txt", from: "k")
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
        XCTAssertFalse(
            FileManager.default.fileExists(atPath: folder + "/outside/target"), "nothing was written through it")
    }

    /// Receives `text` as `name` from `sender` through a part file, as a transfer does.
    private func receive(_ text: String, as name: String, from sender: String, into inbox: Inbox) throws -> String {
        let part = try inbox.openPart(try RelativePath(validating: name), for: sender)
        defer { part.closeFiles() }
        try part.write(Data(text.utf8), at: 0)
        try part.finishWriting(mode: 0o644, modified: 0)
        return try part.publish()
    }

    func testAnUntrustedSenderCannotPushATrustedSendersFileToAnotherName() throws {
        let trusted = String(repeating: "7", count: 64), stranger = "ab12cd34" + String(repeating: "0", count: 56)
        let inbox = try Inbox(path: folder + "/inbox") { $0 == trusted }
        guard inbox.recordsSenders else {
            throw XCTSkip("the temporary folder's file system keeps no user extended attributes")
        }
        // The stranger sends Invoice.pdf first; then the trusted sender sends its own.
        XCTAssertEqual(try receive("forged", as: "Invoice.pdf", from: stranger, into: inbox), "Invoice.pdf")
        XCTAssertEqual(
            try receive("real", as: "Invoice.pdf", from: trusted, into: inbox), "Invoice.pdf",
            "the trusted sender's file gets the name it was sent under")
        XCTAssertEqual(try String(contentsOfFile: folder + "/inbox/Invoice.pdf", encoding: .utf8), "real")
        XCTAssertEqual(
            try String(contentsOfFile: folder + "/inbox/Invoice (from ab12cd34).pdf", encoding: .utf8), "forged",
            "the stranger's file is kept, under a name that says whose it is")
        // Again, after the person moved the real invoice away: the moved-aside name is taken,
        // so the stranger's second file is numbered beside it.
        XCTAssertEqual(unlink(folder + "/inbox/Invoice.pdf"), 0)
        XCTAssertEqual(try receive("forged again", as: "Invoice.pdf", from: stranger, into: inbox), "Invoice.pdf")
        XCTAssertEqual(try receive("real again", as: "Invoice.pdf", from: trusted, into: inbox), "Invoice.pdf")
        XCTAssertEqual(
            try String(contentsOfFile: folder + "/inbox/Invoice (from ab12cd34, 1).pdf", encoding: .utf8),
            "forged again")
        // Numbered names too: the trusted sender's third copy would be "Invoice (1).pdf".
        XCTAssertEqual(try receive("forged 1", as: "Invoice (1).pdf", from: stranger, into: inbox), "Invoice (1).pdf")
        XCTAssertEqual(try receive("real 3", as: "Invoice.pdf", from: trusted, into: inbox), "Invoice (1).pdf")
        XCTAssertEqual(
            try String(contentsOfFile: folder + "/inbox/Invoice (1) (from ab12cd34).pdf", encoding: .utf8), "forged 1")
        // Only strangers' files move: the trusted sender's own earlier file, and a file the
        // person put there (no sender recorded), keep their names; the new one is numbered.
        try Data("mine".utf8).write(to: URL(fileURLWithPath: folder + "/inbox/notes.txt"))
        XCTAssertEqual(try receive("theirs", as: "notes.txt", from: trusted, into: inbox), "notes (1).txt")
        XCTAssertEqual(try String(contentsOfFile: folder + "/inbox/notes.txt", encoding: .utf8), "mine")
        // A stranger never takes a name back.
        XCTAssertEqual(try receive("t", as: "plan.txt", from: trusted, into: inbox), "plan.txt")
        XCTAssertEqual(try receive("s", as: "plan.txt", from: stranger, into: inbox), "plan (1).txt")
        XCTAssertEqual(try String(contentsOfFile: folder + "/inbox/plan.txt", encoding: .utf8), "t")
        // A stranger's file it left unreadable (mode 0 asked for: the owner keeps read), and a
        // stranger's folder in the way of the name, move aside all the same.
        let locked = try inbox.openPart(try RelativePath(validating: "locked.txt"), for: stranger)
        try locked.write(Data("l".utf8), at: 0)
        try locked.finishWriting(mode: 0, modified: 0)
        XCTAssertEqual(try locked.publish(), "locked.txt")
        locked.closeFiles()
        XCTAssertEqual(try receive("mine", as: "locked.txt", from: trusted, into: inbox), "locked.txt")
        XCTAssertEqual(try String(contentsOfFile: folder + "/inbox/locked (from ab12cd34).txt", encoding: .utf8), "l")
        // A stranger's folder stays where it is (trusted senders' files may be in it by now):
        // the trusted file is numbered beside it.
        XCTAssertEqual(try receive("inside", as: "Report.pdf/x.txt", from: stranger, into: inbox), "Report.pdf/x.txt")
        XCTAssertEqual(try receive("mine", as: "Report.pdf/t.txt", from: trusted, into: inbox), "Report.pdf/t.txt")
        XCTAssertEqual(try receive("report", as: "Report.pdf", from: trusted, into: inbox), "Report (1).pdf")
        XCTAssertEqual(try String(contentsOfFile: folder + "/inbox/Report.pdf/t.txt", encoding: .utf8), "mine")
        // A stranger's folder holding only strangers' files moves aside like a file.
        XCTAssertEqual(
            try receive("inside", as: "Plan.pdf/deep/x.txt", from: stranger, into: inbox), "Plan.pdf/deep/x.txt")
        XCTAssertEqual(try receive("plan", as: "Plan.pdf", from: trusted, into: inbox), "Plan.pdf")
        XCTAssertEqual(
            try String(contentsOfFile: folder + "/inbox/Plan (from ab12cd34).pdf/deep/x.txt", encoding: .utf8), "inside"
        )
        // A stranger's file where a trusted sender's folder goes.
        XCTAssertEqual(try receive("squat", as: "docs", from: stranger, into: inbox), "docs")
        XCTAssertEqual(try receive("a", as: "docs/a.txt", from: trusted, into: inbox), "docs/a.txt")
        XCTAssertEqual(try String(contentsOfFile: folder + "/inbox/docs (from ab12cd34)", encoding: .utf8), "squat")
        // Small files arrive without a name (O_TMPFILE): one that loses a race for a name it
        // tried to take back keeps a hidden name and gets the next one, never lost.
        inbox.usesUnnamedFiles = true
        XCTAssertEqual(try receive("s", as: "race.txt", from: stranger, into: inbox), "race.txt")
        let first = try inbox.openUnnamedFile(try RelativePath(validating: "race.txt"), for: trusted)
        let second = try inbox.openUnnamedFile(try RelativePath(validating: "race.txt"), for: trusted)
        for (file, text) in [(first, "one"), (second, "two")] {
            try file.write(Data(text.utf8), at: 0)
            try file.finishWriting(mode: 0o644, modified: 0)
        }
        XCTAssertEqual(try first.publish(), "race.txt")
        XCTAssertEqual(try second.publish(), "race (1).txt")
        first.closeFiles()
        second.closeFiles()
        let leftovers = try FileManager.default.contentsOfDirectory(atPath: folder + "/inbox").filter {
            $0.hasSuffix(".peerxfer-swap") || $0.hasSuffix(TransferLimits.partSuffix)
        }
        XCTAssertEqual(leftovers, [], "no swap or part file is left behind")
    }

    func testOneSendersPartFilesMayHoldOnlyTheirShareOfTheDisk() throws {
        let inbox = try Inbox(path: folder + "/inbox")
        var info = statvfs()
        XCTAssertEqual(statvfs(folder, &info), 0)
        let disk = Double(UInt64(info.f_blocks) * UInt64(info.f_frsize))
        inbox.partShareOfOneSender.withLock { $0 = 3_000 / disk }  // about 3,000 bytes
        let greedy = String(repeating: "a", count: 64), other = String(repeating: "b", count: 64)
        for name in ["one.bin", "sub/two.bin"] {
            let part = try inbox.openPart(try RelativePath(validating: name), for: greedy)
            try part.write(Data(repeating: 7, count: 1_200), at: 0)
            part.closeFiles()
        }
        // Counted by a walk (the daemon's, every few minutes), by each sender's tag.
        XCTAssertEqual(inbox.partLedger.value.walked, [:], "nothing counted before the walk")
        inbox.countParts()
        XCTAssertEqual(inbox.partLedger.value.walked[Inbox.partTag(of: greedy)]?.values.reduce(0, +), 2_400)
        XCTAssertNil(inbox.partLedger.value.walked[Inbox.partTag(of: other)])
        XCTAssertThrowsError(
            try inbox.checkPartRoom(for: greedy, adding: 1_000, replacing: ["new.bin.x": 1_000], transfer: 1)
        ) {
            error in
            guard let failure = error as? PeerTransferError, failure.wireCode == "limit" else {
                return XCTFail("\(error)")
            }
            let message = failure.message
            XCTAssertTrue(message.contains("this sender already has 2"), message)
            XCTAssertTrue(
                message.contains(
                    "of unfinished files at the receiver, or on their way (2 files whose transfer was cut or is under way: \"one.bin\", \"sub/two.bin\")"
                ), message)
            XCTAssertTrue(message.contains("Send those files again to finish them"), message)
        }
        XCTAssertNoThrow(
            try inbox.checkPartRoom(for: other, adding: 9_000, replacing: ["big.bin.x": 9_000], transfer: 2),
            "with nothing left over, one offer is held to the free space alone")
        XCTAssertThrowsError(
            try inbox.checkPartRoom(for: other, adding: 1_000, replacing: ["more.bin.x": 1_000], transfer: 3),
            "an offer taken is reserved at once: the next one sees it")
        inbox.countParts()
        XCTAssertThrowsError(
            try inbox.checkPartRoom(for: other, adding: 1_000, replacing: ["more.bin.x": 1_000], transfer: 3),
            "a walk does not undo a transfer's reservation")
        // The transfer ends having written nothing: its reservation no longer counts.
        inbox.settleParts(of: 2)
        XCTAssertNoThrow(
            try inbox.checkPartRoom(for: other, adding: 1_000, replacing: ["more.bin.x": 1_000], transfer: 3))
        inbox.settleParts(of: 3)
        // Resuming (or sending again) a file whose part file is there counts its bytes once.
        let one = TransferLimits.partName(of: "one.bin", from: greedy)
        XCTAssertNoThrow(try inbox.checkPartRoom(for: greedy, adding: 1_500, replacing: [one: 1_500], transfer: 4))
        // A file that gets its name is no longer counted.
        let done = try inbox.openPart(try RelativePath(validating: "sub/two.bin"), for: greedy)
        try done.write(Data(repeating: 7, count: 1_200), at: 0)
        try done.finishWriting(mode: 0o644, modified: 0)
        XCTAssertEqual(try done.publish(), "sub/two.bin")
        done.closeFiles()
        XCTAssertEqual(inbox.partLedger.value.held(by: Inbox.partTag(of: greedy), besides: [:]).keys.sorted(), [one])
        // Part names are found by their bytes: a character that joins the dot before the
        // suffix into one grapheme (U+0D4E) does not hide a part file from the count.
        let hidden = try inbox.openPart(try RelativePath(validating: "p1\u{0D4E}"), for: greedy)
        try hidden.write(Data(repeating: 7, count: 10), at: 0)
        hidden.closeFiles()
        inbox.countParts()
        XCTAssertEqual(
            inbox.partLedger.value.walked[Inbox.partTag(of: greedy)]?.count, 2, "a walk after a walk finds them all")
    }

    func testFreeSpaceIsPromisedToOneTransferAtATime() throws {
        let inbox = try Inbox(path: folder + "/inbox")
        let free = try inbox.freeBytes()
        let first = free / 10 * 6, second = free / 10 * 5  // each fits alone; not both
        try inbox.promise(first)
        XCTAssertThrowsError(try inbox.promise(second)) { error in
            let message = "\(error)"
            XCTAssertTrue(message.contains("bytes free for this transfer, which needs \(second)"), message)
            // The first transfer's promise is the receiver's business: no number in the
            // message is it.
            let numbers = message.split(whereSeparator: { !$0.isNumber }).compactMap { UInt64($0) }
            XCTAssertFalse(numbers.contains(first), message)
        }
        inbox.keptPromise(first)  // the first transfer ended (or wrote it all)
        XCTAssertNoThrow(try inbox.promise(second), "free again once the promise is kept")
        inbox.keptPromise(second)
    }

    func testTwoTransfersOfOnePathNeverWriteTheSamePartFile() throws {
        let inbox = try Inbox(path: folder + "/inbox")
        let path = try RelativePath(validating: "shared.bin")
        let first = try inbox.openPart(path, for: "k")
        XCTAssertThrowsError(try inbox.openPart(path, for: "k")) { error in
            XCTAssertTrue("\(error)".contains("another transfer is receiving"), "\(error)")
        }
        // Its chunk digests are not offered to another sender while it is being written.
        try first.write(Data(count: 2 * TransferLimits.chunkSize), at: 0)
        XCTAssertEqual(inbox.partChunkDigests(path, chunkSize: TransferLimits.chunkSize, for: "k"), [])
        // Verified and waiting for its name, it still holds the lock.
        try first.finishWriting(mode: 0o644, modified: 0)
        XCTAssertThrowsError(try inbox.openPart(path, for: "k"))
        XCTAssertEqual(try first.publish(), "shared.bin")
        first.closeFiles()
        XCTAssertNoThrow(try inbox.openPart(try RelativePath(validating: "shared.bin"), for: "k").closeFiles())
    }

    func testAPartFilePlantedAsAHardLinkToAFileOutsideIsNotWrittenThrough() throws {
        let target = folder + "/outside/precious.txt"
        try Data("precious".utf8).write(to: URL(fileURLWithPath: target))
        XCTAssertEqual(link(target, folder + "/inbox/" + TransferLimits.partName(of: "x.txt", from: "k")), 0)
        let inbox = try Inbox(path: folder + "/inbox")
        let path = try RelativePath(validating: "x.txt")
        XCTAssertThrowsError(try inbox.openPart(path, for: "k")) { error in
            XCTAssertTrue("\(error)".contains("hard link"), "\(error)")
        }
        XCTAssertEqual(inbox.partChunkDigests(path, chunkSize: 4, for: "k"), [], "its digests are not offered either")
        XCTAssertEqual(try String(contentsOfFile: target, encoding: .utf8), "precious")
    }

    func testAFIFOPlantedInTheInboxNeverBlocksTheDaemon() throws {
        XCTAssertEqual(mkfifo(folder + "/inbox/pipe.txt", 0o644), 0)
        XCTAssertEqual(mkfifo(folder + "/inbox/" + TransferLimits.partName(of: "pipe2.txt", from: "k"), 0o644), 0)
        let inbox = try Inbox(path: folder + "/inbox")
        // Each of these would block for ever on a FIFO opened for reading without O_NONBLOCK.
        XCTAssertNil(inbox.digest(ofFile: try RelativePath(validating: "pipe.txt"), size: 0, deliveredBy: "k"))
        XCTAssertEqual(inbox.partChunkDigests(try RelativePath(validating: "pipe2.txt"), chunkSize: 4, for: "k"), [])
        XCTAssertThrowsError(try inbox.openPart(try RelativePath(validating: "pipe2.txt"), for: "k")) { error in
            XCTAssertTrue("\(error)".contains("FIFO"), "\(error)")
        }
    }

    /// A clock for an inbox, read as set: file times are judged by it.
    final class TestClock: Sendable {
        let time = Locked(timespec())
        /// The clock, `seconds` after `path`'s change time.
        func set(_ seconds: Double, afterTheChangeOf path: String) {
            var info = stat()
            XCTAssertEqual(stat(path, &info), 0)
            var time = info.st_ctim
            let nanoseconds = time.tv_nsec + Int(seconds * 1e9)
            time.tv_sec += nanoseconds / 1_000_000_000
            time.tv_nsec = nanoseconds % 1_000_000_000
            self.time.withLock { $0 = time }
        }
    }

    func testTheDigestOfAnExistingFileIsHashedOnceUntilTheFileChanges() throws {
        let clock = TestClock()
        let inbox = try Inbox(path: folder + "/inbox", now: { clock.time.value })
        let path = try RelativePath(validating: "held.bin")
        let part = try inbox.openPart(path, for: "k")
        try part.write(Data(repeating: 7, count: 100_000), at: 0)
        try part.finishWriting(mode: 0o644, modified: 0)
        XCTAssertEqual(try part.publish(), "held.bin")
        part.closeFiles()
        // A digest is remembered only once the file's change time lies past the kernel's
        // timestamp granularity (a later write must be sure to move it): not at its change time.
        clock.set(0, afterTheChangeOf: folder + "/inbox/held.bin")
        XCTAssertNotNil(inbox.digest(ofFile: path, size: 100_000, deliveredBy: "k"))
        XCTAssertNotNil(inbox.digest(ofFile: path, size: 100_000, deliveredBy: "k"))
        XCTAssertEqual(inbox.digests.count, 0, "not remembered while the change time is not settled")
        XCTAssertEqual(inbox.digests.hashings, 2)
        clock.set(1, afterTheChangeOf: folder + "/inbox/held.bin")
        let first = inbox.digest(ofFile: path, size: 100_000, deliveredBy: "k")
        XCTAssertNotNil(first)
        XCTAssertEqual(inbox.digest(ofFile: path, size: 100_000, deliveredBy: "k"), first)
        XCTAssertEqual(inbox.digests.count, 1, "asked twice, remembered once")
        XCTAssertNil(
            inbox.digest(ofFile: path, size: 100_000, deliveredBy: "someone else"), "never offered to another sender")
        // The same size, other bytes, and the modification time put back: the change time
        // moved, so the file is hashed again and the new digest is answered.
        let fd = open(folder + "/inbox/held.bin", O_WRONLY)
        XCTAssertGreaterThanOrEqual(fd, 0)
        XCTAssertEqual(pwrite(fd, [UInt8(9)], 1, 500), 1)
        var times = [timespec(tv_sec: 0, tv_nsec: 0), timespec(tv_sec: 0, tv_nsec: 0)]
        XCTAssertEqual(futimens(fd, &times), 0)
        close(fd)
        let second = inbox.digest(ofFile: path, size: 100_000, deliveredBy: "k")
        XCTAssertNotNil(second)
        XCTAssertNotEqual(second, first, "a changed file must not be answered with its old digest")
    }

    func testAPartFileOfferedAgainAndAgainIsHashedOnceAndAHashingIsStoppedWhenItsSenderLeaves() throws {
        // A peer that leaves a large part file, then offers it over and over and hangs up,
        // must not cost a full read and SHA-256 each time.
        let clock = TestClock()
        let inbox = try Inbox(path: folder + "/inbox", now: { clock.time.value })
        let path = try RelativePath(validating: "big.bin")
        let key = String(repeating: "ab", count: 32)
        let chunk = 1 << 20
        let part = try inbox.openPart(path, for: key)
        for index in 0..<64 { try part.write(Data(repeating: UInt8(index), count: chunk), at: UInt64(index * chunk)) }
        part.closeFiles()
        // Past the timestamp granularity, so that a digest may be remembered.
        let partPath = try XCTUnwrap(
            FileManager.default.subpaths(atPath: folder + "/inbox")?.first { $0.hasSuffix(".peerxfer-part") })
        clock.set(1, afterTheChangeOf: folder + "/inbox/" + partPath)
        // A sender that left before the first hashing: nothing is hashed, nothing remembered.
        let gone = StopFlag()
        gone.set()
        XCTAssertNil(inbox.resumablePart(path, chunkSize: chunk, for: key, stop: gone))
        XCTAssertEqual(inbox.partDigests.hashings, 0)
        var answers: Set<[SHA256Digest]> = []
        for _ in 0..<20 {
            answers.insert(try XCTUnwrap(inbox.resumablePart(path, chunkSize: chunk, for: key, stop: StopFlag())))
        }
        XCTAssertEqual(inbox.partDigests.hashings, 1, "twenty offers, one hashing")
        XCTAssertEqual(answers.count, 1)
        XCTAssertEqual(answers.first?.count, 64)
        // Another sender learns nothing of it.
        XCTAssertNil(inbox.resumablePart(path, chunkSize: chunk, for: String(repeating: "cd", count: 32)))
        // Written to again, it is hashed again.
        let resumed = try inbox.openPart(path, for: key)
        try resumed.write(Data(repeating: 9, count: chunk), at: UInt64(64 * chunk))
        resumed.closeFiles()
        clock.set(1, afterTheChangeOf: folder + "/inbox/" + partPath)
        XCTAssertEqual(inbox.resumablePart(path, chunkSize: chunk, for: key)?.count, 65)
        XCTAssertEqual(inbox.partDigests.hashings, 2)
    }

    func testManyAsksForOneDigestAtOnceHashOnce() {
        let cache = DigestCache()
        var info = stat()
        info.st_ino = 42
        info.st_size = 10
        let key = DigestCache.Key(info)
        let hashed = Locked(0)
        let answers = Locked<[SHA256Digest?]>([])
        DispatchQueue.concurrentPerform(iterations: 8) { i in
            let digest = cache.digest(for: key) {
                hashed.withLock { $0 += 1 }
                // A slow hashing, as of a large file: the others ask meanwhile (and if one
                // asked after it ended, it finds the digest remembered: one hashing either way).
                Thread.sleep(forTimeInterval: 0.3)
                return (SHA256Hasher().finish(), true)
            }
            answers.withLock { $0.append(digest) }
        }
        XCTAssertEqual(hashed.withLock { $0 }, 1, "one hashing for eight asks")
        XCTAssertEqual(Set(answers.withLock { $0 }).count, 1)
        XCTAssertNotNil(answers.withLock { $0 }.first ?? nil)
        // A failed hashing is not remembered: the next ask tries again.
        let other = DigestCache.Key(
            {
                var o = stat(); o.st_ino = 43; return o
            }())
        XCTAssertNil(cache.digest(for: other) { nil })
        XCTAssertNotNil(cache.digest(for: other) { (SHA256Hasher().finish(), false) })
        XCTAssertEqual(cache.count, 1, "a digest the hasher says not to remember is answered, not kept")
    }

    func testEachSenderHasAPartFileOfItsOwnThatNoOtherSeesOrTouches() throws {
        let inbox = try Inbox(path: folder + "/inbox")
        let path = try RelativePath(validating: "x.bin")
        let a = String(repeating: "a", count: 64), b = String(repeating: "b", count: 64)
        let partOfA = folder + "/inbox/" + TransferLimits.partName(of: "x.bin", from: a)
        XCTAssertEqual(TransferLimits.partName(of: "x.bin", from: a), "x.bin.aaaaaaaaaaaaaaaaaaaaaaaa.peerxfer-part")
        let chunk = TransferLimits.chunkSize
        // Sender A's transfer is cut after two chunks: its part file stays, for it to resume.
        let fromA = try inbox.openPart(path, for: a)
        // While A's part file is still empty (and locked), B's transfer of the path goes on.
        let early = try inbox.openPart(path, for: b)
        try early.write(Data("B early".utf8), at: 0)
        early.discard()
        early.closeFiles()
        try fromA.write(Data(repeating: 0xA, count: 2 * chunk), at: 0)
        fromA.closeFiles()
        XCTAssertEqual(inbox.partChunkDigests(path, chunkSize: chunk, for: a).count, 2)
        XCTAssertEqual(inbox.partChunkDigests(path, chunkSize: chunk, for: b), [], "B learns nothing of A's file")

        // B offers the same path, starts, and withdraws: A's part file is as it was.
        let withdrawn = try inbox.openPart(path, for: b)
        try withdrawn.write(Data(repeating: 0xB, count: 100), at: 0)
        withdrawn.discard()
        withdrawn.closeFiles()
        XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: partOfA)), Data(repeating: 0xA, count: 2 * chunk))

        // B sends it whole while A resumes at the same time: both arrive, neither in the other's file.
        let fromB = try inbox.openPart(path, for: b)
        let resumed = try inbox.openPart(path, for: a)
        try fromB.write(Data("B's copy".utf8), at: 0)
        try fromB.finishWriting(mode: 0o644, modified: 0)
        try resumed.keepPrefix(0, feeding: SHA256Hasher())  // A starts over (a new version of it)
        try resumed.write(Data("A's copy".utf8), at: 0)
        try resumed.finishWriting(mode: 0o644, modified: 0)
        XCTAssertEqual(try fromB.publish(), "x.bin")
        XCTAssertEqual(try resumed.publish(), "x (1).bin")
        fromB.closeFiles()
        resumed.closeFiles()
        XCTAssertEqual(try String(contentsOfFile: folder + "/inbox/x.bin", encoding: .utf8), "B's copy")
        XCTAssertEqual(try String(contentsOfFile: folder + "/inbox/x (1).bin", encoding: .utf8), "A's copy")
        XCTAssertEqual(PeerXferLab.listing(folder + "/inbox"), ["x (1).bin", "x.bin"], "no part file is left")
        XCTAssertNotNil(inbox.digest(ofFile: path, size: 8, deliveredBy: b), "B delivered x.bin")
        XCTAssertNil(inbox.digest(ofFile: path, size: 8, deliveredBy: a))
    }

    func testTwoKeysThatBeginAlikeStillNeverShareAPartFile() throws {
        let inbox = try Inbox(path: folder + "/inbox")
        let path = try RelativePath(validating: "y.bin")
        let first = String(repeating: "c", count: 64),
            second = String(repeating: "c", count: 24) + String(repeating: "d", count: 40)
        XCTAssertEqual(
            TransferLimits.partName(of: "y.bin", from: first), TransferLimits.partName(of: "y.bin", from: second))
        let cut = try inbox.openPart(path, for: first)
        try cut.write(Data(repeating: 1, count: 4096), at: 0)
        cut.closeFiles()
        XCTAssertEqual(
            inbox.partChunkDigests(path, chunkSize: 1024, for: second), [], "the recorded key tells them apart")
        // The second key's copy goes to a file without a name; the first's part file stays.
        let other = try inbox.openPart(path, for: second)
        XCTAssertNil(other.partName)
        try other.write(Data("second".utf8), at: 0)
        other.discard()
        try other.finishWriting(mode: 0o644, modified: 0)
        XCTAssertEqual(try other.publish(), "y.bin")
        other.closeFiles()
        let part = folder + "/inbox/" + TransferLimits.partName(of: "y.bin", from: first)
        XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: part)), Data(repeating: 1, count: 4096))
        XCTAssertEqual(inbox.partChunkDigests(path, chunkSize: 1024, for: first).count, 4)
    }

    func testAFileSystemWithoutExtendedAttributesIsToldApart() {
        let proc = open("/proc", O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        XCTAssertGreaterThanOrEqual(proc, 0)
        defer { close(proc) }
        XCTAssertFalse(PartFile.keepsAttributes(proc), "procfs keeps no user attributes")
        XCTAssertTrue(
            (try? Inbox(path: folder + "/inbox"))?.recordsSenders ?? false, "this test folder's file system does")
    }

    func testAPeerThatTookEveryNumberedNameCannotKeepAFileOut() throws {
        let inbox = try Inbox(path: folder + "/inbox")
        let path = try RelativePath(validating: "r.txt")
        for number in 0..<PartFile.numberedNames {
            let name = number == 0 ? "r.txt" : PartFile.numbered("r.txt", number)
            XCTAssertTrue(FileManager.default.createFile(atPath: folder + "/inbox/" + name, contents: nil))
        }
        let part = try inbox.openPart(path, for: "k")
        try part.write(Data("mine".utf8), at: 0)
        try part.finishWriting(mode: 0o644, modified: 0)
        let stored = try part.publish()
        part.closeFiles()
        XCTAssertTrue(
            stored.hasPrefix("r (") && stored.hasSuffix(").txt") && stored.count == "r (12345678).txt".count, stored)
        XCTAssertEqual(try String(contentsOfFile: folder + "/inbox/" + stored, encoding: .utf8), "mine")
    }
}

final class PartSweeperTests: XCTestCase {
    func testAPartFileTheSweeperRemovedUnderAnOpenTransferIsMadeAnew() throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("px-sweep-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: folder + "/inbox", withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let inbox = try Inbox(path: folder + "/inbox")
        let path = try RelativePath(validating: "big.bin")
        let first = try inbox.openPart(path, for: "k")
        try first.write(Data(repeating: 1, count: 10), at: 0)
        first.closeFiles()
        let partPath = folder + "/inbox/" + TransferLimits.partName(of: "big.bin", from: "k")
        // A transfer opened the part file; the sweeper removes it before the transfer locks it.
        let opened = open(partPath, O_RDWR)
        XCTAssertGreaterThanOrEqual(opened, 0)
        defer { close(opened) }
        let root = open(folder + "/inbox", O_RDONLY | O_DIRECTORY)
        defer { close(root) }
        XCTAssertTrue(Inbox.stillNamed(TransferLimits.partName(of: "big.bin", from: "k"), in: root, opened))
        XCTAssertTrue(PartSweeper.removeUnlessInUse(partPath))
        XCTAssertFalse(
            Inbox.stillNamed(TransferLimits.partName(of: "big.bin", from: "k"), in: root, opened),
            "a locked file with no name is not the part file")
        // Another file put under the name meanwhile is not the one the sweeper locked: left alone.
        try Data("someone's".utf8).write(to: URL(fileURLWithPath: partPath))
        XCTAssertFalse(Inbox.stillNamed(TransferLimits.partName(of: "big.bin", from: "k"), in: root, opened))
        // And a transfer that opens it now gets a part file with a name, to be published.
        XCTAssertEqual(unlink(partPath), 0)
        let again = try inbox.openPart(path, for: "k")
        try again.write(Data("whole".utf8), at: 0)
        try again.finishWriting(mode: 0o644, modified: 0)
        XCTAssertEqual(try again.publish(), "big.bin")
        again.closeFiles()
    }

    func testPartFilesNoOneCameBackForAreRemovedButNotOneBeingWritten() throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("px-sweep-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: folder + "/inbox/sub", withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let inbox = try Inbox(path: folder + "/inbox")
        let key = String(repeating: "ab", count: 32)
        func part(_ name: String, daysOld: Double) throws -> String {
            let path = try RelativePath(validating: name)
            let file = try inbox.openPart(path, for: key)
            try file.write(Data(repeating: 1, count: 1000), at: 0)
            file.closeFiles()
            let full =
                folder + "/inbox/"
                + (path.parent + [TransferLimits.partName(of: path.name, from: key)]).joined(separator: "/")
            let when = Date().addingTimeInterval(-daysOld * 86_400).timeIntervalSince1970
            var times = [timespec(tv_sec: Int(when), tv_nsec: 0), timespec(tv_sec: Int(when), tv_nsec: 0)]
            XCTAssertEqual(utimensat(AT_FDCWD, full, &times, 0), 0)
            return full
        }
        let old = try part("sub/old.bin", daysOld: 8)
        let fresh = try part("fresh.bin", daysOld: 1)
        let busy = try part("busy.bin", daysOld: 30)
        try Data("x".utf8).write(to: URL(fileURLWithPath: folder + "/inbox/done.txt"))
        // A transfer writing to it holds its lock.
        let holder = open(busy, O_RDONLY)
        XCTAssertEqual(flock(holder, LOCK_EX), 0)
        defer { close(holder) }
        var sweeper = PartSweeper()
        sweeper.reserve = 0
        let outcome = sweeper.sweep(folder + "/inbox")
        XCTAssertEqual(outcome, PartSweeper.Outcome(removed: 1, bytes: 1000))
        XCTAssertFalse(FileManager.default.fileExists(atPath: old))
        XCTAssertTrue(FileManager.default.fileExists(atPath: fresh))
        XCTAssertTrue(FileManager.default.fileExists(atPath: busy))
        XCTAssertTrue(
            FileManager.default.fileExists(atPath: folder + "/inbox/done.txt"), "delivered files are never touched")
        // Below the reserve (here: any disk has less than 100 % free), the oldest go first.
        sweeper.reserve = 0.999_999
        XCTAssertEqual(sweeper.sweep(folder + "/inbox").removed, 1, "fresh.bin, not the one being written")
        XCTAssertFalse(FileManager.default.fileExists(atPath: fresh))
        XCTAssertTrue(FileManager.default.fileExists(atPath: busy))
    }
}
