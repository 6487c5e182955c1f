import Foundation
@testable import PeerTransferCore
import Salut
import SalutTestSupport
import XCTest

final class MemoryTrimTests: XCTestCase {
    /// A thousand requests while one trim runs make one more trim, not a thousand (each used to
    /// start a thread of its own).
    func testRequestsWhileATrimWaitsOrRunsMakeOneTrim() throws {
        let count = Locked(0)
        let gate = DispatchSemaphore(value: 0)
        let trim = MemoryTrim(delay: .milliseconds(10)) {
            if count.withLock({
                $0 += 1; return $0
            }) == 1 {
                gate.wait()
            }  // the first one runs long
        }
        trim.request()
        XCTAssertTrue(eventually(timeout: 5) { count.value == 1 }, "the first trim runs")
        for _ in 0..<1_000 { trim.request() }
        XCTAssertTrue(trim.isPending, "one more is waiting")
        gate.signal()
        XCTAssertTrue(eventually(timeout: 5) { count.value == 2 && !trim.isPending }, "\(count.value)")
        XCTAssertEqual(count.value, 2, "a thousand requests made one trim")
    }

    /// Chunk memory released goes to the pool for the next chunk; emptying the pool (the
    /// receiver's trim once no transfer runs) frees what waits there, and memory in use comes
    /// back to the pool when released, as before.
    func testChunkMemoryPoolIsEmptiedByTheTrimAndRefillsWhenUsedAgain() {
        // (At least: a transfer of an earlier test may still give chunks back meanwhile.)
        ChunkMemory.emptyPool()
        var held = (0..<3).map { _ in ChunkMemory(payloadSize: 4096).handedOver() }
        held.removeAll()
        XCTAssertGreaterThanOrEqual(ChunkMemory.pooled, 3, "released chunks wait for reuse")
        let inUse = ChunkMemory(payloadSize: 4096).handedOver()
        XCTAssertGreaterThanOrEqual(ChunkMemory.emptyPool(), 2, "those waiting are freed")
        _ = inUse.count
        withExtendedLifetime(inUse) {}
    }
}
