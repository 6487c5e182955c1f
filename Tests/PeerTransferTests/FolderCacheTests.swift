import Foundation
import Glibc
import XCTest
@testable import PeerTransferCore

/// A transfer's folder cache and its batches of verified files: a tree's files land where
/// their paths say, and nothing is written through a symlink planted on the way.
final class FolderCacheTests: XCTestCase {
    private var folder = ""

    override func setUpWithError() throws {
        folder = FileManager.default.temporaryDirectory.appendingPathComponent("px-folders-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: folder + "/inbox", withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: folder + "/outside", withIntermediateDirectories: true)
    }

    override func tearDown() {
        try? FileManager.default.removeItem(atPath: folder)
    }

    func testFilesOfOneFolderShareItAndABatchNamesThemInOrder() throws {
        let inbox = try Inbox(path: folder + "/inbox")
        let cache = FolderCache()
        var batch = VerifiedBatch()
        for (index, name) in ["a/b/one.txt", "a/b/two.txt", "c/three.txt"].enumerated() {
            let part = try inbox.openPart(try RelativePath(validating: name), for: "k", cache: cache)
            try part.write(Data(name.utf8), at: 0)
            try part.finishWriting(mode: 0o644, modified: 1_000_000)
            batch.append(index, part, size: UInt64(name.utf8.count))
        }
        // A name already taken gets a numbered one, through the cache as well.
        try Data("older".utf8).write(to: URL(fileURLWithPath: folder + "/inbox/a/b/two.txt"))
        var told: [String] = []
        let results = try batch.publish(in: inbox, for: "k") { result, _ in told.append(result.storedAs ?? "-") }
        XCTAssertEqual(results.map(\.index), [0, 1, 2])
        XCTAssertEqual(results.map(\.verified), [true, true, true])
        XCTAssertEqual(told, ["a/b/one.txt", "a/b/two (1).txt", "c/three.txt"])
        XCTAssertEqual(try String(contentsOfFile: folder + "/inbox/a/b/one.txt", encoding: .utf8), "a/b/one.txt")
        XCTAssertEqual(try String(contentsOfFile: folder + "/inbox/a/b/two (1).txt", encoding: .utf8), "a/b/two.txt")
        XCTAssertEqual(
            try String(contentsOfFile: folder + "/inbox/a/b/two.txt", encoding: .utf8), "older", "never overwritten")
        XCTAssertEqual(try String(contentsOfFile: folder + "/inbox/c/three.txt", encoding: .utf8), "c/three.txt")
        let left = try FileManager.default.subpathsOfDirectory(atPath: folder + "/inbox").filter {
            $0.hasSuffix(".peerxfer-part")
        }
        XCTAssertEqual(left, [], "no part file is left once named")
    }

    func testAnotherFolderIsWalkedToAgainAndASymlinkOnTheWayIsRefused() throws {
        let inbox = try Inbox(path: folder + "/inbox")
        let cache = FolderCache()
        try inbox.openPart(try RelativePath(validating: "d1/x.txt"), for: "k", cache: cache).closeFiles()
        // d2 is a symlink that leads out: the cache holds d1, so d2 is walked to and refused.
        XCTAssertEqual(symlink(folder + "/outside", folder + "/inbox/d2"), 0)
        XCTAssertThrowsError(try inbox.openPart(try RelativePath(validating: "d2/y.txt"), for: "k", cache: cache)) {
            error in
            XCTAssertTrue((error as? PeerTransferError)?.isUnsafePath == true, "\(error)")
        }
        XCTAssertEqual(
            try FileManager.default.contentsOfDirectory(atPath: folder + "/outside"), [], "nothing written through it")
    }

    func testTwoSpellingsOfOneNameAreOneFolder() throws {
        let inbox = try Inbox(path: folder + "/inbox")
        let cache = FolderCache()
        let composed = "caf\u{e9}", decomposed = "cafe\u{301}"
        XCTAssertNotEqual(Array(composed.utf8), Array(decomposed.utf8), "two names to the file system")
        // A folder the person made, spelt the decomposed way, is not where received files go.
        try FileManager.default.createDirectory(
            atPath: folder + "/inbox/" + decomposed, withIntermediateDirectories: false)
        var batch = VerifiedBatch()
        for (index, name) in [composed + "/a.txt", decomposed + "/b.txt"].enumerated() {
            let part = try inbox.openPart(try RelativePath(validating: name), for: "k", cache: cache)
            try part.write(Data(name.utf8), at: 0)
            try part.finishWriting(mode: 0o644, modified: 0)
            batch.append(index, part, size: 1)
        }
        let results = try batch.publish(in: inbox, for: "k") { _, _ in }
        XCTAssertEqual(results.map(\.verified), [true, true])
        XCTAssertEqual(
            results.compactMap(\.storedAs).map { Array($0.utf8) },
            [Array((composed + "/a.txt").utf8), Array((composed + "/b.txt").utf8)],
            "both received into the composed (NFC) spelling, as a person reads them")
        XCTAssertEqual(
            Set(
                try FileManager.default.contentsOfDirectory(atPath: folder + "/inbox/" + composed).map {
                    Array($0.utf8)
                }),
            [Array("a.txt".utf8), Array("b.txt".utf8)])
        XCTAssertEqual(
            try FileManager.default.contentsOfDirectory(atPath: folder + "/inbox/" + decomposed), [],
            "the person's folder is left alone")
    }

    func testAFolderRemovedOrMovedAwayBetweenTwoFilesIsWalkedToAgain() throws {
        let inbox = try Inbox(path: folder + "/inbox")
        let cache = FolderCache()
        try inbox.openPart(try RelativePath(validating: "gone/a.txt"), for: "k", cache: cache).closeFiles()
        // Removed: made again, as on a first visit.
        try FileManager.default.removeItem(atPath: folder + "/inbox/gone")
        try inbox.openPart(try RelativePath(validating: "gone/b.txt"), for: "k", cache: cache).closeFiles()
        XCTAssertTrue(
            FileManager.default.fileExists(
                atPath: folder + "/inbox/gone/" + TransferLimits.partName(of: "b.txt", from: "k")))
        // Moved out of the inbox, a symlink left in its place: refused, nothing written outside.
        try inbox.openPart(try RelativePath(validating: "x/moved/a.txt"), for: "k", cache: cache).closeFiles()
        XCTAssertEqual(rename(folder + "/inbox/x", folder + "/outside/x"), 0)
        XCTAssertEqual(symlink(folder + "/outside/x", folder + "/inbox/x"), 0)
        XCTAssertThrowsError(try inbox.openPart(try RelativePath(validating: "x/moved/b.txt"), for: "k", cache: cache))
        { error in
            XCTAssertTrue((error as? PeerTransferError)?.isUnsafePath == true, "\(error)")
        }
        XCTAssertFalse(
            FileManager.default.fileExists(
                atPath: folder + "/outside/x/moved/" + TransferLimits.partName(of: "b.txt", from: "k")))
    }

    func testAFolderMovedBeforeItsFileIsNamedFailsThatFileAloneAndTheBatchGoesOn() throws {
        let inbox = try Inbox(path: folder + "/inbox")
        let cache = FolderCache()
        var batch = VerifiedBatch()
        for (index, name) in ["moving/a.txt", "staying/b.txt"].enumerated() {
            let part = try inbox.openPart(try RelativePath(validating: name), for: "k", cache: cache)
            try part.write(Data(name.utf8), at: 0)
            try part.finishWriting(mode: 0o644, modified: 0)
            batch.append(index, part, size: 1)
        }
        XCTAssertEqual(rename(folder + "/inbox/moving", folder + "/inbox/moved"), 0)
        let results = try batch.publish(in: inbox, for: "k") { _, _ in }
        XCTAssertEqual(results.map(\.verified), [false, true])
        XCTAssertTrue(results[0].error?.contains("went away") == true, "\(results[0])")
        XCTAssertEqual(try String(contentsOfFile: folder + "/inbox/staying/b.txt", encoding: .utf8), "staying/b.txt")
        XCTAssertFalse(
            FileManager.default.fileExists(atPath: folder + "/inbox/moved/a.txt"), "never named where it was not sent")
    }

    func testAFolderFoundMissingStaysMissingOnlyForLookups() throws {
        let inbox = try Inbox(path: folder + "/inbox")
        let cache = FolderCache()
        let path = try RelativePath(validating: "new/file.bin")
        XCTAssertNil(inbox.digest(ofFile: path, size: 4, deliveredBy: "k", cache: cache))
        XCTAssertEqual(inbox.partChunkDigests(path, chunkSize: 4, for: "k", cache: cache), [])
        // Receiving creates it even though a lookup found it missing.
        let part = try inbox.openPart(path, for: "k", cache: cache)
        part.closeFiles()
        var info = stat()
        XCTAssertEqual(stat(folder + "/inbox/new", &info), 0)
        XCTAssertEqual(info.st_mode & S_IFMT, S_IFDIR)
    }
}
