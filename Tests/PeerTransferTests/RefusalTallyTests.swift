import Foundation
@testable import PeerTransferCore
import XCTest

/// The daemon's summary line of refused connections names the limit each sender met.
final class RefusalTallyTests: XCTestCase {
    func testBusySendersAreCountedByTheLimitTheyMet() throws {
        let tally = RefusalTally()
        tally.busy(.everySlotTaken(limit: 8))
        tally.busy(.sourceAtItsShare(limit: 4))
        tally.busy(.sourceAtItsShare(limit: 4))
        let (line, count) = try XCTUnwrap(tally.drain(over: .seconds(10)))
        XCTAssertEqual(count, 3)
        XCTAssertTrue(line.contains("1 sender refused: all 8 transfer slots busy"), line)
        XCTAssertTrue(
            line.contains("2 senders refused: their address already ran 4 transfers, the most one address may"), line)
        XCTAssertNil(tally.drain(over: .seconds(10)), "counted once")
    }
}
