import Foundation
import SalutTestSupport
import XCTest

@testable import SalutDiscovery

/// `ServiceBrowser.includingTXTRecords`: the join of browse updates and TXT records as a value
/// (no I/O), then through the avahi-daemon with our publisher and Avahi's own.
final class TXTRecordBrowserTests: XCTestCase {
    typealias Machine = ServiceBrowser.IncludingTXTRecords.StateMachine

    let kitchen = DiscoveredService(name: "Kitchen", type: "_chat._tcp")
    let garden = DiscoveredService(name: "Garden", type: "_chat._tcp")

    func update(_ changes: [BrowseChange], _ services: Set<DiscoveredService>, complete: Bool = true) -> BrowseUpdate {
        BrowseUpdate(changes: changes, services: services, isComplete: complete)
    }

    func delivered(_ actions: [Machine.Action]) -> [BrowseUpdate] {
        actions.compactMap { if case .deliver(let update) = $0 { update } else { nil } }
    }

    func testAnAddIsHeldUntilItsRecordComesAndThenCarriesIt() throws {
        var machine = Machine(maximumWatched: 8)
        let added = machine.browsed(update([.added(kitchen)], [kitchen]))
        XCTAssertEqual(added, [.watch(kitchen, 1), .startDeadline(1)], "held, not delivered without its record")
        let record = try TXTRecord(["fp": "ab"])
        let got = delivered(machine.received(record, for: kitchen, watch: 1))
        XCTAssertEqual(got.count, 1)
        XCTAssertEqual(got.first?.changes, [.added(kitchen)])
        XCTAssertEqual(got.first?.txtRecords, [kitchen: record])
        XCTAssertEqual(machine.deadlinePassed(1), [], "the deadline of a delivered hold does nothing")
        XCTAssertEqual(machine.received(record, for: kitchen, watch: 1), [], "the same record again is no change")
    }

    func testUpdatesJoinAHeldOneAndTheDeadlineDeliversWithoutMissingRecords() throws {
        var machine = Machine(maximumWatched: 8)
        _ = machine.browsed(update([.added(kitchen)], [kitchen], complete: false))
        let second = machine.browsed(update([.added(garden)], [kitchen, garden]))
        XCTAssertEqual(second, [.watch(garden, 2)], "joins the hold; no second deadline")
        let gardenRecord = try TXTRecord(["room": "garden"])
        XCTAssertEqual(machine.received(gardenRecord, for: garden, watch: 2), [], "still waiting for Kitchen's")
        let late = delivered(machine.deadlinePassed(1))
        XCTAssertEqual(late.first?.changes, [.added(kitchen), .added(garden)])
        XCTAssertEqual(late.first?.services, [kitchen, garden])
        XCTAssertEqual(late.first?.isComplete, true)
        XCTAssertEqual(late.first?.txtRecords, [garden: gardenRecord], "Kitchen listed without a record")
        // Kitchen's record, when it comes, and every later change: an update with no changes.
        let kitchenRecord = try TXTRecord(["room": "kitchen"])
        let after = delivered(machine.received(kitchenRecord, for: kitchen, watch: 1))
        XCTAssertEqual(after.first?.changes, [])
        XCTAssertEqual(after.first?.txtRecords, [garden: gardenRecord, kitchen: kitchenRecord])
    }

    func testARemovedServiceLosesItsRecordAndItsWatchAndRecordsOfAnOldWatchAreIgnored() throws {
        var machine = Machine(maximumWatched: 8)
        _ = machine.browsed(update([.added(kitchen)], [kitchen]))
        _ = machine.received(try TXTRecord(["a": "1"]), for: kitchen, watch: 1)
        let removed = machine.browsed(update([.removed(kitchen)], []))
        XCTAssertEqual(removed.first, .stopWatching(kitchen))
        XCTAssertEqual(delivered(removed).first?.txtRecords, [:])
        XCTAssertEqual(machine.received(try TXTRecord(["a": "2"]), for: kitchen, watch: 1), [])
        // Back, watched anew: the old watch's last record, arriving late, is not taken for it.
        XCTAssertEqual(machine.browsed(update([.added(kitchen)], [kitchen])).first, .watch(kitchen, 2))
        XCTAssertEqual(machine.received(try TXTRecord(["a": "old"]), for: kitchen, watch: 1), [])
        let fresh = delivered(machine.received(try TXTRecord(["a": "3"]), for: kitchen, watch: 2))
        XCTAssertEqual(fresh.first?.txtRecords[kitchen]?.string(for: "a"), "3")
    }

