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
        book.record(.offered(id: 1, sender: "\"S\" (claimed) [key ab…]", files: 3, bytes: 30))
        book.flush()
        XCTAssertEqual(try transfers().last?.state, "asking", "not 'receiving 0%' while the question is open")
        book.record(.answered(id: 1))
        book.flush()
        XCTAssertEqual(try transfers().last?.state, "receiving")
        book.record(.ended(id: 1, verified: 0, failed: 0, error: .noAnswer("no answer: no one answered")))
        book.record(.offered(id: 2, sender: "S", files: 1, bytes: 1))
        book.record(.ended(id: 2, verified: 0, failed: 0, error: .declinedByPolicy("not trusted")))
        book.record(.offered(id: 3, sender: "S", files: 1, bytes: 1))
        book.record(.ended(id: 3, verified: 0, failed: 0, error: .cannotAsk("no one to ask")))
        book.stopped()
        book.flush()
        XCTAssertEqual(try transfers().map(\.state), ["no-answer", "declined-by-policy", "cannot-ask"])
    }

    func testHistorySurvivesARestartWithIdsThatStayUnique() throws {
        let first = StatusBook(file: file)
        first.started(name: "R", port: 1, inbox: "/i", key: "k")
        first.record(.offered(id: 1, sender: "S", files: 1, bytes: 10))
        first.record(.ended(id: 1, verified: 1, failed: 0, error: nil))
        // Cut off mid-transfer (SIGKILL): no end recorded.
        first.record(.offered(id: 2, sender: "S", files: 1, bytes: 10))
        first.flush()

        let second = StatusBook(file: file)
        second.started(name: "R", port: 2, inbox: "/i", key: "k")
        second.record(.offered(id: 1, sender: "T", files: 2, bytes: 20))
        second.record(.answered(id: 1))
        second.record(.ended(id: 1, verified: 2, failed: 0, error: nil))
        second.flush()
        let kept = try transfers()
        XCTAssertEqual(kept.map(\.id), [1, 2, 3])
        XCTAssertEqual(kept.map(\.state), ["done", "interrupted", "done"])
        XCTAssertEqual(kept.map(\.peer), ["S", "S", "T"])
        XCTAssertNotNil(kept[1].ended, "an interrupted transfer has ended")
    }

    func testTheHistoryIsBounded() throws {
        let book = StatusBook(file: file)
        book.started(name: "R", port: 1, inbox: "/i", key: "k")
        for id in 1...(StatusBook.historyLength + 7) {
            book.record(.offered(id: id, sender: "S", files: 1, bytes: 1))
            book.record(.ended(id: id, verified: 1, failed: 0, error: nil))
        }
        book.flush()
        let kept = try transfers()
        XCTAssertEqual(kept.count, StatusBook.historyLength)
        XCTAssertEqual(kept.last?.id, StatusBook.historyLength + 7, "the newest are kept")
    }
}
