import Foundation
import SalutStreams
import SalutTestSupport
import XCTest

@testable import SalutDiscovery

/// What a browser of the link does with failed contacts (RFC 6762 §10.5): the state machine
/// without I/O, then a ghost and a live service against the real avahi-daemon.
final class FailedContactStateMachineTests: XCTestCase {
    typealias Machine = ServiceBrowser.FailedContactStateMachine

    let kitchen = DiscoveredService(name: "Kitchen", type: "_peer._tcp")
    let office = DiscoveredService(name: "Office", type: "_peer._tcp")
    let garage = DiscoveredService(name: "Garage", type: "_peer._tcp")
    let onLo = [ServiceSighting(interface: "lo", interfaceIndex: 1, isIPv6: false)]
    let onEth = [ServiceSighting(interface: "eth0", interfaceIndex: 2, isIPv6: false)]

    /// A machine whose daemon lists the kitchen and the office on `lo`, the garage on `eth0`.
    func listing() -> Machine {
        var machine = Machine()
        _ = machine.browsed(
            BrowseUpdate(
                changes: [.added(kitchen), .added(office), .added(garage)],
                sightings: [kitchen: onLo, office: onLo, garage: onEth], services: [kitchen, office, garage],
                isComplete: true))
        return machine
    }

    /// The check an action asks for (a test failure when it is none).
    func check(
        _ action: Machine.Action?, of service: DiscoveredService, file: StaticString = #filePath, line: UInt = #line
    ) -> Machine.Check? {
        guard case .check(let check)? = action else {
            XCTFail("no check", file: file, line: line)
            return nil
        }
        XCTAssertEqual(check.service, service, file: file, line: line)
        return check
    }

    /// A machine that has heard a direct answer on `lo` (the office answered a check).
    func hearingOnLo() -> Machine {
        var machine = listing()
        let asked = check(machine.failedContact(with: office), of: office)!
        XCTAssertEqual(machine.checked(asked, answering: true), Machine.Step(), "it answers: nothing to say")
        return machine
    }

    func testASilentServiceIsListedRemovedOnceAndItsLaterRemovalByTheDaemonIsNotSaidTwice() {
        var machine = hearingOnLo()
        let asked = check(machine.failedContact(with: kitchen), of: kitchen)!
        XCTAssertEqual(asked.sightings, onLo)
        let removal = machine.checked(asked, answering: false).updates.first
        XCTAssertEqual(removal?.changes, [.removed(kitchen)])
        XCTAssertEqual(removal?.services, [office, garage])
        XCTAssertEqual(removal?.sightings, [kitchen: onLo], "where it was last seen")
        // The daemon lists it on until its record expires: left out of what is handed over.
        let later = machine.browsed(
            BrowseUpdate(changes: [], services: [kitchen, office, garage], isComplete: true))
        XCTAssertEqual(later?.services, [office, garage])
        // Its record expires: the daemon's removal was said already.
        XCTAssertNil(
            machine.browsed(
                BrowseUpdate(
                    changes: [.removed(kitchen)], sightings: [kitchen: onLo], services: [office, garage],
                    isComplete: true)))
        XCTAssertFalse(machine.hasSilenced)
    }

    func testSilenceWhereNoAnswerWasHeardYetIsCheckedAgainstAnotherServiceThere() {
        // Nothing heard on lo yet: the kitchen's silence may be a firewall's doing.
        var machine = listing()
        let asked = check(machine.failedContact(with: kitchen), of: kitchen)!
        let first = machine.checked(asked, answering: false)
        XCTAssertEqual(first.updates, [], "not said yet")
        let control = check(first.actions.first, of: office)!
        // The office answers: direct answers come in on lo, so the kitchen is gone.
        let second = machine.checked(control, answering: true)
        XCTAssertEqual(second.updates.map(\.changes), [[.removed(kitchen)]])
        XCTAssertEqual(second.updates.first?.services, [office, garage])

        // Where the control is silent too, nothing is said (a firewall that drops the answers).
        var walled = listing()
        let kitchenAsked = check(walled.failedContact(with: kitchen), of: kitchen)!
        let officeAsked = check(walled.checked(kitchenAsked, answering: false).actions.first, of: office)!
        XCTAssertEqual(walled.checked(officeAsked, answering: false), Machine.Step(), "nothing removed, no more asked")
        // The garage, alone on eth0, has no control: a suspect, never said removed.
        let garageAsked = check(walled.failedContact(with: garage), of: garage)!
        XCTAssertEqual(walled.checked(garageAsked, answering: false), Machine.Step())
        XCTAssertFalse(walled.hasSilenced)
    }

