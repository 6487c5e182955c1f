import Foundation
import XCTest
@testable import PeerTransferCore

/// What the daemon's status file says of its transfers, as `peerxfer status` reads it.
final class StatusBookTests: XCTestCase {
    private var file = ""

    override func setUp() {
        file = FileManager.default.temporaryDirectory.appendingPathComponent("px-status-\(UUID().uuidString).json").path
    }

    override func tearDown() {
        try? FileManager.default.removeItem(atPath: file)
    }

    private func transfers() throws -> [DaemonStatus.Transfer] {
        try XCTUnwrap(try DaemonStatus.load(from: file)).transfers
    }

    func testAnOfferIsAskingUntilAnsweredAndEndsUnderItsOwnOutcome() throws {
        let book = StatusBook(file: file)
        book.started(name: "R", port: 1, inbox: "/i", key: "k")
        book.record(.offered(id: 1, sender: "\"S\" (claimed) [key ab…]", key: "k", files: 3, bytes: 30))
        book.flush()
        XCTAssertEqual(try transfers().last?.state, "asking", "not 'receiving 0%' while the question is open")
        book.record(.answered(id: 1))
        book.flush()
        XCTAssertEqual(try transfers().last?.state, "receiving")
        book.record(.ended(id: 1, verified: 0, failed: 0, error: .noAnswer("no answer: no one answered")))
        book.record(.offered(id: 2, sender: "S", key: "k", files: 1, bytes: 1))
        book.record(.ended(id: 2, verified: 0, failed: 0, error: .declinedByPolicy("not trusted")))
        book.record(.offered(id: 3, sender: "S", key: "k", files: 1, bytes: 1))
        book.record(.ended(id: 3, verified: 0, failed: 0, error: .cannotAsk("no one to ask")))
        book.stopped()
        book.flush()
        XCTAssertEqual(try transfers().map(\.state), ["no-answer", "declined-by-policy", "cannot-ask"])
    }

    func testHistorySurvivesARestartWithIdsThatStayUnique() throws {
        let first = StatusBook(file: file)
        first.started(name: "R", port: 1, inbox: "/i", key: "k")
        first.record(.offered(id: 1, sender: "S", key: "k", files: 1, bytes: 10))
        first.record(.ended(id: 1, verified: 1, failed: 0, error: nil))
        // Cut off mid-transfer (SIGKILL): no end recorded.
        first.record(.offered(id: 2, sender: "S", key: "k", files: 1, bytes: 10))
        // A background send under way: queued still, when the daemon comes back.
        first.recordOutbound(task: "t1", peer: "K", path: "/p", state: "sending", files: 1, sent: 5, total: 10)
        first.flush()

        let second = StatusBook(file: file)
        second.started(name: "R", port: 2, inbox: "/i", key: "k")
        second.record(.offered(id: 1, sender: "T", key: "k", files: 2, bytes: 20))
        second.record(.answered(id: 1))
        second.record(.ended(id: 1, verified: 2, failed: 0, error: nil))
        second.flush()
        let kept = try transfers()
        XCTAssertEqual(kept.map(\.id), [1, 2, 3, 4], "unique across runs and directions")
        XCTAssertEqual(kept.map(\.state), ["done", "interrupted", "queued", "done"])
        XCTAssertEqual(kept.map(\.peer), ["S", "S", "K", "T"])
        XCTAssertNotNil(kept[1].ended, "an interrupted transfer has ended")
        XCTAssertNil(kept[2].ended, "a queued background send has not")
        // When it runs again, its row goes on (not a second one).
        second.recordOutbound(task: "t1", peer: "K", path: "/p", state: "sending", sent: 8, total: 10)
        second.recordOutboundEnd(task: "t1", peer: "K", path: "/p", files: 1, bytes: 10, state: "done", error: nil)
        second.flush()
        let after = try transfers()
        XCTAssertEqual(after.filter { $0.task == "t1" }.map(\.state), ["done"])
    }

    func testTheHistoryIsBounded() throws {
        let book = StatusBook(file: file)
        book.started(name: "R", port: 1, inbox: "/i", key: "k")
        for id in 1...(StatusBook.historyLength + 7) {
            book.record(.offered(id: id, sender: "S", key: "k", files: 1, bytes: 1))
            book.record(.ended(id: id, verified: 1, failed: 0, error: nil))
        }
        book.flush()
        let kept = try transfers()
        XCTAssertEqual(kept.count, StatusBook.historyLength)
        XCTAssertEqual(kept.last?.id, StatusBook.historyLength + 7, "the newest are kept")
    }
}

/// How `peerxfer status` words a transfer.
final class StatusWordsTests: XCTestCase {
    private func transfer(
        _ state: String, since: Double? = 1_000, done: UInt64 = 0, of total: UInt64 = 0
    )
        -> DaemonStatus.Transfer
    {
        DaemonStatus.Transfer(
            id: 4, direction: "out", peer: "Kitchen", files: 3, bytes: total, bytesReceived: done, verified: 0,
            failed: 0, state: state, error: nil, started: 1_000, ended: nil, task: "1a2b3c4d-x", path: "/tmp/photos",
            since: since)
    }

    func testASendUnderWayShowsPercentBytesRateAndTimeLeft() {
        let line = transfer("sending", done: 40_000_000, of: 100_000_000).shown(now: 1_010)
        XCTAssertTrue(
            line.contains(
                "out to Kitchen (task 1a2b3c4d, /tmp/photos), 3 files, 100 MB: sending 40%, 40 MB of 100 MB, 4 MB/s, 0:15 left"
            ), line)
        // Before a second has passed there is no rate to show, rather than "0 bytes/s".
        let early = transfer("sending", done: 1_000, of: 100_000_000).shown(now: 1_000.5)
        XCTAssertTrue(early.hasSuffix("sending 0%, 1 KB of 100 MB"), early)
    }

    func testWaitsSayForWhomAndHowLong() {
        XCTAssertTrue(
            transfer("waiting-for-answer").shown(now: 1_018).hasSuffix("waiting for Kitchen's answer (1:42 left)"))
        XCTAssertTrue(transfer("waiting-for-receiver").shown(now: 1_018).hasSuffix("waiting for Kitchen to appear"))
        var incoming = transfer("asking")
        incoming.direction = "in"
        XCTAssertTrue(incoming.shown(now: 1_030).hasSuffix("waiting for the answer here (1:30 left)"))
    }

    func testEveryOutcomeHasItsOwnWords() {
        let words = [
            "declined": "declined by the person there", "declined-by-hook": "declined by the accept hook",
            "declined-by-policy": "declined by policy", "no-answer": "no answer in time",
            "cannot-ask": "not asked (no terminal and no hook", "cancelled": "cancelled",
            "interrupted": "interrupted (the daemon stopped)",
        ]
        for (state, text) in words {
            XCTAssertTrue(transfer(state, since: nil).shown().contains(": \(text)"), state)
        }
    }
}
