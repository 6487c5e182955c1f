import XCTest
import PeerTransferCore

final class WordingTests: XCTestCase {
    func testDurationsReadInTheLargestWholeUnit() {
        XCTAssertEqual(Wording.duration(604_800), "7 days")
        XCTAssertEqual(Wording.duration(86_400), "1 day")
        XCTAssertEqual(Wording.duration(3_600), "1 hour")
        XCTAssertEqual(Wording.duration(5_400), "90 minutes")
        XCTAssertEqual(Wording.duration(90), "90 seconds")
        XCTAssertEqual(Wording.duration(60), "1 minute")
        XCTAssertEqual(Wording.duration(0.5), "0 seconds")
        // Nothing a configuration could hold traps.
        XCTAssertEqual(Wording.duration(-3), "0 seconds")
        XCTAssertEqual(Wording.duration(.nan), "0 seconds")
        XCTAssertEqual(Wording.duration(.infinity), Wording.duration(1e12))
    }

    func testShortTaskIDsAreTheFirstEightDigits() {
        XCTAssertEqual(TaskID.short("3f2a9c1e-0000-4000-8000-000000000000"), "3f2a9c1e")
        XCTAssertEqual(TaskID.short("abc"), "abc")
    }
}
