import Foundation
import SalutTestSupport
import XCTest

/// A daemon gives back what each transfer takes. Every round sends a file larger than the
/// sink's flush step (its bytes go through the write, hash and flush queues) and a tree of
/// small files in several batches (each batch synced and named on a thread of its own); after
/// each round the daemon must be back to the descriptors and threads it had after the first.
final class PeerXferSoakTests: XCTestCase {
    private static let rounds = 5

    func testTheDaemonIsBackToItsDescriptorsAndThreadsAfterEveryTransfer() throws {
        let lab = try PeerXferLab()
        let name = PeerXferLab.uniqueName("Soak")
        let daemon = try lab.serve(name: name, config: "receiver", inbox: lab.path("inbox"))
        let pid = daemon.process.processIdentifier
        var baseline: (descriptors: Int, threads: Int)?
        for round in 0..<Self.rounds {
            // New bytes each round: nothing is found already there, everything is written.
            try lab.makeFile("src/r\(round)/big.bin", size: 40 << 20, seed: UInt64(round + 1))
            for index in 0..<600 {
                try lab.makeFile(
                    "src/r\(round)/tree/d\(index % 4)/f\(index).txt", size: 1 + index * 37 % 5000,
                    seed: UInt64(round * 1000 + index))
            }
            let (status, output) = try lab.send([lab.path("src/r\(round)")], to: name, config: "sender", seconds: 120)
            XCTAssertEqual(status, 0, output)
            XCTAssertTrue(
                PeerXferLab.sameContents(lab.path("src/r\(round)/big.bin"), lab.path("inbox/r\(round)/big.bin")))
            // The sender returns on the summary; the daemon closes the connection just after.
            guard let before = baseline else {
                XCTAssertTrue(daemon.waitForOutput(containing: "complete: 601 verified", seconds: 10), daemon.output)
                baseline = try settled(pid, atMost: nil)
                continue
            }
            let now = try settled(pid, atMost: before)
            let open = try openDescriptors(pid)
            XCTAssertLessThanOrEqual(
                now.descriptors, before.descriptors,
                "round \(round + 1): descriptors not given back: \(open)")
            XCTAssertLessThanOrEqual(now.threads, before.threads, "round \(round + 1): threads not given back")
        }
    }

    /// The daemon's open descriptors and threads once they stop falling: at most `limit` within
    /// 20 s (threads of a shared pool retire a few seconds after their last job), or, with no
    /// limit, once two looks 200 ms apart agree.
    private func settled(
        _ pid: Int32, atMost limit: (descriptors: Int, threads: Int)?
    ) throws -> (descriptors: Int, threads: Int) {
        try settledReading(timeout: 20, interval: 0.2, { try counts(pid) }) { now, previous in
            guard let limit else { return previous.map { $0 == now } ?? false }
            return now.descriptors <= limit.descriptors && now.threads <= limit.threads
        }
    }

    private func counts(_ pid: Int32) throws -> (descriptors: Int, threads: Int) {
        (try openDescriptors(pid).count, try FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/task").count)
    }

    /// What each open descriptor of `pid` is (for a failure's message).
    private func openDescriptors(_ pid: Int32) throws -> [String] {
        try FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/fd").map {
            (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(pid)/fd/\($0)")) ?? $0
        }
    }
}
