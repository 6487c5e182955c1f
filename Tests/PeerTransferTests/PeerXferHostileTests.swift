import Foundation
@testable import PeerTransferCore
import Salut
import SalutTestSupport
import XCTest

/// A hand-written hostile sender (Tests/Hostile/peerxfer_hostile.py, Python's ssl) against a
/// real `peerxfer serve`: bad paths, oversized and malformed frames, lies about sizes, and
/// silence. The receiver must refuse each with a typed failure, write nothing outside its
/// inbox (nor under a wrong name inside it), and keep serving good senders.
final class PeerXferHostileTests: XCTestCase {
    private static let script = PeerXferLab.root.appendingPathComponent("Tests/Hostile/peerxfer_hostile.py").path

    private struct Outcome {
        var failureCodes: [String]
        var messages: [String]
        var closed: Bool
        var raw: String
    }

    private func attack(_ mode: String, port: Int, certificate: TestCertificate, wait: Double = 10) throws -> Outcome {
        let client = try Foreign([
            "python3", Self.script, mode, "\(port)", "--cert", certificate.certificateFile,
            "--key", certificate.keyFile, "--wait", "\(wait)",
        ])
        let output = client.finish(seconds: wait + 30)
        guard let line = output.split(separator: "\n").last(where: { $0.hasPrefix("{") }),
            let object = try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any],
            let frames = object["frames"] as? [[String: Any]]
        else {
            XCTFail("\(mode): no report from the hostile client: \(output)")
            return Outcome(failureCodes: [], messages: [], closed: false, raw: output)
        }
        let failures = frames.filter { $0["kind"] as? Int == 0x7f }.compactMap { $0["json"] as? [String: Any] }
        return Outcome(
            failureCodes: failures.compactMap { $0["code"] as? String },
            messages: failures.compactMap { $0["message"] as? String },
            closed: object["closed"] as? Bool ?? false, raw: output)
    }

    func testBadPathsBadFramesAndLiesAreRefusedAndNothingLeavesTheInbox() throws {
        let lab = try PeerXferLab()
        let name = PeerXferLab.uniqueName("Hostile")
        let inbox = lab.path("inbox")
        let outside = lab.path("outside")
        try FileManager.default.createDirectory(atPath: inbox, withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: outside, withIntermediateDirectories: true)
        // A symlink inside the inbox that leads out of it.
        try FileManager.default.createSymbolicLink(atPath: inbox + "/link", withDestinationPath: outside)
        let daemon = try lab.serve(name: name, config: "receiver", inbox: inbox)
        let port =
            daemon.output.components(separatedBy: "on port ").last.flatMap { Int($0.prefix { $0.isNumber }) } ?? 0
        let certificate = try TestCertificate.make()

        let expectations: [(mode: String, code: String, text: String)] = [
            ("traversal", "path", "\"..\" component"),
            ("combining", "path", "\"..\" component"),
            ("absolute", "path", "is absolute"),
            ("nul", "path", "control character"),
            ("control", "path", "control character"),
            ("huge-frame", "limit", "the limit is"),
            ("garbage", "protocol", "unknown message kind"),
            ("version", "protocol", "version 99"),
            ("bad-chunk", "protocol", "chunks of"),
            ("flood", "protocol", "chunks of"),
            ("interleave", "protocol", "one after another"),
            // Refused from the header: the rest of the frame never comes, and need not.
            ("early-chunk", "protocol", "chunk message before the hello"),
            ("big-hello", "limit", "before the hello"),
        ]
        for (mode, code, text) in expectations {
            let outcome = try attack(mode, port: port, certificate: certificate)
            XCTAssertEqual(outcome.failureCodes, [code], "\(mode): \(outcome.raw)")
            XCTAssertTrue(outcome.messages.contains { $0.contains(text) }, "\(mode): \(outcome.messages)")
            XCTAssertFalse(outcome.messages.joined().contains("\u{1b}"), "\(mode): raw escapes sent back")
            XCTAssertTrue(outcome.closed, "\(mode): the receiver must close the connection")
        }
        // A symlink planted in the inbox where a folder goes fails the files below it, alone:
        // their result says why, nothing is written through it, and the transfer goes on.
        let planted = try attack("symlink", port: port, certificate: certificate)
        XCTAssertEqual(planted.failureCodes, [], planted.raw)
        XCTAssertTrue(planted.raw.contains("\"verified\": false") && planted.raw.contains("is a symlink"), planted.raw)
        XCTAssertEqual(PeerXferLab.listing(outside), [], "something was written outside the inbox")
        XCTAssertFalse(FileManager.default.fileExists(atPath: "/tmp/peerxfer-absolute.txt"))
        XCTAssertFalse(FileManager.default.fileExists(atPath: lab.path("escape.txt")))
        // (A part file of a half-sent accepted offer may stay, for a resume; never a final name.)
        XCTAssertEqual(
            PeerXferLab.listing(inbox).filter { !$0.hasPrefix("link") && !$0.hasSuffix(".peerxfer-part") }, [],
            "no file may appear in the inbox from a refused offer")
        XCTAssertFalse(daemon.output.contains("\u{1b}"), "the daemon's log must escape the peer's name")

        // A time no file system holds (1e300) is left out, not a crash: the file arrives.
        let bogus = try attack("bogus-mtime", port: port, certificate: certificate)
        XCTAssertEqual(bogus.failureCodes, [], bogus.raw)
        XCTAssertTrue(bogus.raw.contains("\"verified\": true"), bogus.raw)
        XCTAssertTrue(FileManager.default.fileExists(atPath: inbox + "/when.txt"))

        // A peer that completes the handshake and says nothing is dropped by the first-byte bound.
        let silent = try attack("silent", port: port, certificate: certificate, wait: 20)
        XCTAssertTrue(silent.closed, "a silent peer must be cut: \(silent.raw)")

        // And after all that, a good sender is served.
        try lab.makeFile("src/good.txt", size: 1000)
        let (status, output) = try lab.send([lab.path("src/good.txt")], to: name, config: "sender")
        XCTAssertEqual(status, 0, output)
        XCTAssertTrue(PeerXferLab.sameContents(lab.path("src/good.txt"), inbox + "/good.txt"))
    }

    func testASenderThatTricklesIsCutOnceItFallsBehindTheMinimumRate() throws {
        let lab = try PeerXferLab()
        let name = PeerXferLab.uniqueName("Pace")
        // 4 MB/s after 1 s: a 64 MiB offer must be done within about 18 s; one chunk a second
        // (1 MiB/s) is far behind.
        let daemon = try lab.serve(
            name: name, config: "receiver", inbox: lab.path("inbox"),
            extra: ["--minimum-rate", "4000000", "--slow-grace", "1"])
        let port =
            daemon.output.components(separatedBy: "on port ").last.flatMap { Int($0.prefix { $0.isNumber }) } ?? 0
        let certificate = try TestCertificate.make()
        let outcome = try attack("trickle", port: port, certificate: certificate, wait: 60)
        XCTAssertEqual(outcome.failureCodes, ["limit"], outcome.raw)
        XCTAssertTrue(outcome.messages.contains { $0.contains("too slow") }, "\(outcome.messages)")
        XCTAssertTrue(outcome.closed, "the receiver must close the connection: \(outcome.raw)")
        XCTAssertEqual(try lab.run(["serve", "--slow-grace=-5"]).status, 2)
    }

    func testASenderThatStopsMidFileIsDroppedAfterTheIdleTimeoutAndTheLogSaysWhy() throws {
        let lab = try PeerXferLab()
        let name = PeerXferLab.uniqueName("Stall")
        let daemon = try lab.serve(
            name: name, config: "receiver", inbox: lab.path("inbox"), extra: ["--idle-timeout", "2"])
        let port =
            daemon.output.components(separatedBy: "on port ").last.flatMap { Int($0.prefix { $0.isNumber }) } ?? 0
        let certificate = try TestCertificate.make()
        let outcome = try attack("stall", port: port, certificate: certificate, wait: 20)
        XCTAssertTrue(outcome.closed, "a stalled sender must be cut: \(outcome.raw)")
        XCTAssertTrue(
            daemon.waitForOutput(containing: "no progress from the sender for 2", seconds: 10),
            "the log names the idle timeout, not a closed stream: \(daemon.output)")
        XCTAssertFalse(FileManager.default.fileExists(atPath: lab.path("inbox/stalled.bin")), "never named unfinished")
        let parts = (try? FileManager.default.contentsOfDirectory(atPath: lab.path("inbox"))) ?? []
        XCTAssertTrue(
            parts.contains { $0.hasPrefix("stalled.bin.") && $0.hasSuffix(".peerxfer-part") },
            "its part file is kept: \(parts)")
        // Not every connection is a transfer: an HTTP request is counted as one that never
        // offered anything (in the interval's summary line), not as a transfer to resume.
        let http = try Foreign([
            "python3", "-c",
            "import socket; s = socket.create_connection(('127.0.0.1', \(port))); s.sendall(b'GET / HTTP/1.0\\r\\n\\r\\n'); s.recv(100)",
        ])
        XCTAssertTrue(http.waitForExit(seconds: 20), http.output)
        XCTAssertTrue(
            daemon.waitForOutput(
                containing: "1 connection ended before any offer (the last: TLS handshake failed", seconds: 20),
            daemon.output)
        for bad in ["0", "3601", "nan", "-1"] {
            let run = try lab.run(["serve", "--idle-timeout", bad])
            XCTAssertEqual(run.status, 2, bad)
            // A negative number is a value out of range, not a missing value.
            XCTAssertTrue(run.output.contains("--idle-timeout must be 1…3600 seconds"), run.output)
        }
        let wait = try lab.run(["send", lab.path("inbox"), "--to", "nobody", "--wait", "-1"])
        XCTAssertEqual(wait.status, 2, wait.output)
        XCTAssertTrue(wait.output.contains("--wait must be a number of seconds above 0"), wait.output)
    }

    func testOffersOfALargePartFileThenHangUpsCostOneHashingAndHoldNoSlot() throws {
        // A peer left a large part file (sparse here), then offers that file again and again
        // and hangs up. Before, each offer re-read and re-hashed it, holding a transfer slot.
        let lab = try PeerXferLab()
        let name = PeerXferLab.uniqueName("Hashed")
        let certificate = try TestCertificate.make()
        let inbox = lab.path("inbox")
        try FileManager.default.createDirectory(atPath: inbox, withIntermediateDirectories: true)
        let part = inbox + "/" + TransferLimits.partName(of: "big.bin", from: certificate.publicKeySHA256)
        let size: UInt64 = 1 << 30  // 1 GiB: the 4 GiB of the attack report cost a minute of CI for the same proof
        XCTAssertTrue(FileManager.default.createFile(atPath: part, contents: nil))
        XCTAssertEqual(truncate(part, off_t(size)), 0)
        // Recorded as that sender's, as the receiver records it.
        let recorded = try Foreign([
            "python3", "-c", "import os, sys; os.setxattr(sys.argv[1], 'user.peerxfer.sender', sys.argv[2].encode())",
            part, certificate.publicKeySHA256,
        ])
        XCTAssertTrue(recorded.waitForExit(seconds: 10))
        XCTAssertEqual(recorded.process.terminationStatus, 0, recorded.output)
        // Older than the timestamp granularity, so that its digests may be remembered.
        var times = [timespec(tv_sec: time(nil) - 60, tv_nsec: 0), timespec(tv_sec: time(nil) - 60, tv_nsec: 0)]
        XCTAssertEqual(utimensat(AT_FDCWD, part, &times, 0), 0)
        let daemon = try lab.serve(name: name, config: "receiver", inbox: inbox, extra: ["--log-level", "debug"])
        let port =
            daemon.output.components(separatedBy: "on port ").last.flatMap { Int($0.prefix { $0.isNumber }) } ?? 0
        let offer = { (mode: String) in
            try Foreign([
                "python3", Self.script, mode, "\(port)", "--cert", certificate.certificateFile, "--key",
                certificate.keyFile,
                "--wait", "60", "--size", "\(size + 1)",
            ]).finish(seconds: 90)
        }
        // The first offer waits for its answer: the part file is hashed once, and its
        // chunks are offered back (1024 of them).
        let answered = try offer("offer-wait")
        XCTAssertTrue(answered.contains("\"have\""), answered)
        // Twenty more, each hung up at once.
        for _ in 0..<20 { _ = try offer("offer-hangup") }
        // A good sender is served at once, and the part file was hashed once in all.
        try lab.makeFile("src/after.txt", size: 100)
        let (status, output) = try lab.send([lab.path("src/after.txt")], to: name, config: "sender", seconds: 30)
        XCTAssertEqual(status, 0, output)
        XCTAssertTrue(daemon.waitForOutput(containing: "transfer from", seconds: 10), daemon.output)
        let hashings = daemon.output.components(separatedBy: "hashed part files 1 time(s)").count - 1
        XCTAssertEqual(
            hashings, 1, daemon.output.split(separator: "\n").filter { $0.contains("hashed") }.joined(separator: "\n"))
        XCTAssertTrue(FileManager.default.fileExists(atPath: part), "the part file stays for its sender")
    }

    func testIdleAndSilentConnectionsTakeNoTransferSlotAndAreCountedNotLoggedEach() throws {
        let lab = try PeerXferLab()
        let name = PeerXferLab.uniqueName("Held")
        let daemon = try lab.serve(name: name, config: "receiver", inbox: lab.path("inbox"))
        let port =
            daemon.output.components(separatedBy: "on port ").last.flatMap { Int($0.prefix { $0.isNumber }) } ?? 0
        XCTAssertGreaterThan(port, 0)
        let certificate = try TestCertificate.make()
        try lab.makeFile("src/a.bin", size: 300_000)
        for idle in [8, 64] {
            // Bare TCP connections that say nothing, and TLS clients that finish the handshake
            // and say nothing: before, 8 of either made every sender "busy".
            let clients = try (0..<idle).map { _ in try RawClient(port: port) }
            let silent = try (0..<8).map { _ in
                try Foreign([
                    "python3", Self.script, "silent", "\(port)", "--cert", certificate.certificateFile,
                    "--key", certificate.keyFile, "--wait", "8",
                ])
            }
            let (status, output) = try lab.send([lab.path("src/a.bin")], to: name, config: "sender")
            XCTAssertEqual(status, 0, "\(idle) idle connections: \(output)")
            XCTAssertTrue(PeerXferLab.sameContents(lab.path("src/a.bin"), lab.path("inbox/a.bin")))
            try FileManager.default.removeItem(atPath: lab.path("inbox/a.bin"))
            for client in silent { _ = client.finish(seconds: 40) }
            withExtendedLifetime(clients) {}
        }
        // One summary line per interval, not a line per connection.
        XCTAssertTrue(daemon.waitForOutput(containing: "ended before any offer", seconds: 30), daemon.output)
        let perConnection = daemon.output.components(separatedBy: "the connection ended before any offer").count - 1
        XCTAssertEqual(perConnection, 0, daemon.output)
    }
}
