import Foundation
import SalutStreams
import XCTest
@testable import PeerTransferCore

/// The pieces that make transfers fast give the same answers as the plain ways they replace.
final class FastPathTests: XCTestCase {
    private var folder = ""

    override func setUpWithError() throws {
        folder = FileManager.default.temporaryDirectory.appendingPathComponent("px-fast-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
    }

    override func tearDown() {
        try? FileManager.default.removeItem(atPath: folder)
    }

    func testLargeFilesHashedOnTwoThreadsGiveTheSameDigestAsOnePass() throws {
        let data = seededData(9 * FileHashing.blockSize + 12_345, seed: 1)
        let path = folder + "/big.bin"
        try data.write(to: URL(fileURLWithPath: path))
        XCTAssertEqual(try FileHashing.digest(ofFile: path, length: UInt64(data.count)), SHA256Hasher.hash(data))
        // A prefix, as a resume hashes it.
        XCTAssertEqual(
            try FileHashing.digest(ofFile: path, length: UInt64(6 * FileHashing.blockSize)),
            SHA256Hasher.hash(data.prefix(6 * FileHashing.blockSize)))
        // A file that became shorter than announced is an error, not a digest of less.
        XCTAssertThrowsError(try FileHashing.digest(ofFile: path, length: UInt64(data.count + 1))) { error in
            XCTAssertTrue("\(error)".contains("shorter"), "\(error)")
        }
    }

    func testAPlanListsEveryFileOfATreeAndRefusesAnUnreadableOne() throws {
        var expected: [String: String] = [:]
        for i in 0..<40 {
            let data = seededData(i == 7 ? 5 * FileHashing.blockSize : 1_000 + i * 97, seed: UInt64(i))
            let relative = "tree/d\(i % 4)/f\(i).bin"
            try FileManager.default.createDirectory(
                atPath: folder + "/tree/d\(i % 4)", withIntermediateDirectories: true)
            try data.write(to: URL(fileURLWithPath: folder + "/" + relative))
            expected[relative] = "\(data.count)"
        }
        let plan = try TransferPlan.make(paths: [folder + "/tree"])
        let files = plan.manifest.entries.filter { $0.kind == .file }
        XCTAssertEqual(files.count, 40)
        for entry in files { XCTAssertEqual("\(entry.size)", expected[entry.path], entry.path) }
        // An unreadable file fails the plan with its name.
        let locked = folder + "/tree/d1/f1.bin"
        chmod(locked, 0)
        defer { chmod(locked, 0o644) }
        if getuid() == 0 { return }  // root reads it anyway
        XCTAssertThrowsError(try TransferPlan.make(paths: [folder + "/tree"])) { error in
            XCTAssertTrue("\(error)".contains("f1.bin"), "\(error)")
        }
    }

    func testNamesTheProtocolCannotCarryAreLeftOutOfAFolderNotTheWholeSend() throws {
        let tree = folder + "/named"
        try FileManager.default.createDirectory(atPath: tree + "/bad\u{1b}[2Jdir", withIntermediateDirectories: true)
        for name in [
            "ok.txt", "bad\nname.txt", "invoice\u{202E}fdp.exe", "bad\u{1b}[2Jdir/inside.txt",
            String(repeating: "n", count: 240) + ".txt",
        ] {
            XCTAssertTrue(FileManager.default.createFile(atPath: tree + "/" + name, contents: Data("x".utf8)), name)
        }
        let plan = try TransferPlan.make(paths: [tree])
        XCTAssertEqual(plan.manifest.entries.map(\.path), ["named", "named/ok.txt"])
        XCTAssertEqual(plan.skipped.count, 4, "\(plan.skipped)")
        XCTAssertEqual(
            plan.skipped.filter {
                $0.description.contains("not sent, its path contains NUL or another control character")
            }.count, 2, "\(plan.skipped)")
        XCTAssertTrue(
            plan.skipped.contains {
                $0.description.hasSuffix(
                    "not sent, its path contains a bidirectional control or invisible character, which can disguise a file's name"
                )
            }, "\(plan.skipped)")
        XCTAssertTrue(
            plan.skipped.contains { $0.description.contains("has a file name of 244 bytes; at most") },
            "\(plan.skipped)")
        // A name that is not UTF-8, beside one that reads the same once decoded: both cannot go
        // under one name; the listing's second is left out, never the whole send.
        let raw = Array((tree + "/n").utf8) + [0xff] + Array(".txt".utf8) + [0]
        let made = raw.withUnsafeBufferPointer {
            open(UnsafeRawPointer($0.baseAddress!).assumingMemoryBound(to: CChar.self), O_CREAT | O_WRONLY, 0o644)
        }
        XCTAssertGreaterThanOrEqual(made, 0)
        close(made)
        XCTAssertTrue(FileManager.default.createFile(atPath: tree + "/n\u{FFFD}.txt", contents: Data("y".utf8)))
        let mixed = try TransferPlan.make(paths: [tree])
        XCTAssertEqual(
            mixed.manifest.entries.filter { $0.path.hasPrefix("named/n") }.count, 1,
            "\(mixed.manifest.entries.map(\.path))")
        XCTAssertTrue(mixed.skipped.contains { $0.reason.contains("not valid UTF-8") }, "\(mixed.skipped)")
        // Two spellings of one name in one folder are one name at the receiver (NFC): the
        // listing's second is left out, naming the first.
        let twins = folder + "/twins"
        try FileManager.default.createDirectory(atPath: twins, withIntermediateDirectories: true)
        for name in ["caf\u{e9}.txt", "cafe\u{301}.txt"] {
            XCTAssertTrue(FileManager.default.createFile(atPath: twins + "/" + name, contents: Data("x".utf8)))
        }
        XCTAssertEqual(
            try FileManager.default.contentsOfDirectory(atPath: twins).count, 2, "two files to the file system")
        let spelt = try TransferPlan.make(paths: [twins])
        XCTAssertEqual(
            spelt.manifest.entries.count, 2, "the folder and one of the two: \(spelt.manifest.entries.map(\.path))")
        XCTAssertEqual(spelt.skipped.count, 1, "\(spelt.skipped)")
        let reason = spelt.skipped.first?.reason ?? ""
        // (Which of the two is left out depends on the listing's order.)
        XCTAssertTrue(reason.contains("is another spelling of"), reason)
        XCTAssertTrue(reason.contains("(with U+0065 U+0301)") && reason.contains("(with U+00E9)"), reason)
        // Named as an argument itself, such a path is still a usage error: nothing else was asked for.
        XCTAssertThrowsError(try TransferPlan.make(paths: [tree + "/bad\nname.txt"])) { error in
            XCTAssertEqual((error as? PeerTransferError)?.exitCode, 2, "\(error)")
        }
    }

    func testASinkWritesAndHashesLargeAndSmallFilesAlike() async throws {
        let inbox = try Inbox(path: folder + "/inbox")
        for (name, size) in [("small.bin", 100_000), ("large.bin", 6 * TransferLimits.chunkSize + 5)] {
            let data = seededData(size, seed: UInt64(size))
            let file = try inbox.openPart(try RelativePath(validating: name), for: "k")
            let sink = FileSink(
                file: file, continuing: SHA256Hasher(), size: UInt64(size), limit: 2 * TransferLimits.chunkSize)
            var offset = 0
            while offset < size {
                let piece = data[offset..<min(size, offset + TransferLimits.chunkSize)]
                try await sink.append(Data(piece), at: UInt64(offset))
                offset += piece.count
            }
            let digest = try await sink.finish()
            XCTAssertEqual(digest, SHA256Hasher.hash(data), name)
            try file.finishWriting(mode: 0o644, modified: 0)
            file.closeFiles()
            let written = try Data(
                contentsOf: URL(fileURLWithPath: folder + "/inbox/" + TransferLimits.partName(of: name, from: "k")))
            XCTAssertEqual(written, data, name)
        }
    }

    func testALargeFileIsFlushedWhileItIsWrittenAndFinishWaitsForTheFlush() async throws {
        let inbox = try Inbox(path: folder + "/inbox")
        let size = 9 * TransferLimits.chunkSize + 3
        let data = seededData(size, seed: 9)
        let file = try inbox.openPart(try RelativePath(validating: "flushed.bin"), for: "k")
        // A flush every two chunks: at least one must start and end before finish() returns.
        let sink = FileSink(
            file: file, continuing: SHA256Hasher(), size: UInt64(size),
            limit: 2 * TransferLimits.chunkSize, flushStep: 2 * TransferLimits.chunkSize)
        var offset = 0
        while offset < size {
            let piece = data[offset..<min(size, offset + TransferLimits.chunkSize)]
            try await sink.append(Data(piece), at: UInt64(offset))
            offset += piece.count
        }
        let digest = try await sink.finish()
        XCTAssertEqual(digest, SHA256Hasher.hash(data))
        XCTAssertGreaterThanOrEqual(sink.flushesDone, 1, "no flush ran while the file was written")
        XCTAssertLessThanOrEqual(sink.flushesDone, 4, "more flushes than steps written")
        try file.finishWriting(mode: 0o644, modified: 0)
        file.closeFiles()
        let written = try Data(
            contentsOf: URL(fileURLWithPath: folder + "/inbox/" + TransferLimits.partName(of: "flushed.bin", from: "k"))
        )
        XCTAssertEqual(written, data)
    }

    func testADiskThatFillsUnderTheSinksQueueFailsTheFileAsNoSpace() async throws {
        let inbox = folder + "/small-disk"
        try FileManager.default.createDirectory(atPath: inbox, withIntermediateDirectories: true)
        let mount = Process()
        mount.executableURL = URL(fileURLWithPath: "/bin/mount")
        mount.arguments = ["-t", "tmpfs", "-o", "size=6m", "tmpfs", inbox]
        try mount.run()
        mount.waitUntilExit()
        guard mount.terminationStatus == 0 else { throw XCTSkip("cannot mount a tmpfs here") }
        defer {
            let unmount = Process()
            unmount.executableURL = URL(fileURLWithPath: "/bin/umount")
            unmount.arguments = [inbox]
            try? unmount.run()
            unmount.waitUntilExit()
        }
        let file = try Inbox(path: inbox).openPart(try RelativePath(validating: "too-big.bin"), for: "k")
        defer { file.closeFiles() }
        let size = 12 * TransferLimits.chunkSize
        let sink = FileSink(file: file, continuing: SHA256Hasher(), size: UInt64(size))
        XCTAssertFalse(file.writesDirectly, "tmpfs is the page cache: no direct writes there")
        let chunk = seededData(TransferLimits.chunkSize, seed: 9)
        var failure: Error?
        do {
            for offset in stride(from: 0, to: size, by: chunk.count) {
                try await sink.append(chunk, at: UInt64(offset))
            }
            _ = try await sink.finish()
        } catch {
            failure = error
        }
        guard let failure = failure as? PeerTransferError else {
            return XCTFail("no error for a full disk: \(String(describing: failure))")
        }
        XCTAssertEqual(failure.wireCode, PeerTransferError.noSpace("").wireCode, "\(failure)")
        XCTAssertTrue(failure.message.contains("full"), failure.message)
    }

    func testJSONLinesParseBackToWhatWasPrinted() throws {
        let object: [String: Any] = [
            "event": "verified", "path": "a \"quoted\"\\ name\n\t\u{01}\u{7f} ünï 🎉", "size": UInt64(1) << 40,
            "count": -3, "ok": true, "no": false, "seconds": 1.25, "list": ["x", "y"], "nested": ["k": 1],
            "missing": Optional<String>.none as Any, "present": Optional("here") as Any, "nan": Double.nan,
        ]
        let line = JSONLine.object(object)
        XCTAssertFalse(line.contains("\n"))
        let parsed = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
        XCTAssertEqual(parsed["path"] as? String, object["path"] as? String)
        XCTAssertEqual((parsed["size"] as? NSNumber)?.uint64Value, UInt64(1) << 40)
        XCTAssertEqual(parsed["count"] as? Int, -3)
        XCTAssertEqual(parsed["ok"] as? Bool, true)
        XCTAssertEqual(parsed["no"] as? Bool, false)
        XCTAssertEqual(parsed["seconds"] as? Double, 1.25)
        XCTAssertEqual(parsed["list"] as? [String], ["x", "y"])
        XCTAssertEqual((parsed["nested"] as? [String: Any])?["k"] as? Int, 1)
        XCTAssertTrue(parsed["missing"] is NSNull)
        XCTAssertEqual(parsed["present"] as? String, "here")
        XCTAssertTrue(parsed["nan"] is NSNull)
        // Keys come sorted, as before.
        XCTAssertTrue(line.hasPrefix("{\"count\":-3,\"event\":"), line)
    }
}