    func testAtMostTheCapIsWatchedAndAFreedPlaceGoesToOneThatWaited() throws {
        var machine = Machine(maximumWatched: 1)
        let actions = machine.browsed(update([.added(kitchen), .added(garden)], [kitchen, garden]))
        XCTAssertEqual(actions.filter { if case .watch = $0 { true } else { false } }, [.watch(kitchen, 1)])
        _ = machine.deadlinePassed(1)
        let freed = machine.browsed(update([.removed(kitchen)], [garden]))
        XCTAssertEqual(freed.prefix(2), [.stopWatching(kitchen), .watch(garden, 2)])
        let record = try TXTRecord(["room": "garden"])
        XCTAssertEqual(delivered(machine.received(record, for: garden, watch: 2)).first?.txtRecords, [garden: record])
        var none = Machine(maximumWatched: 0)
        let at = none.browsed(update([.added(kitchen)], [kitchen]))
        XCTAssertEqual(delivered(at).count, 1, "nothing watched: nothing to wait for")
    }

    func testAnUpdateHeldWhenTheBrowserEndsIsDeliveredFirst() {
        var machine = Machine(maximumWatched: 8)
        _ = machine.browsed(update([.added(kitchen)], [kitchen]))
        XCTAssertEqual(delivered(machine.browsingEnded()).first?.changes, [.added(kitchen)])
        XCTAssertEqual(machine.browsingEnded(), [], "once")
    }

    func testTheOutboxFoldsRecordOnlyUpdatesAndKeepsEveryChange() async throws {
        let outbox = ServiceBrowser.IncludingTXTRecords.Outbox()
        outbox.put(update([.added(kitchen)], [kitchen]))
        for value in 0..<1000 {
            var change = update([], [kitchen])
            change.txtRecords = [kitchen: try TXTRecord(["n": "\(value)"])]
            outbox.put(change)
        }
        outbox.put(update([.removed(kitchen)], []))
        outbox.finish()
        let first = try await outbox.take()
        XCTAssertEqual(first?.changes, [.added(kitchen)])
        XCTAssertEqual(first?.txtRecords[kitchen]?.string(for: "n"), "999", "a thousand changes folded into one")
        let second = try await outbox.take()
        XCTAssertEqual(second?.changes, [.removed(kitchen)])
        let end = try await outbox.take()
        XCTAssertNil(end)
    }

    /// Against the avahi-daemon: a service published by Salut and one by `avahi-publish` are
    /// each listed with their TXT records in the update that adds them; a changed record
    /// comes as an update; a withdrawn service takes its record with it.
    func testBrowsedServicesCarryTheirTXTRecordsAndTheirChanges() async throws {
        let type = uniqueType("tx")
        let ours = try await ServiceAdvertisement.publish(
            name: "Ours", type: type, port: 4100, txtRecord: try TXTRecord(["fp": "aa", "n": "1"]))
        let theirs = try Foreign(["avahi-publish", "-s", "Theirs", type, "4101", "fp=bb", "flag"])
        defer { theirs.stop() }
        let theirsService = DiscoveredService(name: "Theirs", type: type)
        let seen = try await withDeadline(20, "services with TXT, a change, a removal") {
            var firstSeen: [String: TXTRecord] = [:]
            var changed = false
            for try await update in try ServiceBrowser(type: type).includingTXTRecords(waitingUpTo: .seconds(5)) {
                for case .added(let service) in update.changes {
                    firstSeen[service.name] = update.txtRecords[service] ?? TXTRecord()
                }
                if update.changes.contains(.removed(theirsService)) {
                    return (firstSeen, changed, !update.txtRecords.keys.contains(theirsService))
                }
                let oursNow = update.txtRecords.first { $0.key.name == "Ours" }?.value.string(for: "n")
                if !changed, oursNow == "2" {
                    changed = true
                    theirs.stop()  // its goodbye removes it
                } else if !changed, firstSeen.count == 2 {
                    try ours.updateTXTRecord(TXTRecord(["fp": "aa", "n": "2"]))
                }
            }
            return (firstSeen, changed, false)
        }
        XCTAssertEqual(seen.0["Ours"]?.string(for: "fp"), "aa", "\(seen.0)")
        XCTAssertEqual(seen.0["Theirs"]?.string(for: "fp"), "bb", "\(seen.0)")
        XCTAssertTrue(seen.0["Theirs"]?.contains("flag") ?? false, "\(seen.0)")
        XCTAssertTrue(seen.1, "the changed record came as an update")
        XCTAssertTrue(seen.2, "a removed service's record leaves with it")
        await ours.withdraw()
    }
}