    func testAServiceThatAnswersStaysListedAndAFailedQueryConcludesNothing() {
        var machine = hearingOnLo()
        let asked = check(machine.failedContact(with: kitchen), of: kitchen)!
        XCTAssertEqual(machine.checked(asked, answering: true), Machine.Step(), "it answers: the failure was the app's")
        let again = check(machine.failedContact(with: kitchen), of: kitchen)!
        XCTAssertEqual(machine.checked(again, answering: nil), Machine.Step(), "the query could not be made")
        XCTAssertNotNil(machine.failedContact(with: kitchen), "asked again at the next failure")
        XCTAssertFalse(machine.hasSilenced)
    }

    func testAnAnswerToACheckAskedBeforeTheServiceLeftAndCameBackIsNotTakenForALaterOnes() {
        var machine = hearingOnLo()
        let early = check(machine.failedContact(with: kitchen), of: kitchen)!
        // The daemon removes the kitchen and lists it again; a new failure asks anew.
        _ = machine.browsed(
            BrowseUpdate(
                changes: [.removed(kitchen)], sightings: [kitchen: onLo], services: [office, garage], isComplete: true))
        _ = machine.browsed(
            BrowseUpdate(
                changes: [.added(kitchen)], sightings: [kitchen: onLo], services: [kitchen, office, garage],
                isComplete: true))
        let late = check(machine.failedContact(with: kitchen), of: kitchen)!
        XCTAssertNotEqual(early.number, late.number)
        XCTAssertEqual(machine.checked(early, answering: false), Machine.Step(), "a stale answer")
        XCTAssertEqual(machine.checked(late, answering: true), Machine.Step())
        XCTAssertFalse(machine.hasSilenced)
    }

    func testOnlyListedServicesAreAskedOnceAtATimeAndNamesCompareAsMDNSCompares() {
        var machine = listing()
        XCTAssertNil(machine.failedContact(with: DiscoveredService(name: "Attic", type: "_peer._tcp")))
        _ = check(
            machine.failedContact(with: DiscoveredService(name: "KITCHEN", type: "_PEER._tcp", domain: "local.")),
            of: kitchen)
        XCTAssertNil(machine.failedContact(with: kitchen), "already being asked")
        var crowded = Machine()
        let many = (0..<(Machine.maximumChecks + 4)).map { DiscoveredService(name: "S\($0)", type: "_peer._tcp") }
        _ = crowded.browsed(
            BrowseUpdate(
                changes: many.map { .added($0) }, sightings: Dictionary(uniqueKeysWithValues: many.map { ($0, onLo) }),
                services: Set(many), isComplete: true))
        XCTAssertEqual(many.compactMap { crowded.failedContact(with: $0) }.count, Machine.maximumChecks)
    }

    func testAServiceSaidRemovedIsAskedAgainAndListedAgainWhenItAnswers() {
        var machine = hearingOnLo()
        _ = machine.checked(check(machine.failedContact(with: kitchen), of: kitchen)!, answering: false)
        XCTAssertTrue(machine.hasSilenced)
        XCTAssertNil(machine.failedContact(with: kitchen), "said removed: asked by the rechecks only")
        let recheck = machine.recheckDue()
        XCTAssertEqual(recheck.count, 1)
        XCTAssertEqual(machine.checked(check(recheck.first, of: kitchen)!, answering: false), Machine.Step())
        let back = machine.checked(check(machine.recheckDue().first, of: kitchen)!, answering: true)
        XCTAssertEqual(back.updates.map(\.changes), [[.added(kitchen)]])
        XCTAssertEqual(back.updates.first?.services, [kitchen, office, garage])
        XCTAssertEqual(machine.recheckDue(), [])
    }

    func testNothingIsAskedOrSaidOnceTheBrowseEnded() {
        var machine = hearingOnLo()
        let asked = check(machine.failedContact(with: kitchen), of: kitchen)!
        machine.finish()
        XCTAssertEqual(machine.checked(asked, answering: false), Machine.Step())
        XCTAssertNil(machine.failedContact(with: office))
        XCTAssertNil(machine.browsed(BrowseUpdate(changes: [], services: [], isComplete: true)))
        XCTAssertFalse(machine.hasSilenced)
    }
}

final class FailedContactTests: XCTestCase {
    /// A port on loopback that nothing listens on.
    private func closedPort() throws -> Int {
        let (fd, port) = try XCTUnwrap(boundLoopbackSocket())
        close(fd)
        return port
    }

