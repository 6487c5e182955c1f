@testable import SalutDiscovery
import XCTest

/// Which connection to avahi-daemon a gateway resolves each followed service through.
final class ResolvingPoolTests: XCTestCase {
    private typealias Pool = DiscoveryGateway.ResolvingPool<Int>

    private func key(_ index: Int) -> DiscoveryGateway.ServiceKey {
        DiscoveryGateway.ServiceKey(name: "svc-\(index)", type: "_x._tcp")
    }

    func testAConnectionIsMadeOnlyWhenEveryOneHasItsShare() {
        var pool = Pool(share: 3, maximumContexts: 10) { $0 }
        for index in 0..<7 { _ = pool.assign(key(index)) }
        XCTAssertEqual(pool.contexts, [0, 1, 2])
        XCTAssertEqual(pool.loads.sorted(), [1, 3, 3])
    }

    func testServicesThatLeaveFreeRoomThatNewOnesTakeNotTheNextInTurn() {
        var pool = Pool(share: 2, maximumContexts: 10) { $0 }
        for index in 0..<6 { _ = pool.assign(key(index)) }
        XCTAssertEqual(pool.loads, [2, 2, 2])
        // The services of the last two connections leave; new ones come: they fill those, and
        // the first connection never takes more than its share.
        for index in 2..<6 { pool.release(key(index)) }
        for index in 6..<10 { _ = pool.assign(key(index)) }
        XCTAssertEqual(pool.loads, [2, 2, 2], "least loaded first")
        XCTAssertEqual(pool.contexts.count, 3, "no connection made while others had room")
    }

    func testPastTheMostConnectionsTheLeastLoadedTakesMore() {
        var pool = Pool(share: 1, maximumContexts: 2) { $0 }
        for index in 0..<5 { _ = pool.assign(key(index)) }
        XCTAssertEqual(pool.contexts.count, 2)
        XCTAssertEqual(pool.loads.sorted(), [2, 3])
        // Resolving a key again gives back its place first.
        _ = pool.assign(key(0))
        XCTAssertEqual(pool.loads.reduce(0, +), 5)
    }
}
