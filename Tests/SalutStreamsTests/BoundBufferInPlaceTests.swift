import Foundation
import SalutTestSupport
import XCTest

@testable import SalutStreams

/// The buffer's in-place access, used by the socket pump to receive straight into a
/// connection's input buffer and to send straight from its output buffer.
final class BoundBufferInPlaceTests: XCTestCase {
    private func bytes(_ range: Range<Int>) -> [UInt8] { range.map { UInt8(truncatingIfNeeded: $0) } }

    private func write(_ buffer: BoundBuffer, _ data: [UInt8]) -> BoundBuffer.WriteResult {
        data.withUnsafeBufferPointer { buffer.write(from: $0.baseAddress!, length: $0.count, blocking: false) }
    }

    private func read(_ buffer: BoundBuffer, _ count: Int) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: count)
        let n = out.withUnsafeMutableBufferPointer {
            buffer.read(into: $0.baseAddress!, maxLength: count, blocking: false)
        }
        return Array(out.prefix(n ?? 0))
    }

    func testFillingInPlaceStopsAtTheEndOfTheStorageAndTheRestFollowsFromItsStart() {
        let buffer = BoundBuffer(capacity: 16, allocatesLazily: true)
        guard case .wrote(12) = write(buffer, bytes(0..<12)) else { return XCTFail("the first write") }
        XCTAssertEqual(read(buffer, 10), bytes(0..<10))
        // Unread: 2 bytes at 10..<12; free: 12..<16 then 0..<10. The first region is 4 bytes.
        var offered: [Int] = []
        let first = buffer.fill(atMost: 100) { region in
            offered.append(region.count)
            for i in 0..<region.count { region[i] = UInt8(12 + i) }
            return region.count
        }
        guard case .wrote(4) = first else { return XCTFail("filled \(first), not the 4 bytes to the end") }
        let second = buffer.fill(atMost: 5) { region in
            offered.append(region.count)
            for i in 0..<region.count { region[i] = UInt8(16 + i) }
            return 3  // takes fewer than offered
        }
        guard case .wrote(3) = second else { return XCTFail("filled \(second)") }
        XCTAssertEqual(offered, [4, 5], "the contiguous free space, capped by the caller's maximum")
        XCTAssertEqual(read(buffer, 100), bytes(10..<19), "in order across the wrap, nothing more")
    }

    func testDrainingInPlaceGivesTheUnreadBytesInOrderAndFreesOnlyWhatWasTaken() {
        let buffer = BoundBuffer(capacity: 8, allocatesLazily: true)
        XCTAssertEqual(
            buffer.drain(atMost: 8) { _ in
                XCTFail("called with nothing unread"); return 0
            }, 0)
        _ = write(buffer, bytes(0..<6))
        _ = read(buffer, 5)
        _ = write(buffer, bytes(6..<13))  // unread: 3 at 5..<8, then 5 more at 0..<5
        var seen: [UInt8] = []
        XCTAssertEqual(
            buffer.drain(atMost: 100) { region in
                seen += region; return 0
            }, 0)
        XCTAssertEqual(buffer.snapshot.available, 8, "a drain that takes nothing leaves everything")
        while buffer.snapshot.available > 0 {
            _ = buffer.drain(atMost: 2) { region in
                seen += region.prefix(1)
                return 1
            }
        }
        XCTAssertEqual(Array(seen.prefix(3)), bytes(5..<8), "the first look: the bytes up to the end")
        XCTAssertEqual(Array(seen.dropFirst(3)), bytes(5..<13), "then one at a time, in order")
        XCTAssertEqual(buffer.snapshot.space, 8)
    }

    func testARunThatWrapsAroundIsHandedOverWholeUpToTheContiguousLengthAndNeverShrinks() {
        let buffer = BoundBuffer(capacity: 10, allocatesLazily: true, contiguousRun: 4)
        _ = write(buffer, bytes(0..<8))
        _ = read(buffer, 7)
        _ = write(buffer, bytes(8..<11))  // unread: 7 at 7, then 8, 9 and 10 at 0..<2
        var runs: [[UInt8]] = []
        for _ in 0..<2 {
            _ = buffer.drain(atMost: 100) { region in
                runs.append(Array(region))
                return 0  // a TLS write that found the socket full
            }
        }
        _ = write(buffer, bytes(11..<14))  // the writer goes on meanwhile
        _ = buffer.drain(atMost: 100) { region in
            runs.append(Array(region))
            return region.count
        }
        XCTAssertEqual(runs[0], bytes(7..<11), "3 bytes to the end, then the first wrapped one, in one piece")
        XCTAssertEqual(runs[1], runs[0], "the same run, not a shorter one")
        XCTAssertEqual(runs[2], bytes(7..<14), "longer once more came: up to 4 bytes past the end")
        XCTAssertEqual(buffer.snapshot.available, 0)
        _ = write(buffer, bytes(14..<22))  // at 4..<10, then 0..<2
        XCTAssertEqual(read(buffer, 100), bytes(14..<22), "the storage is still a ring after the copies")
    }

    func testFillingIsRefusedWhenFullAndOnceTheReaderHasClosed() {
        let buffer = BoundBuffer(capacity: 4, allocatesLazily: true)
        _ = write(buffer, bytes(0..<4))
        guard case .wouldBlock = fillRefused(buffer, "when full") else { return XCTFail("a full buffer takes nothing") }
        buffer.closeReader()
        guard case .readerGone = fillRefused(buffer, "when closed") else {
            return XCTFail("a closed reader takes nothing")
        }
    }

    /// Fills `buffer` with a body that must not be called (`when`: the buffer's state).
    private func fillRefused(_ buffer: BoundBuffer, _ when: String) -> BoundBuffer.WriteResult {
        buffer.fill(atMost: 4) { _ in
            XCTFail("called \(when)")
            return 0
        }
    }

    func testBytesFilledInPlaceWakeAnAsyncReaderWaitingForThem() async throws {
        let buffer = BoundBuffer(capacity: 64, allocatesLazily: true)
        let reader = Task { await buffer.readable(atLeast: 10) }
        try await eventually("the reader waits") { buffer.parkedReaders == 1 }
        _ = buffer.fill(atMost: 6) { $0.count }
        XCTAssertEqual(buffer.parkedReaders, 1, "6 of the 10 bytes it waits for")
        _ = buffer.fill(atMost: 6) { $0.count }
        await reader.value
        XCTAssertEqual(buffer.snapshot.available, 12)
    }
}