    /// A ghost (its responder gone without a goodbye, so the daemon lists it on) and a live
    /// service: a failed contact with the ghost makes the browser ask it and, as nothing has
    /// answered on the interface yet, the live one as a control; the ghost is listed as
    /// removed once the live one answered, and the live one stays.
    func testAGhostReportedAsUnreachableIsListedRemovedAndALiveServiceStays() async throws {
        let type = uniqueType("fc")
        let ad = try await ServiceAdvertisement.publish(name: "Alive Here", type: type, port: try closedPort())
        defer { ad.cancel() }
        let ghostPort = try closedPort()
        try GhostResponder.announce("Ghost Contact", type: type, port: ghostPort)
        defer { try? GhostResponder.announce("Ghost Contact", type: type, port: ghostPort, goodbye: true) }
        let alive = DiscoveredService(name: "Alive Here", type: type)
        let ghost = DiscoveredService(name: "Ghost Contact", type: type)
        let context = DiscoveryContext.shared
        let contacted = Locked<ContinuousClock.Instant?>(nil)
        let removed = try await withDeadline(40, "the ghost listed as removed") { () -> BrowseUpdate in
            for try await update in try ServiceBrowser(type: type) {
                XCTAssertFalse(update.changes.contains(.removed(alive)), "a service that answers stays listed")
                if update.changes.contains(.removed(ghost)) { return update }
                guard contacted.value == nil, update.services.isSuperset(of: [alive, ghost]) else { continue }
                contacted.withLock { $0 = .now }
                Task {
                    // Refused (nothing listens on the ghost's port): the host answered, no report.
                    do {
                        _ = try await ghost.connect(resolveTimeout: 5)
                        XCTFail("the ghost took a connection")
                    } catch let error as SocketStreamError {
                        XCTAssertEqual(error.code, .connectionRefused, "\(error)")
                    }
                    // As an app reports a contact that found no route.
                    context.reportFailedContact(with: ghost)
                }
            }
            throw CancellationError()
        }
        XCTAssertEqual(removed.services, [alive], "the ghost is gone, the live one stays")
        let seconds = contacted.value.map { ContinuousClock.now - $0 }
        print("the ghost was listed as removed \(seconds.map { "\($0)" } ?? "?") after the failed contact")
    }

    /// Apple-style code sees the same: a `NetService` found by a `NetServiceBrowser` whose
    /// resolution finds no address in time makes the browser ask the responder, and the
    /// delegate hears `didRemove` for the ghost (the same object `didFind` gave), never for the
    /// live service, though avahi-daemon lists both on.
    func testANetServiceBrowserReportsAGhostWhoseResolutionFailedAsRemoved() throws {
        let type = uniqueType("fn")
        let ad = NetService(domain: "", type: type + ".", name: "Alive Apple", port: Int32(try closedPort()))
        let publisher = ServiceRecorder()
        ad.delegate = publisher
        let published = publisher.expect("didPublish", self)
        ad.publish()
        wait(for: [published], timeout: 10)
        defer { ad.stop() }
        let ghostPort = try closedPort()
        try GhostResponder.announce("Ghost Apple", type: type, port: ghostPort, addressless: true)
        defer {
            try? GhostResponder.announce("Ghost Apple", type: type, port: ghostPort, goodbye: true, addressless: true)
        }

        let browser = NetServiceBrowser()
        let browsing = BrowserRecorder()
        browser.delegate = browsing
        defer { browser.stop() }
        let bothFound = expectation(description: "both found")
        bothFound.expectedFulfillmentCount = 2
        browsing.onFind = { if ["Alive Apple", "Ghost Apple"].contains($0.name) { bothFound.fulfill() } }
        browser.searchForServices(ofType: type + ".", inDomain: "local.")
        wait(for: [bothFound], timeout: 15)
        let ghost = try XCTUnwrap(browsing.found.first { $0.name == "Ghost Apple" })

        let removed = expectation(description: "the ghost removed")
        browsing.onRemove = { if $0 === ghost { removed.fulfill() } }
        let resolving = ServiceRecorder()
        ghost.delegate = resolving
        let notResolved = resolving.expect("didNotResolve", self)
        let asked = ContinuousClock.now
        ghost.resolve(withTimeout: 2)
        wait(for: [notResolved, removed], timeout: 30)
        print("the ghost was removed \(ContinuousClock.now - asked) after its resolution began (2 s of it the timeout)")
        XCTAssertEqual(resolving.errors, [NetService.ErrorCode.timeoutError.rawValue])
        XCTAssertEqual(browsing.removed.map(\.name), ["Ghost Apple"], "the live service stays listed")
    }
}
