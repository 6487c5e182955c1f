import Foundation
@testable import PeerTransferCore
import SalutTestSupport
import XCTest

/// Two real `peerxfer` daemons and senders on loopback, against the real avahi-daemon: what a
/// user sees in the inbox and in the exit status.
final class PeerXferTransferTests: XCTestCase {
    private let chunk = 1 << 20

    /// JSON lines of a sender's output, by event.
    private func events(_ output: String, _ name: String) -> [[String: Any]] {
        output.split(separator: "\n").compactMap {
            guard let object = try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] else {
                return nil
            }
            return object["event"] as? String == name ? object : nil
        }
    }

    private func done(_ output: String) -> [String: Any] { events(output, "done").last ?? [:] }

    /// Polls `part` until it holds `bytes` (30 s at most); the size last seen.
    private func waitForPart(_ part: String, toHold bytes: UInt64) -> UInt64 {
        var seen: UInt64 = 0
        eventually(timeout: 30, interval: 0.005) {
            seen = (try? FileManager.default.attributesOfItem(atPath: part))?[.size] as? UInt64 ?? 0
            return seen >= bytes
        }
        return seen
    }

    func testATreeArrivesVerifiedWithEmptyFoldersUnicodeNamesModesAndTimes() throws {
        let lab = try PeerXferLab()
        let name = PeerXferLab.uniqueName("Tree")
        try lab.serve(name: name, config: "receiver", inbox: lab.path("inbox"))
        try lab.makeFile("src/tree/ünï cödé/файл.bin", size: 3 * chunk + 17)
        try lab.makeFile("src/tree/small.txt", size: 5)
        try lab.makeFile("src/tree/zero", size: 0)
        chmod(lab.path("src/tree/zero"), 0o755)  // a script, say: it arrives not executable
        try FileManager.default.createDirectory(
            atPath: lab.path("src/tree/empty/nested"), withIntermediateDirectories: true)
        chmod(lab.path("src/tree/small.txt"), 0o640)
        var times = [timespec(tv_sec: 1_600_000_000, tv_nsec: 0), timespec(tv_sec: 1_600_000_000, tv_nsec: 0)]
        XCTAssertEqual(utimensat(AT_FDCWD, lab.path("src/tree/small.txt"), &times, 0), 0)
        let (status, output) = try lab.send([lab.path("src/tree")], to: name, config: "sender")
        XCTAssertEqual(status, 0, output)
        XCTAssertEqual(done(output)["verified"] as? Int, 3, output)
        // Seven entries: three files and four folders (tree, ünï cödé, empty, nested).
        let answered = events(output, "answered").first ?? [:]
        XCTAssertEqual(answered["accepted"] as? Int, 7, output)
        XCTAssertEqual(answered["acceptedFiles"] as? Int, 3, output)
        XCTAssertEqual(PeerXferLab.listing(lab.path("inbox/tree")), PeerXferLab.listing(lab.path("src/tree")))
        for file in ["ünï cödé/файл.bin", "small.txt", "zero"] {
            XCTAssertTrue(PeerXferLab.sameContents(lab.path("src/tree/\(file)"), lab.path("inbox/tree/\(file)")), file)
        }
        let attributes = try FileManager.default.attributesOfItem(atPath: lab.path("inbox/tree/small.txt"))
        XCTAssertEqual(attributes[.posixPermissions] as? Int, 0o640)
        // Execute bits are cleared unless the receiver keeps them (`serve --keep-execute-bits`).
        let zero = try FileManager.default.attributesOfItem(atPath: lab.path("inbox/tree/zero"))
        XCTAssertEqual((zero[.posixPermissions] as? Int).map { $0 & 0o111 }, 0, "\(zero)")
        XCTAssertEqual((attributes[.modificationDate] as? Date)?.timeIntervalSince1970, 1_600_000_000)
        XCTAssertFalse(PeerXferLab.listing(lab.path("inbox")).contains { $0.hasSuffix(".peerxfer-part") })

        // The same command again sends nothing; a different file under a taken name gets a number.
        let (again, againOutput) = try lab.send([lab.path("src/tree")], to: name, config: "sender")
        XCTAssertEqual(again, 0, againOutput)
        XCTAssertEqual(done(againOutput)["bytesSent"] as? Int, 0, againOutput)
        try lab.makeFile("other/small.txt", size: 9, seed: 7)
        try FileManager.default.createDirectory(atPath: lab.path("other/tree"), withIntermediateDirectories: true)
        try FileManager.default.moveItem(atPath: lab.path("other/small.txt"), toPath: lab.path("other/tree/small.txt"))
        let (renamed, renamedOutput) = try lab.send([lab.path("other/tree")], to: name, config: "sender")
        XCTAssertEqual(renamed, 0, renamedOutput)
        XCTAssertEqual(
            events(renamedOutput, "verified").first?["storedAs"] as? String, "tree/small (1).txt", renamedOutput)
        XCTAssertTrue(
            PeerXferLab.sameContents(lab.path("src/tree/small.txt"), lab.path("inbox/tree/small.txt")),
            "the first file must not be overwritten")
        // Same name, same size, other bytes: the receiver's digest of its file does not match
        // the sender's, so the file is sent and lands under the next number.
        try FileManager.default.createDirectory(atPath: lab.path("third/tree"), withIntermediateDirectories: true)
        try Data([1, 2, 3, 4, 5]).write(to: URL(fileURLWithPath: lab.path("third/tree/small.txt")))
        // A name the protocol cannot carry is left out, said, and counted; the rest goes.
        try Data([9]).write(to: URL(fileURLWithPath: lab.path("third/tree/bad\nname.txt")))
        let (third, thirdOutput) = try lab.send([lab.path("third/tree")], to: name, config: "sender")
        XCTAssertEqual(third, 0, thirdOutput)
        XCTAssertEqual(done(thirdOutput)["bytesSent"] as? Int, 5, thirdOutput)
        XCTAssertEqual(done(thirdOutput)["skipped"] as? Int, 1, thirdOutput)
        let skipped = events(thirdOutput, "skipped").first ?? [:]
        XCTAssertEqual(skipped["path"] as? String, lab.path("third/tree/bad\\x0aname.txt"), thirdOutput)
        XCTAssertEqual(
            skipped["reason"] as? String, "not sent, its path contains NUL or another control character", thirdOutput)
        XCTAssertEqual(events(thirdOutput, "verified").first?["storedAs"] as? String, "tree/small (2).txt", thirdOutput)
        XCTAssertTrue(PeerXferLab.sameContents(lab.path("third/tree/small.txt"), lab.path("inbox/tree/small (2).txt")))
        // Another sender (another key) is not told the digests of files it did not deliver:
        // the same tree from it is sent whole and lands under new names.
        let (stranger, strangerOutput) = try lab.send([lab.path("src/tree")], to: name, config: "stranger")
        XCTAssertEqual(stranger, 0, strangerOutput)
        XCTAssertEqual(done(strangerOutput)["bytesSent"] as? Int, 3 * chunk + 17 + 5, strangerOutput)
        XCTAssertTrue(
            PeerXferLab.sameContents(
                lab.path("src/tree/ünï cödé/файл.bin"), lab.path("inbox/tree/ünï cödé/файл (1).bin")))
    }

    /// More files than one batch holds: they are named batch by batch while the next arrive,
    /// and every file's result reaches the sender before the summary.
    func testATreeOfManyBatchesArrivesWholeWithEveryResultBeforeTheEnd() throws {
        let lab = try PeerXferLab()
        let name = PeerXferLab.uniqueName("Batches")
        try lab.serve(name: name, config: "receiver", inbox: lab.path("inbox"))
        let count = 2 * 256 + 37  // a batch holds at most 256 files
        for index in 0..<count {
            try lab.makeFile("src/many/d\(index % 3)/f\(index).txt", size: 1 + index % 700, seed: UInt64(index))
        }
        let (status, output) = try lab.send([lab.path("src/many")], to: name, config: "sender")
        XCTAssertEqual(status, 0, output)
        XCTAssertEqual(done(output)["verified"] as? Int, count, output)
        XCTAssertEqual(Set(events(output, "verified").compactMap { $0["path"] as? String }).count, count)
        XCTAssertEqual(PeerXferLab.listing(lab.path("inbox/many")), PeerXferLab.listing(lab.path("src/many")))
        for index in stride(from: 0, to: count, by: 97) {
            XCTAssertTrue(
                PeerXferLab.sameContents(
                    lab.path("src/many/d\(index % 3)/f\(index).txt"),
                    lab.path("inbox/many/d\(index % 3)/f\(index).txt")), "f\(index)")
        }
        XCTAssertFalse(PeerXferLab.listing(lab.path("inbox")).contains { $0.hasSuffix(".peerxfer-part") })
    }

    func testResumeAfterTheSenderIsKilledSendsOnlyWhatIsMissing() throws {
        let lab = try PeerXferLab()
        let name = PeerXferLab.uniqueName("Resume")
        let receiver = try lab.serve(name: name, config: "receiver", inbox: lab.path("inbox"))
        let size = 256 * chunk + 123
        try lab.makeFile("src/big.bin", size: size)
        let part = try lab.partPath("inbox/big.bin", sentWith: "sender")
        let sender = try Foreign([
            PeerXferLab.binary, "send", "--accept-new-key", lab.path("src/big.bin"), "--to", name,
            "--config", lab.path("sender"), "--json",
        ])
        // Kill it once the receiver holds a few chunks (and long before the end).
        let seen = waitForPart(part, toHold: UInt64(4 * chunk))
        kill(sender.process.processIdentifier, SIGKILL)
        XCTAssertTrue(sender.waitForExit(seconds: 10))
        XCTAssertGreaterThanOrEqual(seen, UInt64(4 * chunk), "the part file never grew: \(sender.output)")
        XCTAssertFalse(
            FileManager.default.fileExists(atPath: lab.path("inbox/big.bin")), "killed too late: the file was complete")
        // The receiver writes what was on its way before it sees the connection end: the part
        // file is measured once it has said so.
        XCTAssertTrue(receiver.waitForOutput(containing: "without a word", seconds: 20), receiver.output)
        let left = (try FileManager.default.attributesOfItem(atPath: part))[.size] as? UInt64 ?? 0

        // Meanwhile another sender sends a file of the same name: it is told nothing of the
        // part file, sends all of its own, and leaves the part file to the first sender.
        try lab.makeFile("other/big.bin", size: 3 * chunk + 1, seed: 5)
        let (otherStatus, otherOutput) = try lab.send([lab.path("other/big.bin")], to: name, config: "other-sender")
        XCTAssertEqual(otherStatus, 0, otherOutput)
        XCTAssertEqual(done(otherOutput)["bytesSkipped"] as? Int, 0, otherOutput)
        XCTAssertTrue(PeerXferLab.sameContents(lab.path("other/big.bin"), lab.path("inbox/big.bin")))
        XCTAssertEqual(
            (try FileManager.default.attributesOfItem(atPath: part))[.size] as? UInt64, left,
            "another sender's transfer touched the part file")

        let (status, output) = try lab.send([lab.path("src/big.bin")], to: name, config: "sender")
        XCTAssertEqual(status, 0, output)
        let report = done(output)
        let sent = report["bytesSent"] as? Int ?? -1, skipped = report["bytesSkipped"] as? Int ?? -1
        XCTAssertEqual(sent + skipped, size, output)
        XCTAssertGreaterThanOrEqual(
            skipped, Int(seen) / chunk * chunk, "resumed before what the receiver had: \(output)")
        XCTAssertTrue(PeerXferLab.sameContents(lab.path("src/big.bin"), lab.path("inbox/big (1).bin")))
    }

    func testCtrlCSaysHowToResumeAndEndsBySIGINT() throws {
        let lab = try PeerXferLab()
        let name = PeerXferLab.uniqueName("CtrlC")
        let daemon = try lab.serve(name: name, config: "receiver", inbox: lab.path("inbox"))
        let size = 256 * chunk
        try lab.makeFile("src/big.bin", size: size, seed: 9)
        let part = try lab.partPath("inbox/big.bin", sentWith: "sender")
        let sender = try Foreign([
            PeerXferLab.binary, "send", "--accept-new-key", lab.path("src/big.bin"), "--to", name,
            "--config", lab.path("sender"), "--json",
        ])
        let seen = waitForPart(part, toHold: UInt64(4 * chunk))
        kill(sender.process.processIdentifier, SIGINT)
        XCTAssertGreaterThanOrEqual(seen, UInt64(4 * chunk), "the part file never grew: \(sender.output)")
        XCTAssertTrue(sender.waitForExit(seconds: 10), sender.output)
        XCTAssertFalse(
            FileManager.default.fileExists(atPath: lab.path("inbox/big.bin")),
            "interrupted too late: the file was complete")
        // Ended by the signal itself (a shell shows 130 and stops a loop it runs), not by exit.
        XCTAssertEqual(sender.process.endingSignal, SIGINT, sender.output)
        XCTAssertTrue(sender.output.contains("\"event\":\"interrupted\""), sender.output)
        XCTAssertTrue(sender.output.contains("\"signal\":\"SIGINT\""), sender.output)
        // The receiver was told before the sender ended, and keeps what it has.
        XCTAssertTrue(sender.output.contains("\"receiverTold\":true"), sender.output)
        XCTAssertTrue(
            sender.output.contains(
                "peerxfer: interrupted; the receiver was told and keeps what it received: run the same command again"),
            "the hint is on standard error in JSON mode too: \(sender.output)")
        // The receiver's log says the sender stopped and the transfer can go on (no TLS detail).
        XCTAssertTrue(
            daemon.waitForOutput(containing: "what came is kept in part files, and the same send resumes", seconds: 10),
            daemon.output)
        XCTAssertTrue(daemon.output.contains("the sender stopped the send"), daemon.output)
        XCTAssertFalse(daemon.output.contains("close_notify"), daemon.output)

        // Again, on a terminal (script(1)'s pseudo-terminal): it says that it resumes, and how much
        // it does not send again.
        let command = [
            PeerXferLab.binary, "send", "--accept-new-key", lab.path("src/big.bin"), "--to", name, "--config",
            lab.path("sender"),
        ]
        .map { "'\($0)'" }.joined(separator: " ")
        let terminal = try Foreign(["/usr/bin/script", "-qec", command, "/dev/null"])
        XCTAssertTrue(terminal.waitForExit(seconds: 60), terminal.output)
        XCTAssertEqual(terminal.process.terminationStatus, 0, terminal.output)
        XCTAssertTrue(terminal.output.contains("accepted 1 file;"), terminal.output)
        XCTAssertTrue(terminal.output.contains("resuming big.bin after its first "), terminal.output)
        XCTAssertTrue(terminal.output.contains("done: 1 file verified"), terminal.output)
        XCTAssertTrue(terminal.output.contains("not needed again"), "the second run resumed: \(terminal.output)")
        XCTAssertTrue(PeerXferLab.sameContents(lab.path("src/big.bin"), lab.path("inbox/big.bin")))
    }

    func testSIGTERMOnATerminalTakesTheProgressLineAwayAndEndsTheSend() throws {
        let lab = try PeerXferLab()
        let name = PeerXferLab.uniqueName("Term")
        try lab.serve(name: name, config: "receiver", inbox: lab.path("inbox"))
        try lab.makeFile("src/term.bin", size: 256 * chunk, seed: 4)
        let part = try lab.partPath("inbox/term.bin", sentWith: "sender")
        let command = [
            PeerXferLab.binary, "send", lab.path("src/term.bin"), "--to", name, "--config", lab.path("sender"),
            "--accept-new-key",
        ]
        .map { "'\($0)'" }.joined(separator: " ")
        let terminal = try Foreign(["/usr/bin/script", "-qec", command, "/dev/null"])
        let seen = waitForPart(part, toHold: UInt64(4 * chunk))
        XCTAssertGreaterThanOrEqual(seen, UInt64(4 * chunk), "the part file never grew: \(terminal.output)")
        let pids = try Foreign(["pgrep", "-f", "send \(lab.path("src/term.bin"))"]).finish(seconds: 10)
        let senders = pids.split(whereSeparator: \.isNewline).compactMap { pid_t($0) }
        XCTAssertFalse(senders.isEmpty, "no sender process found")
        for pid in senders { kill(pid, SIGTERM) }
        XCTAssertTrue(terminal.waitForExit(seconds: 10), terminal.output)
        XCTAssertFalse(
            FileManager.default.fileExists(atPath: lab.path("inbox/term.bin")),
            "stopped too late: the file was complete")
        XCTAssertEqual(
            terminal.process.terminationStatus, 143,
            "script(1) says 128 + the signal that ended its command: \(terminal.output)")
        // The progress line is erased first, so the message starts a clean line: right after the
        // erase, or after a line of its own. Said once: the send's own "stopped" error is left
        // to the signal's message.
        XCTAssertFalse(
            terminal.output.contains("the same send resumes from there"),
            "the stop is said twice: \(terminal.output.debugDescription)")
        let message =
            "peerxfer: stopped by SIGTERM; the receiver was told and keeps what it received: run the same command again"
        let before = terminal.output.range(of: message).map { terminal.output[..<$0.lowerBound] }
        XCTAssertNotNil(before, terminal.output.debugDescription)
        XCTAssertTrue(
            before.map { $0.hasSuffix("\u{1b}[K") || $0.unicodeScalars.last == "\n" } ?? false,
            "the message starts a clean line: \(terminal.output.debugDescription)")
    }

    func testASendRightAfterTheReceiverRestartsReachesItsNewPort() throws {
        let lab = try PeerXferLab()
        let name = PeerXferLab.uniqueName("Restart")
        let first = try lab.serve(name: name, config: "receiver", inbox: lab.path("inbox"))
        try lab.makeFile("src/a.txt", size: 1000)
        XCTAssertEqual(try lab.send([lab.path("src/a.txt")], to: name, config: "sender").status, 0)
        // Stopped, and a send started at once: for about a second the old daemon's record (its
        // port) is still answered, and that port refuses. The daemon comes back meanwhile, on
        // another port; the send must reach it there.
        kill(first.process.processIdentifier, SIGINT)
        XCTAssertTrue(first.waitForExit(seconds: 10))
        try lab.makeFile("src/b.txt", size: 1000)
        let sender = try Foreign([
            PeerXferLab.binary, "send", "--accept-new-key", lab.path("src/b.txt"), "--to", name,
            "--config", lab.path("sender"), "--json",
        ])
        try lab.serve(name: name, config: "receiver", inbox: lab.path("inbox"))
        XCTAssertTrue(sender.waitForExit(seconds: 30), sender.output)
        XCTAssertEqual(sender.process.terminationStatus, 0, "the send reaches the restarted receiver: \(sender.output)")
        XCTAssertTrue(PeerXferLab.sameContents(lab.path("src/b.txt"), lab.path("inbox/b.txt")))
    }

    func testResumeAfterTheReceiverIsKilled() throws {
        let lab = try PeerXferLab()
        let name = PeerXferLab.uniqueName("Crash")
        let daemon = try lab.serve(name: name, config: "receiver", inbox: lab.path("inbox"))
        let size = 256 * chunk
        try lab.makeFile("src/big.bin", size: size, seed: 3)
        let part = try lab.partPath("inbox/big.bin", sentWith: "sender")
        let sender = try Foreign([
            PeerXferLab.binary, "send", "--accept-new-key", lab.path("src/big.bin"), "--to", name,
            "--config", lab.path("sender"), "--json",
        ])
        _ = waitForPart(part, toHold: UInt64(4 * chunk))
        kill(daemon.process.processIdentifier, SIGKILL)
        XCTAssertTrue(sender.waitForExit(seconds: 90), "the sender must notice the receiver is gone")
        XCTAssertNotEqual(sender.process.terminationStatus, 0, sender.output)
        XCTAssertFalse(FileManager.default.fileExists(atPath: lab.path("inbox/big.bin")))

        try lab.serve(name: name, config: "receiver", inbox: lab.path("inbox"))
        let (status, output) = try lab.send([lab.path("src/big.bin")], to: name, config: "sender")
        XCTAssertEqual(status, 0, output)
        XCTAssertGreaterThan(done(output)["bytesSkipped"] as? Int ?? 0, 0, output)
        XCTAssertTrue(PeerXferLab.sameContents(lab.path("src/big.bin"), lab.path("inbox/big.bin")))
    }

    func testACorruptedPartFileIsDetectedAndRepaired() throws {
        let lab = try PeerXferLab()
        let name = PeerXferLab.uniqueName("Repair")
        try lab.serve(name: name, config: "receiver", inbox: lab.path("inbox"))
        try lab.makeFile("src/data.bin", size: 4 * chunk + 5, seed: 9)
        // What an interrupted transfer left, with one byte of its second chunk gone bad on disk.
        var partial = FileManager.default.contents(atPath: lab.path("src/data.bin"))!.prefix(3 * chunk)
        partial[chunk + chunk / 2] ^= 0xff
        try FileManager.default.createDirectory(atPath: lab.path("inbox"), withIntermediateDirectories: true)
        try Data(partial).write(to: URL(fileURLWithPath: try lab.partPath("inbox/data.bin", sentWith: "sender")))
        let (status, output) = try lab.send([lab.path("src/data.bin")], to: name, config: "sender")
        XCTAssertEqual(status, 0, output)
        XCTAssertEqual(done(output)["bytesSkipped"] as? Int, chunk, "only the first chunk verifies: \(output)")
        XCTAssertEqual(done(output)["bytesSent"] as? Int, 3 * chunk + 5, output)
        XCTAssertTrue(PeerXferLab.sameContents(lab.path("src/data.bin"), lab.path("inbox/data.bin")))
    }

    func testASmallFilesOldPartFileIsReplacedAndGoneOnceTheFileArrives() throws {
        let lab = try PeerXferLab()
        let name = PeerXferLab.uniqueName("OldPart")
        try lab.serve(name: name, config: "receiver", inbox: lab.path("inbox"))
        try lab.makeFile("src/note.txt", size: 3000, seed: 5)
        // What an earlier try left (longer than the file is now, and none of it right).
        try FileManager.default.createDirectory(atPath: lab.path("inbox"), withIntermediateDirectories: true)
        let part = try lab.partPath("inbox/note.txt", sentWith: "sender")
        try Data(repeating: 0x5a, count: 5000).write(to: URL(fileURLWithPath: part))
        let (status, output) = try lab.send([lab.path("src/note.txt")], to: name, config: "sender")
        XCTAssertEqual(status, 0, output)
        XCTAssertTrue(PeerXferLab.sameContents(lab.path("src/note.txt"), lab.path("inbox/note.txt")), output)
        XCTAssertFalse(FileManager.default.fileExists(atPath: part), "the old part file is gone")
        XCTAssertEqual(PeerXferLab.listing(lab.path("inbox")), ["note.txt"])
    }

    func testSomethingPlantedWherePartFileGoesFailsThatFileAloneAndTheRestArrive() throws {
        let lab = try PeerXferLab()
        let name = PeerXferLab.uniqueName("Planted")
        try lab.serve(name: name, config: "receiver", inbox: lab.path("inbox"))
        try lab.makeFile("src/t/a.txt", size: 100)
        // Larger than a chunk: written to its part file as it comes.
        try lab.makeFile("src/t/bad.bin", size: chunk + 1, seed: 2)
        // A chunk or less: kept in memory and written without a part file, so nothing planted
        // at its part name stands in its way (and the FIFO is left alone).
        try lab.makeFile("src/t/small.txt", size: 100, seed: 4)
        try lab.makeFile("src/t/z.txt", size: 100, seed: 3)
        try FileManager.default.createDirectory(atPath: lab.path("inbox/t"), withIntermediateDirectories: true)
        XCTAssertEqual(mkfifo(try lab.partPath("inbox/t/bad.bin", sentWith: "sender"), 0o644), 0)
        XCTAssertEqual(mkfifo(try lab.partPath("inbox/t/small.txt", sentWith: "sender"), 0o644), 0)
        let (status, output) = try lab.send([lab.path("src/t")], to: name, config: "sender")
        XCTAssertEqual(status, 1, "one file failed: \(output)")
        XCTAssertEqual(done(output)["failed"] as? Int, 1, output)
        XCTAssertTrue(output.contains("bad.bin") && output.contains("FIFO"), output)
        XCTAssertTrue(PeerXferLab.sameContents(lab.path("src/t/a.txt"), lab.path("inbox/t/a.txt")), output)
        XCTAssertTrue(PeerXferLab.sameContents(lab.path("src/t/small.txt"), lab.path("inbox/t/small.txt")), output)
        XCTAssertTrue(PeerXferLab.sameContents(lab.path("src/t/z.txt"), lab.path("inbox/t/z.txt")), output)
        XCTAssertFalse(FileManager.default.fileExists(atPath: lab.path("inbox/t/bad.bin")))
        var info = stat()
        XCTAssertEqual(lstat(try lab.partPath("inbox/t/small.txt", sentWith: "sender"), &info), 0)
        XCTAssertEqual(info.st_mode & S_IFMT, S_IFIFO, "the planted FIFO is not touched")
    }

    func testASymlinkPlantedWhereAFolderGoesFailsTheFilesBelowItAlone() throws {
        let lab = try PeerXferLab()
        let name = PeerXferLab.uniqueName("PlantedFolder")
        try lab.serve(name: name, config: "receiver", inbox: lab.path("inbox"))
        try lab.makeFile("src/t/a.txt", size: 100)
        try lab.makeFile("src/t/sub/b.txt", size: 100, seed: 2)
        // Larger than a chunk: written as it comes (the small one is written with its batch).
        try lab.makeFile("src/t/sub/c.bin", size: chunk + 1, seed: 3)
        try FileManager.default.createDirectory(atPath: lab.path("inbox/t"), withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: lab.path("outside"), withIntermediateDirectories: true)
        try FileManager.default.createSymbolicLink(
            atPath: lab.path("inbox/t/sub"), withDestinationPath: lab.path("outside"))
        let (status, output) = try lab.send([lab.path("src/t")], to: name, config: "sender")
        XCTAssertEqual(status, 1, "two files failed: \(output)")
        XCTAssertEqual(done(output)["failed"] as? Int, 2, output)
        XCTAssertTrue(
            output.contains("sub/b.txt") && output.contains("sub/c.bin") && output.contains("symlink"), output)
        XCTAssertTrue(PeerXferLab.sameContents(lab.path("src/t/a.txt"), lab.path("inbox/t/a.txt")), output)
        XCTAssertEqual(PeerXferLab.listing(lab.path("outside")), [], "nothing written through the symlink")
    }

    func testEachWayAnOfferIsNotTakenHasItsOwnWordsAndExitCode() throws {
        let lab = try PeerXferLab()
        let declining = PeerXferLab.uniqueName("Declines")
        try lab.serve(
            name: declining, config: "r1", inbox: lab.path("inbox1"), accept: "ask",
            extra: ["--hook", "cat >/dev/null; exit 1"])
        try lab.makeFile("src/keep.txt", size: 10)
        try lab.makeFile("src/skip.txt", size: 10, seed: 2)
        let (status, output) = try lab.send(
            [lab.path("src/keep.txt"), lab.path("src/skip.txt")], to: declining, config: "sender")
        XCTAssertEqual(status, 9, output)
        XCTAssertTrue(output.contains("the receiver says: declined by the receiver's accept hook"), output)
        XCTAssertEqual(PeerXferLab.listing(lab.path("inbox1")), [])
        // With no terminal and no hook, nobody was asked: said so, not "declined by a person".
        let nobody = PeerXferLab.uniqueName("Nobody asks")
        try lab.serve(name: nobody, config: "r3", inbox: lab.path("inbox3"), accept: "ask")
        let (unasked, unaskedOutput) = try lab.send([lab.path("src/keep.txt")], to: nobody, config: "sender")
        XCTAssertEqual(unasked, 8, unaskedOutput)
        XCTAssertTrue(
            unaskedOutput.contains(
                "no one to ask: the receiver runs --accept ask with no terminal and no --hook"),
            unaskedOutput)
        XCTAssertFalse(unaskedOutput.contains("declined"), unaskedOutput)

        let choosy = PeerXferLab.uniqueName("Choosy")
        try lab.serve(
            name: choosy, config: "r2", inbox: lab.path("inbox2"), accept: "ask", extra: ["--hook", "grep keep"])
        let (partly, partlyOutput) = try lab.send(
            [lab.path("src/keep.txt"), lab.path("src/skip.txt")], to: choosy, config: "sender")
        XCTAssertEqual(partly, 9, partlyOutput)
        XCTAssertEqual(PeerXferLab.listing(lab.path("inbox2")), ["keep.txt"])
        XCTAssertTrue(
            partlyOutput.contains("declined 1 of 2 entries: skip.txt\""), "the declined entry is named: \(partlyOutput)"
        )
    }

    func testAskOnATerminalListsWhatIsOfferedAndTakesTheAnswer() throws {
        let lab = try PeerXferLab()
        let name = PeerXferLab.uniqueName("Asks")
        // The daemon on a terminal (script(1)'s pseudo-terminal), its answers typed through it.
        let command = [
            PeerXferLab.binary, "serve", "--name", name, "--config", lab.path("receiver"),
            "--inbox", lab.path("inbox"), "--accept", "ask",
        ].map { "'\($0)'" }.joined(separator: " ")
        let daemon = try Foreign(["/usr/bin/script", "-qec", command, "/dev/null"])
        defer { daemon.stop() }
        XCTAssertTrue(daemon.waitForOutput(containing: "serving", seconds: 20), daemon.output)
        try lab.makeFile("src/t/a.txt", size: 10)
        try lab.makeFile("src/t/sub/b.txt", size: 20, seed: 2)
        let sender = try Foreign([
            PeerXferLab.binary, "send", "--accept-new-key", lab.path("src/t"), "--to", name,
            "--config", lab.path("sender"), "--json",
        ])
        XCTAssertTrue(daemon.waitForOutput(containing: "Accept? [y/N/a/p]", seconds: 20), daemon.output)
        // Before the question: who offers, how much, and what, by name (folders end in /).
        XCTAssertTrue(daemon.output.contains("offers 2 files ("), daemon.output)
        // The verdict and the key before the name the sender claims, and the code both show.
        let code = VerificationCode.between(try lab.key(ofConfig: "sender"), try lab.key(ofConfig: "receiver"))
        XCTAssertTrue(
            daemon.output.contains("unknown sender [key ")
                && daemon.output.contains(", code \(code)], calling itself \""),
            daemon.output)
        for entry in ["  t/\r\n", "  t/a.txt\r\n", "  t/sub/\r\n", "  t/sub/b.txt\r\n"] {
            XCTAssertTrue(
                daemon.output.contains(entry), "\(entry.debugDescription) not listed: \(daemon.output.debugDescription)"
            )
        }
        // "a": accept, and trust the sender's key from now on (as `peerxfer trust KEY`).
        XCTAssertTrue(daemon.output.contains("(a: accept, and always trust the key "), daemon.output)
        // An answer that is none of the choices is asked again, not taken as a no.
        daemon.write("maybe\n")
        XCTAssertTrue(
            daemon.waitForOutput(
                containing: "Please answer y (yes), n (no), a (always) or p (pick files)", seconds: 20),
            daemon.output)
        daemon.write("a\n")
        XCTAssertTrue(sender.waitForExit(seconds: 30), sender.output)
        XCTAssertEqual(sender.process.terminationStatus, 0, sender.output)
        XCTAssertTrue(PeerXferLab.sameContents(lab.path("src/t/sub/b.txt"), lab.path("inbox/t/sub/b.txt")))
        let trusted = try KnownPeers.load(from: lab.path("receiver/known-peers.json")).trusted
        XCTAssertNotNil(trusted[try lab.key(ofConfig: "sender")], "\(trusted)")

        // "p" picks: the entries are numbered, and only those named are accepted.
        try lab.makeFile("src/x.txt", size: 10)
        try lab.makeFile("src/y.txt", size: 10, seed: 2)
        let picky = try Foreign([
            PeerXferLab.binary, "send", lab.path("src/x.txt"), lab.path("src/y.txt"), "--to", name,
            "--config", lab.path("sender"), "--json",
        ])
        defer { picky.stop() }
        XCTAssertTrue(
            daemon.waitForOutput(containing: "y.txt\r\n  (p: pick which to accept)\r\nAccept? [y/N/p]", seconds: 20),
            daemon.output)
        daemon.write("p\n")
        XCTAssertTrue(daemon.waitForOutput(containing: "  2. y.txt", seconds: 20), daemon.output)
        daemon.write("7\n")
        XCTAssertTrue(daemon.waitForOutput(containing: "Numbers from 1 to 2", seconds: 20), daemon.output)
        daemon.write("2\n")
        XCTAssertTrue(picky.waitForExit(seconds: 30), picky.output)
        XCTAssertEqual(picky.process.terminationStatus, 5, "part declined by the person: \(picky.output)")
        XCTAssertTrue(picky.output.contains("the receiver declined 1 of 2 entries: x.txt"), picky.output)
        XCTAssertTrue(FileManager.default.fileExists(atPath: lab.path("inbox/y.txt")))
        XCTAssertFalse(FileManager.default.fileExists(atPath: lab.path("inbox/x.txt")))

        // A sender that leaves while its question is open withdraws it: the next offer is
        // asked at once, not after a person answers in vain or the question's 120 s.
        try lab.makeFile("src/gone.txt", size: 10)
        let gone = try Foreign([
            PeerXferLab.binary, "send", "--accept-new-key", lab.path("src/gone.txt"), "--to", name,
            "--config", lab.path("sender"), "--json",
        ])
        defer { gone.stop() }
        XCTAssertTrue(daemon.waitForOutput(containing: "gone.txt", seconds: 20), daemon.output)
        XCTAssertEqual(kill(gone.process.processIdentifier, SIGKILL), 0)
        XCTAssertTrue(daemon.waitForOutput(containing: "(withdrawn: the offer from ", seconds: 20), daemon.output)
        XCTAssertTrue(
            daemon.waitForOutput(containing: "the sender left before its offer was answered", seconds: 20),
            daemon.output)

        // A question nobody answers does not hold the daemon up: SIGTERM declines the offer and
        // stops it at once, not after the question's 120 s.
        try lab.makeFile("src/later.txt", size: 10)
        let second = try Foreign([
            PeerXferLab.binary, "send", "--accept-new-key", lab.path("src/later.txt"), "--to", name,
            "--config", lab.path("sender"), "--json",
        ])
        defer { second.stop() }
        XCTAssertTrue(daemon.waitForOutput(containing: "later.txt", seconds: 20), daemon.output)
        let pids = try Foreign(["pgrep", "-f", "serve --name \(name)"]).finish(seconds: 10)
        let servers = pids.split(whereSeparator: \.isNewline).compactMap { pid_t($0) }
        XCTAssertFalse(servers.isEmpty, "no daemon process found")
        for pid in servers { kill(pid, SIGTERM) }
        XCTAssertTrue(daemon.waitForExit(seconds: 15), "the daemon waited for the answer: \(daemon.output)")
        XCTAssertTrue(second.waitForExit(seconds: 30), second.output)
        XCTAssertNotEqual(second.process.terminationStatus, 0, second.output)
    }

    func testAHookThatLeavesAChildRunningDecidesAtOnceAndTheChildIsEnded() throws {
        let lab = try PeerXferLab()
        let name = PeerXferLab.uniqueName("Hooked")
        let marker = lab.path("child.pid")
        // The hook accepts, leaving behind a child that holds its output open for 300 s.
        try lab.serve(
            name: name, config: "receiver", inbox: lab.path("inbox"), accept: "ask",
            extra: ["--hook", "sleep 300 & echo $! > \(marker); exit 0"])
        try lab.makeFile("src/a.txt", size: 100)
        let started = Date()
        let (status, output) = try lab.send([lab.path("src/a.txt")], to: name, config: "sender")
        XCTAssertEqual(status, 0, output)
        XCTAssertLessThan(Date().timeIntervalSince(started), 60, "decided when the hook exited, not when its child did")
        XCTAssertTrue(PeerXferLab.sameContents(lab.path("src/a.txt"), lab.path("inbox/a.txt")), output)
        let child = try XCTUnwrap(
            Int32((try String(contentsOfFile: marker, encoding: .utf8)).trimmingCharacters(in: .whitespacesAndNewlines))
        )
        XCTAssertTrue(
            eventually(timeout: 10, interval: 0.02) { kill(child, 0) != 0 },
            "the hook's leftover child was ended with its process group")
    }

    func testAHookDecidingAnOfferWhoseSenderLeftIsEnded() throws {
        let lab = try PeerXferLab()
        let name = PeerXferLab.uniqueName("SlowHook")
        let marker = lab.path("hook.pid")
        // A hook that would take 100 s to decide.
        let daemon = try lab.serve(
            name: name, config: "receiver", inbox: lab.path("inbox"), accept: "ask",
            extra: ["--hook", "echo $$ > \(marker); sleep 100"])
        try lab.makeFile("src/a.txt", size: 10)
        let sender = try Foreign([
            PeerXferLab.binary, "send", "--accept-new-key", lab.path("src/a.txt"), "--to", name,
            "--config", lab.path("sender"), "--json",
        ])
        defer { sender.stop() }
        // The hook has started once its pid is in the file (the shell makes it, then writes).
        func hookPid() -> Int32? {
            (try? String(contentsOfFile: marker, encoding: .utf8)).flatMap {
                Int32($0.trimmingCharacters(in: .whitespacesAndNewlines))
            }
        }
        eventually(timeout: 20, interval: 0.02) { hookPid() != nil }
        let hook = try XCTUnwrap(hookPid(), daemon.output)
        XCTAssertEqual(kill(sender.process.processIdentifier, SIGKILL), 0)
        XCTAssertTrue(
            daemon.waitForOutput(containing: "the sender left before its offer was answered", seconds: 20),
            daemon.output)
        XCTAssertTrue(
            eventually(timeout: 10, interval: 0.02) { kill(hook, 0) != 0 },
            "the hook was ended with its process group, not left to run its 100 s")
    }

    func testUnknownSendersAreRefusedUnderKnownUntilTrusted() throws {
        let lab = try PeerXferLab()
        let name = PeerXferLab.uniqueName("Known")
        let daemon = try lab.serve(name: name, config: "receiver", inbox: lab.path("inbox"), accept: "known")
        try lab.makeFile("src/a.txt", size: 100)
        let (status, output) = try lab.send([lab.path("src/a.txt")], to: name, config: "sender")
        XCTAssertEqual(status, 10, output)
        XCTAssertTrue(output.contains("not trusted"), output)
        XCTAssertFalse(
            output.contains(lab.path("receiver")),
            "the sender is not told where the receiver keeps its configuration: \(output)")
        XCTAssertEqual(PeerXferLab.listing(lab.path("inbox")), [])
        // The receiver's own log gives the whole command, its configuration folder included.
        // (In the summary line the daemon writes every 10 s for connections refused before an offer.)
        XCTAssertTrue(
            daemon.waitForOutput(containing: "--config '\(lab.path("receiver"))'", seconds: 25), daemon.output)

        let (_, identity) = try lab.run(["identity", "--config", lab.path("sender"), "--json"])
        let key =
            (try JSONSerialization.jsonObject(with: Data(identity.utf8)) as? [String: Any])?["key"] as? String ?? ""
        XCTAssertEqual(key.count, 64, identity)
        // The start of the key of a sender that came here: 16 digits at least (8 can be matched
        // by a key made for the purpose).
        let (short, shortOutput) = try lab.run(["trust", String(key.prefix(8)), "--config", lab.path("receiver")])
        XCTAssertEqual(short, 2, shortOutput)
        XCTAssertTrue(shortOutput.contains("give at least 16 hex digits"), shortOutput)
        let (unseen, unseenOutput) = try lab.run(["trust", "0123456789abcdef", "--config", lab.path("receiver")])
        XCTAssertEqual(unseen, 2, unseenOutput)
        XCTAssertTrue(
            unseenOutput.contains("no sender whose key starts with 0123456789abcdef has offered"), unseenOutput)
        let (prefixed, prefixedOutput) = try lab.run([
            "trust", String(key.prefix(16)), "--config", lab.path("receiver"),
        ])
        XCTAssertEqual(prefixed, 0, prefixedOutput)
        XCTAssertTrue(prefixedOutput.contains("trusted key \(key)"), prefixedOutput)
        XCTAssertTrue(prefixedOutput.contains("verification code"), prefixedOutput)
        let (trusted, trustedOutput) = try lab.send([lab.path("src/a.txt")], to: name, config: "sender")
        XCTAssertEqual(trusted, 0, trustedOutput)
        XCTAssertTrue(PeerXferLab.sameContents(lab.path("src/a.txt"), lab.path("inbox/a.txt")))
    }

    func testAReceiverIsFoundByItsNameInAnyCaseAndPinnedAsPublished() throws {
        let lab = try PeerXferLab()
        let name = PeerXferLab.uniqueName("Cased")
        try lab.serve(name: name, config: "receiver", inbox: lab.path("inbox"))
        try lab.makeFile("src/a.txt", size: 100)
        let (status, output) = try lab.send([lab.path("src/a.txt")], to: name.lowercased(), config: "sender")
        XCTAssertEqual(status, 0, output)
        XCTAssertTrue(PeerXferLab.sameContents(lab.path("src/a.txt"), lab.path("inbox/a.txt")))
        let known = try String(contentsOfFile: lab.path("sender/known-peers.json"), encoding: .utf8)
        XCTAssertTrue(known.contains("\"\(name)\""), "pinned under the published spelling: \(known)")
        XCTAssertFalse(known.contains("\"\(name.lowercased())\""), known)

        // Another receiver publishing the same name in other letters' case is held to that pin:
        // it is not trusted on first use in its place.
        try FileManager.default.removeItem(atPath: lab.path("sender/known-peers.json"))
        let old = String(repeating: "cd", count: 32)
        try Data("{\"pins\":{\"\(name.uppercased())\":\"\(old)\"},\"trusted\":{}}".utf8)
            .write(to: URL(fileURLWithPath: lab.path("sender/known-peers.json")))
        let (refused, refusedOutput) = try lab.send([lab.path("src/a.txt")], to: name, config: "sender")
        XCTAssertEqual(refused, 6, refusedOutput)
        XCTAssertTrue(refusedOutput.contains("KEY CHANGED") && refusedOutput.contains(name.uppercased()), refusedOutput)
    }

    func testAChangedKeyForAKnownNameIsRefusedUntilUntrusted() throws {
        let lab = try PeerXferLab()
        let name = PeerXferLab.uniqueName("Pinned")
        try lab.serve(name: name, config: "receiver", inbox: lab.path("inbox"))
        try lab.makeFile("src/a.txt", size: 100)
        // The sender met a receiver of that name with another key before.
        try FileManager.default.createDirectory(atPath: lab.path("sender"), withIntermediateDirectories: true)
        let old = String(repeating: "ab", count: 32)
        try Data("{\"pins\":{\"\(name)\":\"\(old)\"},\"trusted\":{}}".utf8).write(
            to: URL(fileURLWithPath: lab.path("sender/known-peers.json")))
        let (status, output) = try lab.send([lab.path("src/a.txt")], to: name, config: "sender")
        XCTAssertEqual(status, 6, output)
        XCTAssertTrue(
            output.contains(old) && output.contains("KEY CHANGED") && output.contains("impersonating"), output)
        // The command it suggests works as given: with the configuration folder in use.
        XCTAssertTrue(output.contains("peerxfer untrust '\(name)' --config '\(lab.path("sender"))'"), output)
        XCTAssertEqual(PeerXferLab.listing(lab.path("inbox")), [])
        XCTAssertEqual(try lab.run(["untrust", name, "--config", lab.path("sender")]).status, 0)
        XCTAssertEqual(try lab.send([lab.path("src/a.txt")], to: name, config: "sender").status, 0)
    }

    func testASpoofedServiceWithAnotherKeyIsRefusedBeforeAnyMetadata() throws {
        let lab = try PeerXferLab()
        let real = PeerXferLab.uniqueName("Real")
        let daemon = try lab.serve(name: real, config: "receiver", inbox: lab.path("inbox"))
        let port =
            daemon.output.components(separatedBy: "on port ").last.flatMap { Int($0.prefix { $0.isNumber }) } ?? 0
        XCTAssertGreaterThan(port, 0)
        // Someone publishes a service that points at the real daemon but advertises their key.
        let spoofName = PeerXferLab.uniqueName("Spoof")
        let forged = String(repeating: "cd", count: 32)
        let spoof = try Foreign(["avahi-publish", "-s", spoofName, "_peerxfer._tcp", "\(port)", "v=2", "fp=\(forged)"])
        defer { spoof.stop() }
        XCTAssertTrue(spoof.waitForOutput(containing: "Established", seconds: 10), spoof.output)
        try lab.makeFile("src/secret.txt", size: 100)
        let (status, output) = try lab.send([lab.path("src/secret.txt")], to: spoofName, config: "sender")
        XCTAssertEqual(status, 6, output)
        XCTAssertTrue(output.contains("not the one it advertises"), output)
        XCTAssertFalse(daemon.output.contains("offer from"), "metadata reached the receiver: \(daemon.output)")
        let pins = (try? String(contentsOfFile: lab.path("sender/known-peers.json"), encoding: .utf8)) ?? ""
        XCTAssertFalse(pins.contains(forged), "a refused key must not be pinned")
    }

    func testAHangUpStopsTheDaemonGracefully() throws {
        // A closed terminal sends SIGHUP: the daemon withdraws and stops, as for SIGTERM.
        let lab = try PeerXferLab()
        let name = PeerXferLab.uniqueName("HangUp")
        let daemon = try lab.serve(name: name, config: "receiver", inbox: lab.path("inbox"))
        XCTAssertEqual(kill(daemon.process.processIdentifier, SIGHUP), 0)
        XCTAssertTrue(daemon.waitForExit(seconds: 20), daemon.output)
        XCTAssertEqual(daemon.process.terminationStatus, 0, daemon.output)
        XCTAssertTrue(daemon.output.contains("stopped"), daemon.output)
    }

    func testASecondDaemonOnOneConfigurationIsRefusedAndTheFirstKeepsItsStatus() throws {
        let lab = try PeerXferLab()
        let name = PeerXferLab.uniqueName("Once")
        let first = try lab.serve(name: name, config: "receiver", inbox: lab.path("inbox"))
        let pid = first.process.processIdentifier
        let (status, output) = try lab.run(
            [
                "serve", "--name", PeerXferLab.uniqueName("Twice"), "--inbox", lab.path("inbox2"),
                "--config", lab.path("receiver"), "--accept", "all",
            ], seconds: 30)
        XCTAssertEqual(status, 1, output)
        XCTAssertTrue(
            output.contains("another peerxfer serve (pid \(pid)) already runs with the configuration"), output)
        XCTAssertFalse(output.contains("serving"), "the second must not publish: \(output)")
        // The first still reads as running: the second neither wrote nor cleared its status.
        let (shown, text) = try lab.run(["status", "--config", lab.path("receiver")])
        XCTAssertEqual(shown, 0, text)
        XCTAssertTrue(text.contains("serving \"\(name)\""), text)
        XCTAssertTrue(text.contains("pid \(pid)"), text)
        // Once the first has stopped, the lock has gone with it.
        XCTAssertEqual(kill(pid, SIGTERM), 0)
        XCTAssertTrue(first.waitForExit(seconds: 20), first.output)
        let again = try lab.serve(name: name, config: "receiver", inbox: lab.path("inbox"))
        XCTAssertEqual(kill(again.process.processIdentifier, SIGTERM), 0)
        XCTAssertTrue(again.waitForExit(seconds: 20), again.output)
        XCTAssertEqual(again.process.terminationStatus, 0, again.output)
    }

    func testCommandsStartedAtOnceOnANewFolderMakeOneIdentity() throws {
        let lab = try PeerXferLab()
        // Several first uses at the same moment: one key, one device id, no half-made folder.
        let runs = try (0..<6).map { _ in
            try Foreign([PeerXferLab.binary, "identity", "--config", lab.path("new"), "--json"])
        }
        var keys = Set<String>(), devices = Set<String>()
        for run in runs {
            XCTAssertTrue(run.waitForExit(seconds: 60), run.output)
            XCTAssertEqual(run.process.terminationStatus, 0, run.output)
            let line = run.output.split(separator: "\n").first { $0.hasPrefix("{") }.map(String.init) ?? ""
            let object = try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any]
            keys.insert(object?["key"] as? String ?? "none: \(run.output)")
            devices.insert(object?["device"] as? String ?? "none: \(run.output)")
        }
        // (Started together, they race for the first use; without the locks each made its own.)
        XCTAssertEqual(keys.count, 1, "\(keys)")
        XCTAssertEqual(devices.count, 1, "\(devices)")
        XCTAssertEqual(keys.first, try lab.key(ofConfig: "new"))
    }

    func testALockFileThatIsAHardLinkIsRefusedAndItsTargetKept() throws {
        let lab = try PeerXferLab()
        try lab.makeFile("precious.txt", size: 100)
        let before = try Data(contentsOf: URL(fileURLWithPath: lab.path("precious.txt")))
        try FileManager.default.createDirectory(atPath: lab.path("linked"), withIntermediateDirectories: true)
        XCTAssertEqual(link(lab.path("precious.txt"), lab.path("linked/serve.lock")), 0)
        let (status, output) = try lab.run(
            [
                "serve", "--name", PeerXferLab.uniqueName("Linked"), "--inbox", lab.path("inbox"),
                "--config", lab.path("linked"), "--accept", "all",
            ], seconds: 30)
        XCTAssertEqual(status, 1, output)
        XCTAssertTrue(output.contains("it is a hard link to another file (remove it)"), output)
        XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: lab.path("precious.txt"))), before)
    }

    func testAReceiverThatIsNotThereExits3() throws {
        let lab = try PeerXferLab()
        try lab.makeFile("src/a.txt", size: 1)
        let started = Date()
        let (status, output) = try lab.run([
            "send", lab.path("src/a.txt"), "--to", PeerXferLab.uniqueName("Nobody"),
            "--config", lab.path("sender"), "--wait", "1",
        ])
        XCTAssertEqual(status, 3, output)
        XCTAssertTrue(output.contains("answered within 1 second"), output)
        XCTAssertLessThan(Date().timeIntervalSince(started), 15, "--wait must bound the search")
        let failure = events(output, "error").last ?? [:]
        XCTAssertEqual(failure["exitCode"] as? Int, 3, "a JSON line says why: \(output)")
        XCTAssertTrue((failure["message"] as? String ?? "").contains("answered within 1 second"), output)
    }

    func testASenderIsKnownByTheNameItWasGivenFromThenOn() throws {
        let lab = try PeerXferLab()
        let name = PeerXferLab.uniqueName("Named")
        let daemon = try lab.serve(name: name, config: "receiver", inbox: lab.path("inbox"))
        try lab.makeFile("src/a.txt", size: 10)
        let (status, output) = try lab.run(
            [
                "send", lab.path("src/a.txt"), "--to", name, "--name", "Ana's laptop", "--config", lab.path("sender"),
                "--accept-new-key",
            ])
        XCTAssertEqual(status, 0, output)
        XCTAssertTrue(daemon.waitForOutput(containing: "\"Ana's laptop\" (claimed)", seconds: 20), daemon.output)
        // Kept: the next send, and `identity`, use it without --name.
        let (_, identity) = try lab.run(["identity", "--config", lab.path("sender")])
        XCTAssertTrue(identity.contains("name \"Ana's laptop\""), identity)
        try lab.makeFile("src/b.txt", size: 10, seed: 2)
        XCTAssertEqual(try lab.send([lab.path("src/b.txt")], to: name, config: "sender").status, 0)
        XCTAssertEqual(daemon.output.components(separatedBy: "\"Ana's laptop\" (claimed)").count - 1, 2, daemon.output)
        // A name no one could read as it is, refused.
        let (bad, badOutput) = try lab.run(
            ["send", lab.path("src/a.txt"), "--to", name, "--name", "Ana\u{202E}txt", "--config", lab.path("sender")])
        XCTAssertEqual(bad, 2, badOutput)
    }

    func testSeveralReceiversEachGetTheSendWithOneSummaryAndTheFirstFailuresStatus() throws {
        let lab = try PeerXferLab()
        let kitchen = PeerXferLab.uniqueName("Kitchen")
        let office = PeerXferLab.uniqueName("Office")
        try lab.serve(name: kitchen, config: "r1", inbox: lab.path("inbox1"))
        try lab.serve(
            name: office, config: "r2", inbox: lab.path("inbox2"), accept: "ask",
            extra: ["--hook", "cat >/dev/null; exit 1"])
        try lab.makeFile("src/a.txt", size: 100)
        let (status, output) = try lab.run([
            "send", lab.path("src/a.txt"), "--to", kitchen, "--to", office, "--config", lab.path("sender"),
            "--json", "--accept-new-key",
        ])
        XCTAssertEqual(status, 9, "the failed receiver's status: \(output)")
        XCTAssertTrue(PeerXferLab.sameContents(lab.path("src/a.txt"), lab.path("inbox1/a.txt")))
        XCTAssertEqual(PeerXferLab.listing(lab.path("inbox2")), [])
        XCTAssertTrue(output.contains("  \"\(kitchen)\": delivered and verified"), output)
        XCTAssertTrue(output.contains("  \"\(office)\": declined by the accept hook (exit 9)"), output)
        // The same name twice is a mistake, said at once.
        let (twice, twiceOutput) = try lab.run([
            "send", lab.path("src/a.txt"), "--to", kitchen, "--to", kitchen.uppercased(), "--config",
            lab.path("sender"),
        ])
        XCTAssertEqual(twice, 2, twiceOutput)
        XCTAssertTrue(twiceOutput.contains("is given twice"), twiceOutput)
    }

    func testStandardInputAndATextArriveAsFilesAndSeveralPathsAreOneBackgroundSend() throws {
        let lab = try PeerXferLab()
        let name = PeerXferLab.uniqueName("Notes")
        try lab.serve(name: name, config: "receiver", inbox: lab.path("inbox"))
        let piped = try Foreign([
            "/bin/sh", "-c",
            "printf 'from a pipe' | '\(PeerXferLab.binary)' send - --as piped.txt --to '\(name)' --config '\(lab.path("sender"))' --json --accept-new-key",
        ])
        _ = piped.finish(seconds: 60)
        XCTAssertEqual(piped.process.terminationStatus, 0, piped.output)
        XCTAssertEqual(try String(contentsOfFile: lab.path("inbox/piped.txt"), encoding: .utf8), "from a pipe")
        let (texted, textOutput) = try lab.send(
            [], to: name, config: "sender", trusting: ["--text", "the wifi code is 1234"])
        XCTAssertEqual(texted, 0, textOutput)
        let text = try XCTUnwrap(
            PeerXferLab.listing(lab.path("inbox")).first { $0.hasPrefix("text-") && $0.hasSuffix(".txt") })
        XCTAssertEqual(try String(contentsOfFile: lab.path("inbox/" + text), encoding: .utf8), "the wifi code is 1234")
        // A terminal is not standard input to send.
        let (bad, badOutput) = try lab.run(["send", "-", "--text", "x", "--to", name, "--config", lab.path("sender")])
        XCTAssertEqual(bad, 2, badOutput)

        // Several paths queued at once: one task, one offer.
        try lab.serve(name: PeerXferLab.uniqueName("Outbox"), config: "sender", inbox: lab.path("sender-inbox"))
        try lab.makeFile("src/one.txt", size: 10)
        try lab.makeFile("src/two.txt", size: 20, seed: 2)
        let (queued, queuedOutput) = try lab.run([
            "send", lab.path("src/one.txt"), lab.path("src/two.txt"), "--to", name, "--background",
            "--config", lab.path("sender"),
        ])
        XCTAssertEqual(queued, 0, queuedOutput)
        XCTAssertEqual(queuedOutput.components(separatedBy: "(task ").count - 1, 1, "one task: \(queuedOutput)")
        XCTAssertTrue(queuedOutput.contains("src/one.txt and 1 more"), queuedOutput)
        let done = try lab.status(of: "sender", once: ": done, 2/2 verified")
        XCTAssertTrue(done.contains(", 2 files, "), done)
        XCTAssertTrue(PeerXferLab.sameContents(lab.path("src/two.txt"), lab.path("inbox/two.txt")))
    }

    func testATypoGetsDidYouMeanAndAPairedReceiverThatIsOffSaysWhenItWasLastReached() throws {
        let lab = try PeerXferLab()
        try lab.makeFile("src/a.txt", size: 1)
        let name = PeerXferLab.uniqueName("Kitchen")
        let daemon = try lab.serve(name: name, config: "receiver", inbox: lab.path("inbox"))
        // One letter dropped: the name on the link is offered.
        let typo = name.replacingOccurrences(of: "tch", with: "th")
        let (status, output) = try lab.run([
            "send", lab.path("src/a.txt"), "--to", typo, "--config", lab.path("sender"), "--wait", "1",
        ])
        XCTAssertEqual(status, 3, output)
        XCTAssertTrue(output.contains("Did you mean \"\(name)\" (on the link now)?"), output)

        // Sent to once (and so paired), then stopped: said as such, with when it was reached.
        XCTAssertEqual(try lab.send([lab.path("src/a.txt")], to: name, config: "sender").status, 0)
        XCTAssertEqual(kill(daemon.process.processIdentifier, SIGTERM), 0)
        XCTAssertTrue(daemon.waitForExit(seconds: 20), daemon.output)
        let (off, offOutput) = try lab.run([
            "send", lab.path("src/a.txt"), "--to", name, "--config", lab.path("sender"), "--wait", "1",
        ])
        XCTAssertEqual(off, 3, offOutput)
        XCTAssertTrue(
            offOutput.contains(
                "\"\(name)\" is paired with this device but did not answer within 1 second; it was last reached just now"
            ),
            offOutput)
        XCTAssertTrue(offOutput.contains("`send --background` delivers when it appears"), offOutput)
    }

    func testAFullDiskIsRefusedBeforeAcceptingAndLeavesNothing() throws {
        let lab = try PeerXferLab()
        let inbox = try lab.smallDisk("small-inbox", size: "2m")
        let name = PeerXferLab.uniqueName("Full")
        try lab.serve(name: name, config: "receiver", inbox: inbox)
        try lab.makeFile("src/big.bin", size: 4 * chunk)
        let (status, output) = try lab.send([lab.path("src/big.bin")], to: name, config: "sender")
        XCTAssertEqual(status, 1, output)
        XCTAssertTrue(output.contains("bytes free"), output)
        XCTAssertEqual(PeerXferLab.listing(inbox), [])
    }

    func testOneSenderCannotFillTheDiskWithUnfinishedFiles() throws {
        let lab = try PeerXferLab()
        let inbox = try lab.smallDisk("capped-inbox", size: "16m")
        let name = PeerXferLab.uniqueName("Capped")
        // One sender's part files may hold a quarter of the 16 MiB: 4 MiB. It left 3 MiB from
        // an earlier transfer.
        let leftover = inbox + "/old.bin" + TransferLimits.partName(of: "", from: try lab.key(ofConfig: "sender"))
        try Data(count: 3 * chunk).write(to: URL(fileURLWithPath: leftover))
        // (The daemon counts part files when it starts, then every few minutes.)
        let daemon = try lab.serve(name: name, config: "receiver", inbox: inbox, extra: ["--parts-per-sender", "25"])
        try lab.makeFile("src/big.bin", size: 2 * chunk)
        let (status, output) = try lab.send([lab.path("src/big.bin")], to: name, config: "sender")
        XCTAssertEqual(status, 1, output)
        XCTAssertTrue(
            output.contains(
                "this sender already has 3.1 MB of unfinished files at the receiver, or on their way (1 file whose transfer was cut or is under way: \"old.bin\"), and the receiver keeps at most 4.2 MB of them for one sender"
            ), output)
        XCTAssertEqual(PeerXferLab.listing(inbox), [(leftover as NSString).lastPathComponent], "nothing is written")
        // Another sender has its own share; and once the leftover is finished (sent again, as
        // the message says), the file is taken.
        let (other, otherOutput) = try lab.send([lab.path("src/big.bin")], to: name, config: "other")
        XCTAssertEqual(other, 0, otherOutput)
        try lab.makeFile("src/old.bin", size: 3 * chunk)
        let (finished, finishedOutput) = try lab.send([lab.path("src/old.bin")], to: name, config: "sender")
        XCTAssertEqual(finished, 0, finishedOutput)
        let (again, againOutput) = try lab.send([lab.path("src/big.bin")], to: name, config: "sender")
        XCTAssertEqual(again, 0, againOutput)
        XCTAssertEqual(PeerXferLab.listing(inbox), ["big (1).bin", "big.bin", "old.bin"])
        // The log names an untrusted sender by the name it claims, marked as claimed, and its key.
        let key = try lab.key(ofConfig: "sender")
        XCTAssertTrue(
            daemon.waitForOutput(containing: "(claimed) [key \(key.prefix(8))…] complete", seconds: 10), daemon.output)
    }

    func testUsageErrorsExit2AndHelpTeachesTheExitCodes() throws {
        let lab = try PeerXferLab()
        let (help, helpOutput) = try lab.run(["--help"])
        XCTAssertEqual(help, 0)
        for text in ["Exit codes", "3  the receiver was not found", "6  trust failure", "Examples"] {
            XCTAssertTrue(helpOutput.contains(text), "--help lacks \(text): \(helpOutput)")
        }
        XCTAssertEqual(try lab.run(["send", "--to", "x"]).status, 2, "no paths")
        XCTAssertEqual(
            try lab.run(["send", lab.path("missing"), "--to", "x", "--config", lab.path("c")]).status, 2, "missing path"
        )
        // Only a symlink (not followed, so nothing is left to send): found while the receiver is
        // looked for, and still a usage error, at once (not "not found" once the lookup gives up).
        XCTAssertEqual(symlink("/etc/hostname", lab.path("only-a-link")), 0)
        let (nothing, nothingOutput) = try lab.run([
            "send", lab.path("only-a-link"), "--to", PeerXferLab.uniqueName("Nobody"),
            "--wait", "600", "--config", lab.path("c"),
        ])
        XCTAssertEqual(nothing, 2, nothingOutput)
        XCTAssertTrue(nothingOutput.contains("nothing to send"), nothingOutput)
        // Names no one could tell apart on a screen, or that are no names: refused at once
        // (exit 2), not looked up and waited for (exit 3).
        for name in ["Kit\u{1}chen", "Kit\u{7f}chen", "Kit\u{85}chen", "Kit\u{202e}chen", "Kit\u{200b}chen", ".", ".."]
        {
            let (status, output) = try lab.run([
                "send", lab.path("only-a-link"), "--to", name, "--wait", "600", "--config", lab.path("c"),
            ])
            XCTAssertEqual(status, 2, "\(name.debugDescription): \(output)")
            XCTAssertEqual(
                try lab.run(["serve", "--name", name, "--config", lab.path("c")]).status, 2, name.debugDescription)
        }
        // Invalid UTF-8 is refused, not read with U+FFFD in its place.
        let invalid = try Foreign([
            "/bin/sh", "-c", "exec \"$0\" send /etc/hostname --to \"$(printf 'bad\\377name')\"", PeerXferLab.binary,
        ])
        let invalidOutput = invalid.finish(seconds: 20)
        XCTAssertEqual(invalid.process.terminationStatus, 2, invalidOutput)
        XCTAssertTrue(
            invalidOutput.contains("bad\\xffname") && invalidOutput.contains("not valid UTF-8"), invalidOutput)
        // A --config that is a file, or empty: one line, no NSError dump.
        for config in ["/dev/null", ""] {
            let (status, output) = try lab.run(["send", lab.path("only-a-link"), "--to", "x", "--config", config])
            XCTAssertEqual(status, 2, "\(config): \(output)")
            XCTAssertFalse(output.contains("NSCocoaErrorDomain"), output)
        }
        // An unknown log level in the environment is refused, not ignored.
        setenv("PEERXFER_LOG_LEVEL", "garbage", 1)
        let (level, levelOutput) = try lab.run(["peers", "--config", lab.path("c")])
        unsetenv("PEERXFER_LOG_LEVEL")
        XCTAssertEqual(level, 2, levelOutput)
        XCTAssertTrue(levelOutput.contains("PEERXFER_LOG_LEVEL=garbage is not a level"), levelOutput)
        XCTAssertEqual(try lab.run(["send", lab.path("only-a-link"), "--to", "x", "--wait", "1e-300"]).status, 2)
        // An inbox the daemon cannot write: refused at the start, before it publishes.
        try FileManager.default.createDirectory(atPath: lab.path("read-only"), withIntermediateDirectories: true)
        if try Foreign(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "none", lab.path("read-only")]).finish(seconds: 10)
            .isEmpty,
            FileManager.default.isReadableFile(atPath: lab.path("read-only"))
        {
            defer { _ = try? Foreign(["umount", lab.path("read-only")]).finish(seconds: 10) }
            let (status, output) = try lab.run([
                "serve", "--name", PeerXferLab.uniqueName("RO"), "--inbox", lab.path("read-only"),
                "--config", lab.path("c"),
            ])
            XCTAssertEqual(status, 2, output)
            XCTAssertTrue(output.contains("cannot write to the inbox"), output)
            XCTAssertFalse(output.contains("serving"), output)
        }
        // A file for an inbox, or a folder no one writes to (sysfs refuses the superuser too):
        // one line, exit 2, before anything is published or warned about.
        try lab.makeFile("a-file", size: 1)
        for inbox in [lab.path("a-file"), "/sys/kernel"] {
            let (status, output) = try lab.run([
                "serve", "--name", PeerXferLab.uniqueName("Inbox"), "--inbox", inbox, "--config", lab.path("c"),
            ])
            XCTAssertEqual(status, 2, output)
            XCTAssertTrue(output.contains("give --inbox a folder this user can write"), output)
            XCTAssertEqual(output.split(separator: "\n").count, 1, output)
        }
        // The device's name is checked as a peer's is, wherever it is set.
        XCTAssertEqual(try lab.run(["identity", "--name", "Kit\u{1}chen", "--config", lab.path("c")]).status, 2)
        let (named, namedOutput) = try lab.run(["identity", "--name", "Den", "--config", lab.path("c")])
        XCTAssertEqual(named, 0, namedOutput)
        XCTAssertTrue(namedOutput.contains("name \"Den\""), namedOutput)
        XCTAssertEqual(try lab.run(["serve", "--port", "70000"]).status, 2)
        XCTAssertEqual(try lab.run(["serve", "--accept", "maybe"]).status, 2)
        XCTAssertEqual(try lab.run(["no-such-command"]).status, 2)
        let (wrongOption, wrongOptionOutput) = try lab.run(["send", lab.path("missing"), "--too", "Kitchen"])
        XCTAssertEqual(wrongOption, 2, wrongOptionOutput)
        XCTAssertTrue(wrongOptionOutput.contains("unknown option --too; did you mean --to?"), wrongOptionOutput)
        let (wrongCommand, wrongCommandOutput) = try lab.run(["sned", "a.txt", "--to", "Kitchen"])
        XCTAssertEqual(wrongCommand, 2, wrongCommandOutput)
        XCTAssertTrue(
            wrongCommandOutput.contains("'sned' is not a command. Did you mean 'send'?"), wrongCommandOutput)
        // The key as `peers` shortens it is not taken for a name to look up for 5 s.
        let (shortened, shortenedOutput) = try lab.run(["trust", "fc62c7a588b6bec2…", "--config", lab.path("c")])
        XCTAssertEqual(shortened, 2, shortenedOutput)
        XCTAssertTrue(shortenedOutput.contains("all 64 hex digits"), shortenedOutput)
        // A whole key with a typo is a usage error naming the character, not a name to look up.
        let typo = String(repeating: "ab", count: 20) + "g" + String(repeating: "c", count: 23)
        let (mistyped, mistypedOutput) = try lab.run(["trust", typo, "--config", lab.path("c")])
        XCTAssertEqual(mistyped, 2, mistypedOutput)
        XCTAssertTrue(mistypedOutput.contains("character 41 (g) is not a hex digit"), mistypedOutput)
        // A --config folder that does not exist is a typo to commands that only read the
        // configuration or take from it: they say so, and make no folder.
        for command in [["status"], ["peers", "--json"], ["cancel", "--all"], ["untrust", "x"]] {
            let (status, output) = try lab.run(command + ["--config", lab.path("typo")])
            XCTAssertEqual(status, 2, "\(command): \(output)")
            XCTAssertTrue(
                output.contains("there is no peerxfer configuration at \(lab.path("typo"))"), "\(command): \(output)")
            XCTAssertFalse(FileManager.default.fileExists(atPath: lab.path("typo")), "\(command) made the folder")
        }
        // A folder that is there but holds no configuration is not made into one either.
        try FileManager.default.createDirectory(atPath: lab.path("just-a-folder"), withIntermediateDirectories: true)
        let (other, otherOutput) = try lab.run(["status", "--config", lab.path("just-a-folder")])
        XCTAssertEqual(other, 2, otherOutput)
        XCTAssertTrue(otherOutput.contains("the folder holds none"), otherOutput)
        XCTAssertEqual(PeerXferLab.listing(lab.path("just-a-folder")), [], otherOutput)
        // `send` with a --config that is no configuration says it makes one, with a new key.
        try lab.makeFile("src/note.txt", size: 10)
        let (fresh, freshOutput) = try lab.run([
            "send", lab.path("src/note.txt"), "--to", PeerXferLab.uniqueName("Nobody"),
            "--wait", "0.5", "--config", lab.path("fresh-sender"),
        ])
        XCTAssertEqual(fresh, 3, freshOutput)
        XCTAssertTrue(
            freshOutput.contains("made a new peerxfer configuration in") && freshOutput.contains("with a new key"),
            freshOutput)
        // A few hex digits that name no receiver: the hint says how to give a key.
        let (short, shortOutput) = try lab.run(["trust", "63c04fbad6", "--wait", "0.5", "--config", lab.path("c")])
        XCTAssertEqual(short, 2, shortOutput)
        XCTAssertTrue(shortOutput.contains("give at least 16 hex digits of the key (or all 64)"), shortOutput)
        // `trust` may make a configuration (before the first `serve`), and says when it does.
        let (made, madeOutput) = try lab.run([
            "trust", String(repeating: "ab", count: 32), "--config", lab.path("new-config"),
        ])
        XCTAssertEqual(made, 0, madeOutput)
        XCTAssertTrue(madeOutput.contains("made a new peerxfer configuration in"), madeOutput)
        let (versionStatus, version) = try lab.run(["--version"])
        XCTAssertEqual(versionStatus, 0, version)
        XCTAssertEqual(version.trimmingCharacters(in: .whitespacesAndNewlines), "0.1.0")
    }

    func testSendsQueuedBeforeAnyDaemonRanAreListedAndCancellable() throws {
        let lab = try PeerXferLab()
        try lab.makeFile("src/early.bin", size: 100)
        let later = PeerXferLab.uniqueName("Later")
        let (queued, output) = try lab.run([
            "send", lab.path("src/early.bin"), "--to", later, "--config", lab.path("fresh"), "--background",
            "--accept-new-key",
        ])
        XCTAssertEqual(queued, 0, output)
        // A name no receiver can have is a usage error, not a week's wait.
        let (tooLong, tooLongOutput) = try lab.run([
            "send", lab.path("src/early.bin"), "--to", String(repeating: "n", count: 64),
            "--config", lab.path("fresh"), "--background",
        ])
        XCTAssertEqual(tooLong, 2, tooLongOutput)
        XCTAssertTrue(tooLongOutput.contains("at most 63 fit"), tooLongOutput)
        // Nobody answers to that name now: a mistyped name must not be waited for unseen.
        XCTAssertTrue(
            output.contains(
                "no receiver named \"\(later)\" answered on the link within 2 s; the daemon waits for it to appear, for up to 7 days"
            ), output)
        let (_, status) = try lab.run(["status", "--config", lab.path("fresh")])
        XCTAssertTrue(status.contains("no daemon has run") && status.contains("early.bin"), status)
        let (_, json) = try lab.run(["status", "--json", "--config", lab.path("fresh")])
        let object = try JSONSerialization.jsonObject(with: Data(json.utf8)) as? [String: Any]
        let queue = object?["queue"] as? [[String: Any]]
        XCTAssertEqual(queue?.count, 1, json)
        XCTAssertEqual(queue?.first?["service"] as? String, later, json)
        XCTAssertEqual(queue?.first?["cancelRequested"] as? Bool, false, json)

        let (cancelled, said) = try lab.run(["cancel", "--all", "--config", lab.path("fresh")])
        XCTAssertEqual(cancelled, 0, said)
        XCTAssertTrue(said.hasPrefix("cancelled "), said)
        // No daemon has acted on it yet: asking again says so instead of "cancelled" twice.
        let (again, saidAgain) = try lab.run(["cancel", "--all", "--config", lab.path("fresh")])
        XCTAssertEqual(again, 0, saidAgain)
        XCTAssertTrue(saidAgain.contains("already cancelled"), saidAgain)
        let (_, after) = try lab.run(["status", "--config", lab.path("fresh")])
        XCTAssertTrue(after.contains("cancelled (the daemon drops it when it starts)"), after)

        // A folder with a name the protocol cannot carry: queued, and what will not go is said
        // now (the daemon would only log it).
        try lab.makeFile("src/mixed/ok.txt", size: 3)
        try Data([1]).write(to: URL(fileURLWithPath: lab.path("src/mixed/bad\nname.txt")))
        let (mixed, mixedOutput) = try lab.run([
            "send", lab.path("src/mixed"), "--to", later, "--config", lab.path("fresh"), "--background",
            "--accept-new-key",
        ])
        XCTAssertEqual(mixed, 0, mixedOutput)
        XCTAssertTrue(
            mixedOutput.contains("skipped \(lab.path("src/mixed/bad\\x0aname.txt")): not sent, its path contains"),
            mixedOutput)
    }

    func testPeersListsReceiversAndMarksThisDevicesOwnDaemon() throws {
        let lab = try PeerXferLab()
        let own = PeerXferLab.uniqueName("Own")
        let other = PeerXferLab.uniqueName("Other")
        try lab.serve(name: own, config: "mine", inbox: lab.path("mine-inbox"))
        try lab.serve(name: other, config: "theirs", inbox: lab.path("their-inbox"))
        let (status, output) = try lab.run(["peers", "--config", lab.path("mine"), "--json", "--timeout", "2"])
        XCTAssertEqual(status, 0, output)
        let peers = output.split(separator: "\n").compactMap {
            try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any]
        }
        let byName = Dictionary(peers.compactMap { peer in (peer["name"] as? String).map { ($0, peer) } }) { first, _ in
            first
        }
        XCTAssertEqual(byName[own]?["pin"] as? String, "this device", output)
        XCTAssertEqual(byName[other]?["pin"] as? String, "new", output)
        XCTAssertEqual((byName[other]?["key"] as? String)?.count, 64, output)
        XCTAssertFalse(output.contains("debug:"), "silent below warnings by default: \(output)")
        XCTAssertEqual(byName[other]?["reachable"] as? Bool, true, output)
        // A record whose receiver is gone (its goodbye lost): listed as unreachable, not as a
        // receiver to send to.
        let ghost = PeerXferLab.uniqueName("Ghost")
        let publisher = try Foreign([
            "avahi-publish", "-s", ghost, "_peerxfer._tcp", "\(freeLoopbackPort())", "v=2",
            "fp=\(String(repeating: "ef", count: 32))",
        ])
        defer { publisher.stop() }
        XCTAssertTrue(publisher.waitForOutput(containing: "Established", seconds: 10), publisher.output)
        let (_, withGhost) = try lab.run(["peers", "--config", lab.path("mine"), "--timeout", "2"])
        let ghostLine = withGhost.split(separator: "\n").first { $0.hasPrefix(ghost + " ") }.map(String.init) ?? ""
        XCTAssertTrue(ghostLine.contains("UNREACHABLE"), withGhost)

        // As text: a header, and each column starting at the same place on every line.
        let (textStatus, text) = try lab.run(["peers", "--config", lab.path("mine"), "--wait", "2"])
        XCTAssertEqual(textStatus, 0, text)
        let lines = text.split(separator: "\n").map(String.init)
        let header = try XCTUnwrap(lines.first, text)
        XCTAssertTrue(header.hasPrefix("NAME "), text)
        let ownLine = try XCTUnwrap(lines.first { $0.hasPrefix(own + " ") }, text)
        for column in ["ADDRESS", "KEY", "STATE"] {
            let offset = try XCTUnwrap(header.range(of: column), text).lowerBound.utf16Offset(in: header)
            let cell = ownLine.utf16.dropFirst(offset)
            XCTAssertFalse(cell.first == 32, "\(column) is not aligned: \(text)")
            XCTAssertEqual(ownLine.utf16.dropFirst(offset - 1).first, 32, "\(column) is not aligned: \(text)")
        }
        XCTAssertTrue(ownLine.hasSuffix("this device"), text)

        // --log-level shows what Salut's libraries do on the way (the daemon's state, here).
        let (verboseStatus, verbose) = try lab.run([
            "peers", "--config", lab.path("mine"), "--json", "--timeout", "1", "--log-level", "debug",
        ])
        XCTAssertEqual(verboseStatus, 0, verbose)
        XCTAssertTrue(verbose.contains("peerxfer: debug: "), verbose)
        XCTAssertEqual(try lab.run(["peers", "--log-level", "loud"]).status, 2)
    }

    func testWithoutAvahiDaemonTheToolSaysSoInsteadOfNotFound() throws {
        let lab = try PeerXferLab()
        try lab.makeFile("src/a.txt", size: 10)
        let noBus = ["env", "DBUS_SYSTEM_BUS_ADDRESS=unix:path=/nonexistent"]
        for arguments in [["peers"], ["send", lab.path("src/a.txt"), "--to", "Anyone", "--config", lab.path("c")]] {
            let process = try Foreign(noBus + [PeerXferLab.binary] + arguments)
            let output = process.finish(seconds: 30)
            XCTAssertEqual(process.process.terminationStatus, 1, "\(arguments): \(output)")
            XCTAssertTrue(output.contains("avahi-daemon"), "\(arguments): \(output)")
        }
        // Bad arguments are still a usage error without the daemon.
        XCTAssertEqual(symlink("/etc/hostname", lab.path("only-a-link")), 0)
        let process = try Foreign(
            noBus + [PeerXferLab.binary, "send", lab.path("only-a-link"), "--to", "Anyone", "--config", lab.path("c")])
        let output = process.finish(seconds: 30)
        XCTAssertEqual(process.process.terminationStatus, 2, output)
        XCTAssertTrue(output.contains("nothing to send"), output)
    }

    func testABackgroundSendSurvivesItsDaemonsSIGKILLAndIsDeliveredWhenTheReceiverComesUp() throws {
        let lab = try PeerXferLab()
        let outbox = PeerXferLab.uniqueName("Outbox")
        let receiverName = PeerXferLab.uniqueName("Later")
        try lab.makeFile("src/queued.bin", size: 3 * chunk + 1, seed: 5)
        let daemon = try lab.serve(name: outbox, config: "sender", inbox: lab.path("sender-inbox"))
        let (queued, queuedOutput) = try lab.run([
            "send", lab.path("src/queued.bin"), "--to", receiverName,
            "--config", lab.path("sender"), "--background", "--accept-new-key",
        ])
        XCTAssertEqual(queued, 0, queuedOutput)
        XCTAssertTrue(queuedOutput.contains("queued"), queuedOutput)
        // The id it printed is the one the daemon's log and `status` name the send by.
        let taskID = try XCTUnwrap(
            queuedOutput.range(of: #"\(task [0-9a-f]{8}\)"#, options: .regularExpression)
                .map { String(queuedOutput[$0].dropFirst(6).dropLast()) }, queuedOutput)
        XCTAssertTrue(daemon.waitForOutput(containing: "waiting for the service", seconds: 20), daemon.output)
        XCTAssertTrue(daemon.output.contains("background send task \(taskID) ("), daemon.output)

        // The daemon dies while it waits; the queue is on disk, and a new daemon takes it over.
        kill(daemon.process.processIdentifier, SIGKILL)
        XCTAssertTrue(daemon.waitForExit(seconds: 10))
        let (_, status) = try lab.run(["status", "--config", lab.path("sender")])
        XCTAssertTrue(status.contains("queued.bin") && status.contains("waiting for the service"), status)
        let restarted = try lab.serve(name: outbox, config: "sender", inbox: lab.path("sender-inbox"))

        try lab.serve(name: receiverName, config: "receiver", inbox: lab.path("inbox"))
        XCTAssertTrue(restarted.waitForOutput(containing: "delivered and verified", seconds: 60), restarted.output)
        XCTAssertTrue(PeerXferLab.sameContents(lab.path("src/queued.bin"), lab.path("inbox/queued.bin")))
        // The status file is written behind the log: look until it shows the send, or 20 s.
        let delivered = "out to \(receiverName) (task \(taskID), \(lab.path("src/queued.bin"))), 1 file, "
        let after = try lab.status(of: "sender", once: delivered)
        XCTAssertTrue(after.contains(delivered) && after.contains(": done, 1/1 verified"), after)
        XCTAssertTrue(after.contains("background queue: empty"), after)
        XCTAssertTrue(restarted.output.contains("background send task \(taskID) ("), restarted.output)
        // JSON carries the whole id, which `send --background --json` prints.
        let (_, json) = try lab.run(["status", "--json", "--config", lab.path("sender")])
        let transfers =
            (try JSONSerialization.jsonObject(with: Data(json.utf8)) as? [String: Any])?["transfers"]
            as? [[String: Any]]
        let out = try XCTUnwrap(transfers?.first { $0["direction"] as? String == "out" }, json)
        XCTAssertTrue((out["task"] as? String ?? "").hasPrefix(taskID), json)
        XCTAssertEqual((out["task"] as? String)?.count, 36, json)
        XCTAssertEqual(out["path"] as? String, lab.path("src/queued.bin"), json)

        // With the receiver there, no "not on the link" note, and the log names the new task.
        try lab.makeFile("src/second.bin", size: 1000, seed: 7)
        let (again, againOutput) = try lab.run([
            "send", lab.path("src/second.bin"), "--to", receiverName,
            "--config", lab.path("sender"), "--background", "--accept-new-key",
        ])
        XCTAssertEqual(again, 0, againOutput)
        XCTAssertFalse(againOutput.contains("note:"), "no note at all when the receiver answers: \(againOutput)")
        let secondID = try XCTUnwrap(
            againOutput.range(of: #"\(task [0-9a-f]{8}\)"#, options: .regularExpression)
                .map { String(againOutput[$0].dropFirst(6).dropLast()) }, againOutput)
        XCTAssertTrue(
            restarted.waitForOutput(
                containing:
                    "task \(secondID) (\(lab.path("src/second.bin"))) to \"\(receiverName)\" delivered and verified",
                seconds: 60), restarted.output)
    }

    func testCancelTakesAQueuedBackgroundSendOffTheDaemonsQueue() throws {
        let lab = try PeerXferLab()
        let daemon = try daemonWaitingWithAQueuedSend("unwanted.bin", in: lab)
        let (_, listed) = try lab.run(["status", "--config", lab.path("sender")])
        let id = try XCTUnwrap(
            listed.split(separator: "\n").first { $0.contains("unwanted.bin") }?
                .split(separator: " ").dropFirst().first.map { String($0.dropLast()) }, listed)

        // Wrong ids and arguments: usage errors (2) or not found (1), and nothing is cancelled.
        XCTAssertEqual(try lab.run(["cancel", "--config", lab.path("sender")]).status, 2)
        XCTAssertEqual(try lab.run(["cancel", "zz-not-hex", "--config", lab.path("sender")]).status, 2)
        XCTAssertEqual(try lab.run(["cancel", "0000ffff", "--config", lab.path("sender")]).status, 1)

        let (cancelled, output) = try lab.run(["cancel", id, "--config", lab.path("sender")])
        XCTAssertEqual(cancelled, 0, output)
        XCTAssertTrue(output.contains("cancelled") && output.contains("unwanted.bin"), output)
        // The daemon hears of it and ends the send, as cancelled (not failed); the queue is empty.
        XCTAssertTrue(
            daemon.waitForOutput(containing: "(\(lab.path("src/unwanted.bin"))) to ", seconds: 20)
                && daemon.waitForOutput(containing: "cancelled", seconds: 20), daemon.output)
        XCTAssertFalse(daemon.output.contains("failed: cancelled"), daemon.output)
        let after = try lab.status(of: "sender", once: ": cancelled")
        XCTAssertTrue(after.contains("unwanted.bin), 1 file, ") && after.contains(": cancelled\n"), after)
        XCTAssertTrue(after.contains("background queue: empty"), after)
        XCTAssertEqual(try lab.run(["cancel", id, "--config", lab.path("sender")]).status, 1, "already gone")
    }

    /// `peerxfer cancel` of a background send whose offer is being decided: the receiver's
    /// question is withdrawn (its hook stopped), and the part file an earlier send of the same
    /// file left there is removed, said in its log; the sender's status says cancelled.
    func testCancellingABackgroundSendTellsTheReceiverWhichRemovesItsPartFile() throws {
        let lab = try PeerXferLab()
        try lab.makeFile("src/big.bin", size: 3 * chunk, seed: 5)
        // What an earlier, interrupted send of it left in the receiver's inbox.
        let inbox = try Inbox(path: lab.path("inbox"))
        let part = try inbox.openPart(
            try RelativePath(validating: "big.bin"), for: try lab.key(ofConfig: "sender"))
        try part.write(Data(repeating: 7, count: chunk), at: 0)
        part.closeFiles()
        let partPath = try lab.partPath("inbox/big.bin", sentWith: "sender")
        XCTAssertTrue(FileManager.default.fileExists(atPath: partPath))

        let receiverName = PeerXferLab.uniqueName("Mulling")
        let receiver = try lab.serve(
            name: receiverName, config: "receiver", inbox: lab.path("inbox"), accept: "ask",
            extra: ["--hook", "exec sleep 100"])
        let daemon = try lab.serve(
            name: PeerXferLab.uniqueName("Outbox"), config: "sender", inbox: lab.path("sender-inbox"))
        let (queued, output) = try lab.run([
            "send", lab.path("src/big.bin"), "--to", receiverName, "--config", lab.path("sender"), "--background",
            "--accept-new-key",
        ])
        XCTAssertEqual(queued, 0, output)
        let waiting = try lab.status(of: "sender", once: "'s answer")
        let id = try XCTUnwrap(
            waiting.split(separator: "\n").first { $0.contains("big.bin") }?
                .split(separator: " ").dropFirst().first.map { String($0.dropLast()) }, waiting)
        XCTAssertEqual(try lab.run(["cancel", id, "--config", lab.path("sender")]).status, 0)

        XCTAssertTrue(
            receiver.waitForOutput(
                containing: "cancelled by the sender after 0 bytes: 1 part file removed", seconds: 20),
            receiver.output)
        XCTAssertFalse(FileManager.default.fileExists(atPath: partPath), "the part file was removed")
        XCTAssertEqual(PeerXferLab.listing(lab.path("inbox")), [])
        let after = try lab.status(of: "sender", once: ": cancelled")
        XCTAssertTrue(after.contains("big.bin"), after)
        XCTAssertFalse(daemon.output.contains("failed"), daemon.output)

        // A daemon that stops is no cancel: the receiver hears the send stopped (its question
        // withdrawn), and the send stays queued for the next start. (The receiver is still new
        // here: a first contact that was not accepted pinned nothing.)
        XCTAssertNil(
            try KnownPeers.load(from: lab.path("sender/known-peers.json")).pins[receiverName],
            "pinned only once an offer is accepted")
        try lab.makeFile("src/later.bin", size: 1000, seed: 8)
        XCTAssertEqual(
            try lab.run([
                "send", lab.path("src/later.bin"), "--to", receiverName, "--config", lab.path("sender"),
                "--background", "--accept-new-key",
            ]).status, 0)
        _ = try lab.status(of: "sender", once: "'s answer")
        kill(daemon.process.processIdentifier, SIGTERM)
        XCTAssertTrue(daemon.waitForExit(seconds: 20), daemon.output)
        XCTAssertTrue(
            receiver.waitForOutput(
                containing: "the sender stopped the send before its offer was answered; its question was withdrawn",
                seconds: 20), receiver.output)
        let (_, kept) = try lab.run(["status", "--config", lab.path("sender")])
        XCTAssertTrue(kept.contains("later.bin") && !kept.contains("background queue: empty"), kept)
    }

    func testStoppingTheDaemonWithSIGTERMKeepsTheBackgroundQueue() throws {
        let lab = try PeerXferLab()
        let daemon = try daemonWaitingWithAQueuedSend("kept.bin", in: lab)
        // `systemctl stop`, a reboot: a stop, not a cancel.
        kill(daemon.process.processIdentifier, SIGTERM)
        XCTAssertTrue(daemon.waitForExit(seconds: 20), daemon.output)
        let (_, status) = try lab.run(["status", "--config", lab.path("sender")])
        XCTAssertTrue(status.contains("kept.bin"), status)
        XCTAssertFalse(status.contains("background queue: empty"), status)
    }

    /// A daemon (config "sender") with `file` queued by `send --background` for a receiver that
    /// is not there, once the daemon says it waits for it.
    func testABackgroundSendDeclinedByAHookIsRecordedAsSuchNotAsFailed() throws {
        let lab = try PeerXferLab()
        try lab.makeFile("src/no.bin", size: 100)
        try lab.serve(name: PeerXferLab.uniqueName("Outbox"), config: "sender", inbox: lab.path("sender-inbox"))
        let receiverName = PeerXferLab.uniqueName("Says no")
        try lab.serve(
            name: receiverName, config: "receiver", inbox: lab.path("inbox"), accept: "ask",
            extra: ["--hook", "cat >/dev/null; exit 1"])
        let (queued, output) = try lab.run([
            "send", lab.path("src/no.bin"), "--to", receiverName, "--config", lab.path("sender"), "--background",
            "--accept-new-key",
        ])
        XCTAssertEqual(queued, 0, output)
        let shown = try lab.status(of: "sender", once: ": declined by the accept hook")
        XCTAssertTrue(
            shown.contains(": declined by the accept hook (the receiver says: declined by the receiver's accept hook)"),
            shown)
        XCTAssertFalse(shown.contains("failed"), shown)
    }

    func testABackgroundSendIsWatchedFromTheSenderPhaseByPhase() throws {
        let lab = try PeerXferLab()
        try lab.makeFile("src/folder/a.bin", size: 1000)
        try lab.makeFile("src/folder/b.bin", size: 2000, seed: 2)
        try lab.makeFile("src/folder/c.bin", size: 3000, seed: 3)
        try lab.serve(name: PeerXferLab.uniqueName("Outbox"), config: "sender", inbox: lab.path("sender-inbox"))
        // A receiver whose hook takes its time: the sender's status shows the wait for it.
        let receiverName = PeerXferLab.uniqueName("Slow to answer")
        let go = lab.path("go")
        try lab.serve(
            name: receiverName, config: "receiver", inbox: lab.path("inbox"), accept: "ask",
            extra: ["--hook", "cat >/dev/null; while [ ! -e '\(go)' ]; do sleep 0.1; done"])
        let (queued, output) = try lab.run([
            "send", lab.path("src/folder"), "--to", receiverName, "--config", lab.path("sender"), "--background",
            "--accept-new-key",
        ])
        XCTAssertEqual(queued, 0, output)
        let waiting = try lab.status(of: "sender", once: "waiting for \(receiverName)'s answer (")
        XCTAssertTrue(waiting.contains(", 3 files, 6 KB: waiting for \(receiverName)'s answer ("), waiting)
        XCTAssertTrue(waiting.contains(" left)"), waiting)
        // The queue's line says the same, not "transferring".
        XCTAssertTrue(waiting.contains("→ \"\(receiverName)\": waiting for \"\(receiverName)\"'s answer (#"), waiting)
        // In JSON: the state and since when.
        let (_, json) = try lab.run(["status", "--json", "--config", lab.path("sender")])
        XCTAssertTrue(json.contains("\"state\":\"waiting-for-answer\""), json)
        XCTAssertTrue(FileManager.default.createFile(atPath: go, contents: nil))
        let done = try lab.status(of: "sender", once: ": done, 3/3 verified")
        XCTAssertTrue(done.contains("out to \(receiverName) (task "), done)
        XCTAssertTrue(done.contains("background queue: empty"), done)
        // The receiver's own status: from whom, what, and that it was done.
        let received = try lab.status(of: "receiver", once: ": done, 3/3 verified")
        XCTAssertTrue(received.contains(", 3 files, 6 KB: done"), received)
    }

    private func daemonWaitingWithAQueuedSend(_ file: String, in lab: PeerXferLab) throws -> Foreign {
        try lab.makeFile("src/" + file, size: 1000, seed: 6)
        let daemon = try lab.serve(
            name: PeerXferLab.uniqueName("Outbox"), config: "sender", inbox: lab.path("sender-inbox"))
        let (queued, output) = try lab.run([
            "send", lab.path("src/" + file), "--to", PeerXferLab.uniqueName("Away"),
            "--config", lab.path("sender"), "--background", "--accept-new-key",
        ])
        XCTAssertEqual(queued, 0, output)
        XCTAssertTrue(daemon.waitForOutput(containing: "waiting for the service", seconds: 20), daemon.output)
        return daemon
    }
}
