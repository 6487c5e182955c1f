@testable import SalutStreams
import XCTest

/// The bounds of ``ConnectionDeadlines`` on a clock the test moves by hand.
final class ConnectionDeadlinesTests: XCTestCase {
    let start = ContinuousClock.now

    func at(_ seconds: Double) -> ContinuousClock.Instant { start + .milliseconds(Int64(seconds * 1000)) }

    func testATLSPeerThatNeverFinishesItsHandshakeIsCutAtTheHandshakeBound() {
        let deadlines = ConnectionDeadlines(
            handshake: .seconds(10), firstByte: .seconds(20), idle: nil, secure: true, now: start)
        XCTAssertEqual(deadlines.nextCheck, at(10))
        XCTAssertNil(deadlines.expired(at: at(9.9)))
        XCTAssertEqual(deadlines.expired(at: at(10)), .limitExceeded("the TLS handshake did not finish within 10 s"))
    }

    func testAHandshakeDoneThenSilenceIsCutAtTheFirstByteBoundCountedFromTheStart() {
        var deadlines = ConnectionDeadlines(
            handshake: .seconds(10), firstByte: .seconds(10), idle: .seconds(60), secure: true, now: start)
        XCTAssertEqual(deadlines.nextCheck, at(10), "no idle bound during the handshake")
        XCTAssertFalse(deadlines.handshakeFinished(at: at(1)))
        XCTAssertFalse(deadlines.isSetUp)
        XCTAssertEqual(deadlines.nextCheck, at(10))
        XCTAssertEqual(deadlines.expired(at: at(10)), .limitExceeded("no data within 10 s of connecting"))
    }

    func testTheFirstByteEitherWayEndsTheSetUpAndNoBoundIsLeftWithoutAnIdleBound() {
        var deadlines = ConnectionDeadlines(
            handshake: .seconds(10), firstByte: .seconds(10), idle: nil, secure: false, now: start)
        XCTAssertTrue(deadlines.carried(at: at(2)))
        XCTAssertTrue(deadlines.isSetUp)
        XCTAssertFalse(deadlines.carried(at: at(3)), "set up once only")
        XCTAssertNil(deadlines.nextCheck)
        XCTAssertNil(deadlines.expired(at: at(1000)))
    }

    func testAByteBeforeTheHandshakeEndsDoesNotEndTheSetUp() {
        var deadlines = ConnectionDeadlines(
            handshake: .seconds(5), firstByte: .seconds(10), idle: nil, secure: true, now: start)
        XCTAssertFalse(deadlines.carried(at: at(1)))
        XCTAssertEqual(deadlines.nextCheck, at(5))
        XCTAssertTrue(deadlines.handshakeFinished(at: at(2)))
        XCTAssertNil(deadlines.nextCheck)
    }

    func testTheIdleBoundCountsFromTheStartAndThenFromTheLastByte() {
        var deadlines = ConnectionDeadlines(
            handshake: nil, firstByte: nil, idle: .seconds(30), secure: false, now: start)
        XCTAssertEqual(deadlines.nextCheck, at(30), "a peer that never says anything is idle too")
        _ = deadlines.carried(at: at(1))
        XCTAssertEqual(deadlines.nextCheck, at(31))
        _ = deadlines.carried(at: at(20))
        XCTAssertNil(deadlines.expired(at: at(31)), "a byte at 20 s moved the bound")
        XCTAssertEqual(deadlines.nextCheck, at(50))
        XCTAssertEqual(deadlines.expired(at: at(50)), .limitExceeded("idle for 30 s"))
    }

    func testAnUpgradeHandshakeIsBoundedFromItsStartByItsOwnLimit() {
        var deadlines = ConnectionDeadlines(
            handshake: .seconds(10), firstByte: nil, idle: nil, secure: false, now: start)
        _ = deadlines.carried(at: at(1))
        deadlines.handshakeStarted(at: at(100), limit: .milliseconds(2500))
        XCTAssertFalse(deadlines.isSetUp)
        XCTAssertEqual(deadlines.nextCheck, at(102.5))
        XCTAssertEqual(
            deadlines.expired(at: at(102.5)), .limitExceeded("the TLS handshake did not finish within 2.5 s"))
        XCTAssertTrue(deadlines.handshakeFinished(at: at(101)))
        XCTAssertNil(deadlines.nextCheck)
    }

    func testOnlyNilMeansNoBoundAndBadValuesTakeTheDefault() {
        XCTAssertNil(ConnectionLimits.duration(nil))
        for seconds in [0, -1, .nan] as [TimeInterval] {
            XCTAssertEqual(ConnectionLimits.duration(seconds), .seconds(10), "\(seconds)")
        }
        XCTAssertEqual(ConnectionLimits.duration(.infinity), .seconds(1_000_000_000))
        XCTAssertEqual(ConnectionLimits.duration(0.25), .milliseconds(250))
    }
}
