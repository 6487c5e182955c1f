import Foundation
import SalutTestSupport
import XCTest

/// peerxfer across two lab hosts, each with its own avahi-daemon and network stack: the
/// receiver on h1, the sender on h2, found by name over the lab's link.
final class LabPeerTransferTests: XCTestCase {
    static var peerxfer: String { BuiltProduct.path("peerxfer") }

    func testATreeSentFromAnotherHostArrivesVerified() throws {
        try LabHost.requireLab()
        let h1 = LabHost(name: "h1"), h2 = LabHost(name: "h2")
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent(
            "lab-peerxfer-\(UUID().uuidString.prefix(8))"
        ).path
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let tree = folder + "/outbox/tree"
        try FileManager.default.createDirectory(atPath: tree + "/sub/empty", withIntermediateDirectories: true)
        var big = Data(count: 5 << 20)
        big.withUnsafeMutableBytes { raw in
            for i in 0..<raw.count { raw[i] = UInt8(truncatingIfNeeded: i &* 31 &+ i >> 9) }
        }
        try big.write(to: URL(fileURLWithPath: tree + "/sub/big.bin"))
        try Data("héllo from h2\n".utf8).write(to: URL(fileURLWithPath: tree + "/note.txt"))

        let receiver = try h1.start([
            Self.peerxfer, "serve", "--name", "Lab Inbox", "--inbox", folder + "/inbox",
            "--config", folder + "/h1", "--accept", "all",
        ])
        defer { receiver.stop() }
        XCTAssertTrue(receiver.waitForOutput(containing: "serving", seconds: 20), receiver.output)

        // Paired the safe way: the key `identity` prints on h1, given to the sender on h2.
        let key = try h1.peerxferKey(Self.peerxfer, config: folder + "/h1")
        let out = try h2.run(
            [
                Self.peerxfer, "send", tree, "--to", "Lab Inbox", "--config", folder + "/h2", "--json",
                "--wait", "15", "--expect-key", key,
            ], timeout: 60)
        let done = out.split(separator: "\n").last { $0.contains("\"event\":\"done\"") }.map(String.init) ?? ""
        XCTAssertTrue(done.contains("\"verified\":2") && done.contains("\"failed\":0"), out)
        XCTAssertEqual(FileManager.default.contents(atPath: folder + "/inbox/tree/sub/big.bin"), big)
        XCTAssertEqual(
            FileManager.default.contents(atPath: folder + "/inbox/tree/note.txt"), Data("héllo from h2\n".utf8))
        var isFolder: ObjCBool = false
        XCTAssertTrue(
            FileManager.default.fileExists(atPath: folder + "/inbox/tree/sub/empty", isDirectory: &isFolder)
                && isFolder.boolValue)
        XCTAssertTrue(receiver.output.contains("offer from"), "the receiver on h1 logged the offer: \(receiver.output)")
    }
}
