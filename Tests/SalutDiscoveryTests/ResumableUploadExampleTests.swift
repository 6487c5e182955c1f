import Foundation
import SalutTestSupport
import XCTest

/// `Examples/ResumableUpload`, the background upload the SalutSession article links to, run as
/// a user would: queued before its receiver exists, the sender killed with SIGKILL halfway,
/// relaunched, and the file delivered byte for byte, with the delegate calls in URLSession's
/// order.
final class ResumableUploadExampleTests: XCTestCase {
    static let tool = BuiltProduct.path("resumable-upload")

    func testQueuedBeforeTheReceiverKilledHalfwayRelaunchedAndDeliveredWhole() throws {
        let folder = NSTemporaryDirectory() + "salut-resumable-\(UUID().uuidString.prefix(6))"
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: folder) }
        var bytes = Data(count: 3 << 20)
        bytes.withUnsafeMutableBytes { raw in
            for index in 0..<raw.count { raw[index] = UInt8(truncatingIfNeeded: index &* 31 &+ index >> 9) }
        }
        try bytes.write(to: URL(fileURLWithPath: folder + "/file.bin"))
        let name = "Resumable \(UUID().uuidString.prefix(6))"

        // Queued while nobody answers to the name: the task waits for its service.
        let first = try Foreign([
            "/usr/bin/env", "RESUMABLE_PACE=1000000", Self.tool, "send", name, folder + "/file.bin", folder + "/state",
        ])
        defer { first.stop() }
        XCTAssertTrue(first.waitForOutput(containing: ": waiting for the service", seconds: 20), first.output)
        let receiver = try Foreign([Self.tool, "receive", name, folder + "/inbox"])
        defer { receiver.stop() }

        // Killed without a word once the receiver holds a third of it.
        XCTAssertTrue(
            eventually(timeout: 30) {
                let parts = (try? FileManager.default.contentsOfDirectory(atPath: folder + "/inbox")) ?? []
                return parts.contains { part in
                    part.hasSuffix(".part")
                        && ((try? FileManager.default.attributesOfItem(atPath: folder + "/inbox/" + part)[.size])
                            as? Int ?? 0) >= 1 << 20
                }
            }, "the receiver never held a third of the file: \(first.output)")
        XCTAssertEqual(kill(first.process.processIdentifier, SIGKILL), 0)
        XCTAssertTrue(first.waitForExit(seconds: 10))
        XCTAssertFalse(first.output.contains("complete:"), "killed before the end: \(first.output)")

        // Relaunched: it carries the task on, sends the rest, and says so in URLSession's order.
        let again = try Foreign([Self.tool, "send", name, "-", folder + "/state"])
        defer { again.stop() }
        XCTAssertTrue(again.waitForExit(seconds: 60), again.output)
        XCTAssertEqual(again.process.terminationStatus, 0, again.output)
        // (A "waiting:" line may come first, should the service take a moment to resolve.)
        let lines = again.output.split(separator: "\n").map(String.init).filter { !$0.hasPrefix("waiting:") }
        XCTAssertEqual(
            lines.map { $0.split(separator: ":").first.map(String.init) ?? $0 },
            ["relaunched", "metrics", "complete", "finished events"], again.output)
        XCTAssertTrue(again.output.contains("complete: \(folder)/file.bin: delivered"), again.output)
        XCTAssertTrue(
            again.output.contains("metrics: 2 attempt(s)"), "the first process's attempt counts: \(again.output)")
        let delivered = try FileManager.default.contentsOfDirectory(atPath: folder + "/inbox").filter {
            !$0.hasSuffix(".part")
        }
        XCTAssertEqual(delivered.count, 1, "\(delivered)")
        XCTAssertEqual(FileManager.default.contents(atPath: folder + "/inbox/" + (delivered.first ?? "")), bytes)
        XCTAssertEqual(
            try FileManager.default.contentsOfDirectory(atPath: folder + "/state/tasks").filter {
                $0.hasSuffix(".json")
            },
            [], "the record served its purpose")
    }
}
