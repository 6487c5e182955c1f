import XCTest

@testable import PeerTransferCore

/// When a stopping send tells its receiver: never inside a frame, once at most.
final class SendStopperStateMachineTests: XCTestCase {
    func testAStopBetweenFramesIsToldAtOnceAndNothingIsWrittenAfterIt() {
        var machine = SendStopper.StateMachine()
        XCTAssertEqual(machine.connected(), [])
        XCTAssertTrue(machine.mayWrite())
        XCTAssertEqual(machine.wrote(completely: true), [])
        XCTAssertEqual(machine.stop(.cancelled), [.tell(.cancelled), .startDeadline])
        XCTAssertEqual(machine.reason, .cancelled)
        XCTAssertFalse(machine.mayWrite(), "nothing after the stop")
        XCTAssertEqual(machine.stop(.interrupted), [], "a second stop changes nothing")
        XCTAssertEqual(machine.reason, .cancelled)
    }

    func testAStopDuringAWriteIsToldOnceTheFrameIsOut() {
        var machine = SendStopper.StateMachine()
        _ = machine.connected()
        XCTAssertTrue(machine.mayWrite())
        XCTAssertEqual(machine.stop(.interrupted), [.startDeadline], "not inside the frame")
        XCTAssertEqual(machine.wrote(completely: true), [.tell(.interrupted)])
        XCTAssertFalse(machine.mayWrite())
    }

    func testAWriteThatFailedUnderAStopTellsNothing() {
        var machine = SendStopper.StateMachine()
        _ = machine.connected()
        _ = machine.mayWrite()
        _ = machine.stop(.cancelled)
        XCTAssertEqual(machine.wrote(completely: false), [.nothingToTell], "half a frame may be out")
        XCTAssertEqual(machine.reason, .cancelled)
    }

    func testAStopBeforeTheConnectionIsToldOnceItIsOpen() {
        var machine = SendStopper.StateMachine()
        XCTAssertEqual(machine.stop(.interrupted), [.nothingToTell])
        XCTAssertEqual(machine.connected(), [.tell(.interrupted), .startDeadline])
        XCTAssertFalse(machine.mayWrite())
    }

    func testAStopperServesSendsOneAfterAnotherAndAStoppedOneStopsTheNext() {
        var machine = SendStopper.StateMachine()
        _ = machine.connected()
        XCTAssertTrue(machine.mayWrite())
        XCTAssertEqual(machine.wrote(completely: true, last: true), [])
        XCTAssertEqual(machine.connected(), [], "the next send")
        XCTAssertTrue(machine.mayWrite())
        XCTAssertEqual(machine.wrote(completely: true), [])
        XCTAssertEqual(machine.connected(), [], "a send that ended early (declined), then the next")
        XCTAssertEqual(machine.stop(.interrupted), [.tell(.interrupted), .startDeadline])
        XCTAssertEqual(
            machine.connected(), [.tell(.interrupted), .startDeadline], "a send after the stop goes no further")
        XCTAssertFalse(machine.mayWrite())
    }

    func testAStopOnceEverythingWasSentHasNothingToTell() {
        var machine = SendStopper.StateMachine()
        _ = machine.connected()
        _ = machine.mayWrite()
        XCTAssertEqual(machine.wrote(completely: true, last: true), [])
        XCTAssertNil(machine.reason)
        XCTAssertEqual(machine.stop(.cancelled), [.nothingToTell, .startDeadline], "the verdicts decide")
        XCTAssertEqual(machine.reason, .cancelled)
    }

    func testAStopWhileTheLastFrameIsWrittenTellsNothing() {
        var machine = SendStopper.StateMachine()
        _ = machine.connected()
        _ = machine.mayWrite()
        XCTAssertEqual(machine.stop(.cancelled), [.startDeadline])
        XCTAssertEqual(machine.wrote(completely: true, last: true), [.nothingToTell], "everything is out")
        XCTAssertEqual(machine.reason, .cancelled)
    }
}
