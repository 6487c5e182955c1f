import Foundation
@testable import SalutSession
import SalutTestSupport
import XCTest

/// A background upload's life, event by event, on a fake clock.
final class PeerUploadTaskStateMachineTests: SalutTestCase {
    private let t0 = Date(timeIntervalSince1970: 1_000_000)
    private func machine(
        attempts: Int = 3, stream: Bool = false, fresh: Bool = true, deadline: TimeInterval = 3600
    ) -> PeerUploadTask.StateMachine {
        PeerUploadTask.StateMachine(
            maximumAttempts: attempts, deadline: t0.addingTimeInterval(deadline), retryDelay: 1,
            maximumRetryDelay: 60, bodyIsStream: stream, hasFreshStream: fresh)
    }

    func testItWaitsForTheServiceThenTransfers() {
        var m = machine()
        XCTAssertEqual(m.start(now: t0), [.persist, .waitForService(until: t0.addingTimeInterval(3600))])
        XCTAssertEqual(m.phase, .waitingForService(attempt: 1))
        XCTAssertEqual(m.serviceVisible(now: t0), [.persist, .startAttempt(1)])
        XCTAssertEqual(m.attemptSucceeded(), [.persist, .complete(nil)])
        XCTAssertTrue(m.isFinished)
        XCTAssertEqual(m.attemptSucceeded(), [], "a finished task ignores late events")
    }

    func testFailuresWaitTwiceAsLongEachTimeAndGoBackToWaitingForTheService() {
        var m = machine(attempts: 4)
        _ = m.start(now: t0)
        _ = m.serviceVisible(now: t0)
        XCTAssertEqual(
            m.attemptFailed("lost", retryable: true, now: t0), [.persist, .sleep(until: t0.addingTimeInterval(1))])
        XCTAssertEqual(
            m.retryDelayEnded(now: t0.addingTimeInterval(1)),
            [.persist, .waitForService(until: t0.addingTimeInterval(3600))])
        XCTAssertEqual(m.serviceVisible(now: t0), [.persist, .startAttempt(2)])
        XCTAssertEqual(
            m.attemptFailed("lost", retryable: true, now: t0), [.persist, .sleep(until: t0.addingTimeInterval(2))])
        _ = m.retryDelayEnded(now: t0)
        XCTAssertEqual(m.serviceVisible(now: t0), [.persist, .startAttempt(3)])
        XCTAssertEqual(
            m.attemptFailed("lost", retryable: true, now: t0), [.persist, .sleep(until: t0.addingTimeInterval(4))])
        _ = m.retryDelayEnded(now: t0)
        _ = m.serviceVisible(now: t0)
        XCTAssertEqual(
            m.attemptFailed("still lost", retryable: true, now: t0),
            [.persist, .complete(.failed("still lost", attempts: 4, retryable: true))])
        XCTAssertEqual(m.attempts, 4)
    }

    func testAFailureThatCannotPassEndsAtOnce() {
        var m = machine()
        _ = m.start(now: t0)
        _ = m.serviceVisible(now: t0)
        XCTAssertEqual(
            m.attemptFailed("untrusted", retryable: false, now: t0),
            [.persist, .complete(.failed("untrusted", attempts: 1, retryable: false))])
    }

    func testTheDeadlineEndsWaitingAndRetriesThatWouldPassIt() {
        var waiting = machine(deadline: 10)
        _ = waiting.start(now: t0)
        XCTAssertEqual(waiting.deadlinePassed(), [.persist, .complete(.deadline)])
        var retrying = machine(deadline: 10)
        _ = retrying.start(now: t0)
        _ = retrying.serviceVisible(now: t0)
        XCTAssertEqual(
            retrying.attemptFailed("lost", retryable: true, now: t0.addingTimeInterval(9.5)),
            [.persist, .complete(.deadline)], "a retry after the deadline is not scheduled")
        var late = machine(deadline: 10)
        XCTAssertEqual(late.start(now: t0.addingTimeInterval(11)), [.persist, .complete(.deadline)])
        var seenLate = machine(deadline: 10)
        _ = seenLate.start(now: t0)
        XCTAssertEqual(seenLate.serviceVisible(now: t0.addingTimeInterval(10)), [.persist, .complete(.deadline)])
    }

    func testAStreamBodyIsAskedForAgainBeforeEveryAttemptButTheFirst() {
        var m = machine(stream: true, fresh: true)
        _ = m.start(now: t0)
        XCTAssertEqual(
            m.serviceVisible(now: t0), [.persist, .startAttempt(1)], "the app's stream serves the first attempt")
        _ = m.attemptFailed("lost", retryable: true, now: t0)
        _ = m.retryDelayEnded(now: t0)
        XCTAssertEqual(m.serviceVisible(now: t0), [.requestNewBodyStream])
        XCTAssertEqual(m.bodyStreamProvided(true), [.persist, .startAttempt(2)])
        _ = m.attemptFailed("lost", retryable: true, now: t0)
        _ = m.retryDelayEnded(now: t0)
        XCTAssertEqual(m.serviceVisible(now: t0), [.requestNewBodyStream])
        XCTAssertEqual(m.bodyStreamProvided(false), [.persist, .complete(.noBodyStream)])
        var reloaded = machine(stream: true, fresh: false)
        _ = reloaded.start(now: t0)
        XCTAssertEqual(reloaded.serviceVisible(now: t0), [.requestNewBodyStream], "after a relaunch the stream is gone")
    }

    func testCancellationEndsEveryPhase() {
        for step in 0..<4 {
            var m = machine()
            if step >= 1 { _ = m.start(now: t0) }
            if step >= 2 { _ = m.serviceVisible(now: t0) }
            if step >= 3 { _ = m.attemptFailed("lost", retryable: true, now: t0) }
            XCTAssertEqual(m.cancelled(), [.persist, .complete(.cancelled)], "step \(step)")
            XCTAssertEqual(m.cancelled(), [])
        }
    }

    func testAttemptsMadeBeforeARelaunchCount() {
        var m = PeerUploadTask.StateMachine(
            attempts: 2, maximumAttempts: 3, deadline: t0.addingTimeInterval(60), retryDelay: 1,
            maximumRetryDelay: 60, bodyIsStream: false, hasFreshStream: false)
        _ = m.start(now: t0)
        XCTAssertEqual(m.serviceVisible(now: t0), [.persist, .startAttempt(3)])
        XCTAssertEqual(
            m.attemptFailed("lost", retryable: true, now: t0),
            [.persist, .complete(.failed("lost", attempts: 3, retryable: true))])
    }

    func testARunnerThatDiedDuringTheLastAllowedAttemptDoesNotTryAgain() {
        // Restarted after a crash in attempt 3 of 3 (a crash that would repeat): it ends at once.
        var m = PeerUploadTask.StateMachine(
            attempts: 3, maximumAttempts: 3, deadline: t0.addingTimeInterval(60), retryDelay: 1,
            maximumRetryDelay: 60, bodyIsStream: false, hasFreshStream: false)
        let actions = m.start(now: t0)
        guard case .complete(.failed(let reason, let attempts, _))? = actions.last else { return XCTFail("\(actions)") }
        XCTAssertEqual(attempts, 3)
        XCTAssertTrue(reason.contains("attempt 3"), reason)
        XCTAssertTrue(m.isFinished)
    }
}
