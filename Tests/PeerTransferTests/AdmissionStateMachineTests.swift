import Foundation
@testable import PeerTransferCore
import Salut
import SalutTestSupport
import XCTest

/// Who holds a receiver's greeting places and transfer slots, without I/O.
final class AdmissionStateMachineTests: XCTestCase {
    func testAConnectionTakesASlotOnlyOnceIdentified() {
        var admission = ReceiverService.AdmissionStateMachine(
            limits: .init(transfers: 2, greeting: 4, greetingPerSource: 3))
        XCTAssertEqual(admission.arrived(1, from: "a"), [])
        XCTAssertEqual(admission.arrived(2, from: "b"), [])
        XCTAssertEqual(admission.arrived(3, from: "b"), [])
        XCTAssertEqual(admission.transferring, [], "greeting holds no slot")
        XCTAssertEqual(admission.identified(1), [.admit(1)])
        XCTAssertEqual(admission.identified(2), [.admit(2)])
        XCTAssertEqual(admission.identified(3), [.refuseBusy(3, .everySlotTaken(limit: 2))], "every slot taken")
        admission.ended(1)
        XCTAssertEqual(admission.arrived(4, from: "c"), [])
        XCTAssertEqual(admission.identified(4), [.admit(4)])
        XCTAssertEqual(admission.identified(4), [], "a late second hello changes nothing")
        // One source holds at most its share of the slots.
        var shared = ReceiverService.AdmissionStateMachine(
            limits: .init(transfers: 4, transfersPerSource: 2, greeting: 8, greetingPerSource: 8))
        for id in 1...3 { _ = shared.arrived(id, from: "flood") }
        _ = shared.arrived(9, from: "good")
        XCTAssertEqual(shared.identified(1), [.admit(1)])
        XCTAssertEqual(shared.identified(2), [.admit(2)])
        XCTAssertEqual(shared.identified(3), [.refuseBusy(3, .sourceAtItsShare(limit: 2))], "past its source's share")
        XCTAssertEqual(shared.identified(9), [.admit(9)])
    }

    /// Sources are whole addresses: two IPv6 neighbours on a link share its /64 (every
    /// link-local address is in fe80::/64) and must not share a source's share.
    func testIPv6NeighboursOnOneLinkAreTwoSources() {
        let one = SocketAddress(ipv6: [0xfe, 0x80] + Array(repeating: 0, count: 13) + [1], port: 1, scopeID: 2)
        let two = SocketAddress(ipv6: [0xfe, 0x80] + Array(repeating: 0, count: 13) + [2], port: 1, scopeID: 2)
        XCTAssertNotEqual(ReceiverService.sourceAddress(one), ReceiverService.sourceAddress(two))
        XCTAssertEqual(
            ReceiverService.sourceAddress(one),
            ReceiverService.sourceAddress(
                SocketAddress(ipv6: [0xfe, 0x80] + Array(repeating: 0, count: 13) + [1], port: 9, scopeID: 2)),
            "the port does not matter")
        XCTAssertNotEqual(
            ReceiverService.sourceAddress(SocketAddress(ipv4: [198, 18, 0, 1], port: 1)),
            ReceiverService.sourceAddress(SocketAddress(ipv4: [198, 18, 0, 2], port: 1)))
    }

    func testAFloodFromOneSourceEvictsOnlyItsOwnOldest() {
        var admission = ReceiverService.AdmissionStateMachine(
            limits: .init(transfers: 8, greeting: 6, greetingPerSource: 3))
        XCTAssertEqual(admission.arrived(1, from: "good"), [])
        var evicted: [Int] = []
        for id in 100..<120 {
            for case .evict(let old) in admission.arrived(id, from: "flood") { evicted.append(old) }
        }
        XCTAssertFalse(evicted.contains(1), "the good connection was evicted by another source's flood")
        XCTAssertEqual(evicted, Array(100..<117))
        XCTAssertEqual(admission.identified(1), [.admit(1)])
        // All places full across sources: the busiest source gives up its oldest.
        var full = ReceiverService.AdmissionStateMachine(limits: .init(transfers: 8, greeting: 4, greetingPerSource: 3))
        _ = full.arrived(1, from: "a")
        _ = full.arrived(2, from: "b")
        _ = full.arrived(3, from: "b")
        _ = full.arrived(4, from: "c")
        XCTAssertEqual(full.arrived(5, from: "d"), [.evict(2)])
        XCTAssertEqual(full.greetingCount, 4)
        // An evicted connection's hello comes too late to take a slot.
        XCTAssertEqual(full.identified(2), [])
    }
}
