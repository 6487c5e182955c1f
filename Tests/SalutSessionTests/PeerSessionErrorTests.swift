import SalutSession
import SalutStreams
import SalutTestSupport
import XCTest

/// `PeerSessionError` as a user's code meets it.
final class PeerSessionErrorTests: SalutTestCase {
    func testTheDeadlineAndTheConnectionsErrorAreReadable() {
        let late = PeerSessionError.timedOut("idle")
        XCTAssertEqual(late.code, .timedOut)
        XCTAssertEqual(late.deadline, "idle")
        XCTAssertEqual(late.description, "idle timed out")

        let refused = PeerSessionError.connection(.connectionRefused("127.0.0.1:9"))
        XCTAssertEqual(refused.code, .connection)
        XCTAssertEqual(refused.connectionError?.code, .connectionRefused)
        XCTAssertEqual(refused.description, "connection to 127.0.0.1:9 refused")
        XCTAssertNil(refused.deadline)
        XCTAssertEqual(PeerSessionError.invalidResumeData("truncated").reason, "truncated")
        XCTAssertEqual(PeerSessionError.cancelled, .cancelled)
    }
}
