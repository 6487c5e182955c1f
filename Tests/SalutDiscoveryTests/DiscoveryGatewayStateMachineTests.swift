import SalutStreams
import SalutTestSupport
import XCTest

@testable import SalutDiscovery

/// What a gateway mirrors, removes and tries again, decided without a network.
final class DiscoveryGatewayStateMachineTests: XCTestCase {
    typealias Machine = DiscoveryGateway.StateMachine
    typealias Key = DiscoveryGateway.ServiceKey
    typealias Service = DiscoveryGateway.MirroredService

    private func service(
        _ name: String, type: String = "_ipp._tcp", host: String = "printer", port: UInt16 = 631,
        txt: [[UInt8]] = [Array("rp=ipp".utf8)], addresses: [[UInt8]] = [[198, 18, 1, 20]]
    ) -> Service {
        Service(key: Key(name: name, type: type), host: host, port: port, txt: txt, addresses: addresses)
    }

    /// The operation of the single send among `actions`.
    private func sent(
        _ actions: [Machine.Action], file: StaticString = #filePath, line: UInt = #line
    )
        -> DiscoveryGateway.ZoneOperation?
    {
        let sends = actions.compactMap { action -> [DiscoveryGateway.ZoneOperation]? in
            if case .send(let operations) = action { return operations }
            return nil
        }
        XCTAssertLessThanOrEqual(sends.count, 1, "one update at a time", file: file, line: line)
        XCTAssertLessThanOrEqual(sends.first?.count ?? 0, 1, "one operation an update", file: file, line: line)
        return sends.first?.first
    }

    /// Answers every update the machine sends (starting from `actions`) as applied, until it
    /// sends no more; the operations in order.
    private func drain(_ machine: inout Machine, from actions: [Machine.Action]) -> [DiscoveryGateway.ZoneOperation] {
        var operations: [DiscoveryGateway.ZoneOperation] = []
        var next = sent(actions)
        while let operation = next {
            operations.append(operation)
            next = sent(machine.handle(.updateSucceeded))
        }
        return operations
    }

    func testNothingIsWrittenBeforeTheZoneIsReadThenTheServiceAndTheListFollow() {
        var machine = Machine(maximumServices: 10)
        let printer = service("Office Printer")
        XCTAssertEqual(machine.handle(.seen(printer.key)), [.resolve(printer.key)])
        XCTAssertEqual(machine.handle(.found(printer)), [], "the zone is not read yet")
        XCTAssertEqual(
            sent(machine.handle(.zoneListed([:]))), .write(printer, replacing: nil, droppingHost: nil))
        XCTAssertEqual(machine.handle(.found(printer)), [], "one update in flight")
        XCTAssertEqual(
            sent(machine.handle(.updateSucceeded)),
            .enumerate(adding: [], removing: [], browseDomain: true), "the type was listed with its service")
        XCTAssertEqual(machine.handle(.updateSucceeded), [], "the zone is as the link")
        XCTAssertEqual(machine.mirroredCount, 1)
    }

    func testATXTChangeIsWrittenAndAServiceThatLeavesIsRemovedWithItsHost() {
        var machine = Machine(maximumServices: 10)
        let printer = service("Office Printer")
        _ = drain(&machine, from: machine.handle(.zoneListed([:])))  // the browsing domain
        _ = machine.handle(.linkSettled)
        _ = machine.handle(.seen(printer.key))
        XCTAssertEqual(
            drain(&machine, from: machine.handle(.found(printer))),
            [.write(printer, replacing: nil, droppingHost: nil)])
        var changed = printer
        changed.txt = [Array("rp=ipp/print".utf8)]
        XCTAssertEqual(
            drain(&machine, from: machine.handle(.found(changed))),
            [.write(changed, replacing: printer, droppingHost: nil)])
        let actions = machine.handle(.lost(printer.key))
        XCTAssertTrue(actions.contains(.stopResolving(printer.key)))
        XCTAssertEqual(
            drain(&machine, from: actions),
            [
                .remove(printer.key, droppingHost: "printer"),  // no other service on that host
                .enumerate(adding: [], removing: ["_ipp._tcp"], browseDomain: false),
            ])
        XCTAssertEqual(machine.mirroredCount, 0)
    }

    func testLeftoversInTheZoneAreRemovedOnlyOnceTheLinkSettled() {
        var machine = Machine(maximumServices: 10)
        let kept = service("Kept"), gone = service("Gone", host: "old")
        _ = machine.handle(.seen(kept.key))
        _ = machine.handle(.found(kept))
        XCTAssertEqual(
            sent(machine.handle(.zoneListed([kept.key: kept, gone.key: gone]))),
            .enumerate(adding: [], removing: [], browseDomain: true), "the zone has both already")
        XCTAssertEqual(machine.handle(.updateSucceeded), [], "nothing removed before the link settled")
        XCTAssertEqual(sent(machine.handle(.linkSettled)), .remove(gone.key, droppingHost: "old"))
        XCTAssertEqual(machine.handle(.updateSucceeded), [])
        XCTAssertEqual(machine.mirroredCount, 1)
    }

    func testAHostSharedByTwoServicesStaysUntilTheLastGoes() {
        var machine = Machine(maximumServices: 10)
        let web = service("Web", type: "_http._tcp", host: "box"), ipp = service("Print", host: "box")
        _ = machine.handle(.zoneListed([web.key: web, ipp.key: ipp]))
        _ = machine.handle(.updateSucceeded)  // the list
        _ = machine.handle(.seen(web.key))
        _ = machine.handle(.found(web))
        XCTAssertEqual(sent(machine.handle(.linkSettled)), .remove(ipp.key, droppingHost: nil), "web is on box")
    }

    func testAtMostTheLimitIsMirroredAndAWaitingServiceTakesAFreedPlace() {
        var machine = Machine(maximumServices: 2)
        let a = service("A"), b = service("B"), c = service("C")
        XCTAssertEqual(machine.handle(.seen(a.key)), [.resolve(a.key)])
        XCTAssertEqual(machine.handle(.seen(b.key)), [.resolve(b.key)])
        let over = machine.handle(.seen(c.key))
        XCTAssertEqual(over.count, 1)
        guard case .skip(c.key, let reason) = over.first else { return XCTFail("\(over)") }
        XCTAssertTrue(reason.contains("--max-services (2)"), reason)
        XCTAssertEqual(machine.handle(.found(c)), [], "not resolved, not written")
        XCTAssertEqual(machine.waitingCount, 1, "C waits for a place")
        let freed = machine.handle(.lost(a.key))
        XCTAssertEqual(freed, [.stopResolving(a.key), .resolve(c.key)])
        XCTAssertEqual(machine.waitingCount, 0)
    }

    func testAFloodBeyondWhatWaitsIsIgnoredAndSaidOnce() {
        var machine = Machine(maximumServices: 1)
        for index in 0..<5 { _ = machine.handle(.seen(Key(name: "S\(index)", type: "_x._tcp"))) }
        let flooded = machine.handle(.seen(Key(name: "S5", type: "_x._tcp")))
        guard case .skip(_, let reason)? = flooded.first else { return XCTFail("\(flooded)") }
        XCTAssertTrue(reason.contains("more than 5 services"), reason)
        XCTAssertEqual(machine.handle(.seen(Key(name: "S5", type: "_x._tcp"))), [], "said once")
    }

    func testAServiceWithoutARoutableAddressOrTooLargeIsSkippedAndTheRestGoOn() {
        var machine = Machine(maximumServices: 10)
        _ = drain(&machine, from: machine.handle(.zoneListed([:])))
        let linkLocal = service("Link Only", addresses: [])
        _ = machine.handle(.seen(linkLocal.key))
        XCTAssertEqual(
            machine.handle(.found(linkLocal)), [.skip(linkLocal.key, reason: "no address that routes off the link")])
        let huge = service("Huge")
        _ = machine.handle(.seen(huge.key))
        XCTAssertEqual(sent(machine.handle(.found(huge))), .write(huge, replacing: nil, droppingHost: nil))
        let after = machine.handle(.updateFailed(reason: "70000 bytes", retryable: false, unwritable: true))
        XCTAssertTrue(after.contains { if case .skip(huge.key, _) = $0 { return true } else { return false } })
        XCTAssertNil(sent(after), "not tried again as it is")
        var smaller = huge
        smaller.txt = []
        XCTAssertEqual(sent(machine.handle(.found(smaller))), .write(smaller, replacing: nil, droppingHost: nil))
    }

    /// The operations of the single update among `actions` (empty: none).
    private func update(_ actions: [Machine.Action]) -> [DiscoveryGateway.ZoneOperation] {
        let sends = actions.compactMap { action -> [DiscoveryGateway.ZoneOperation]? in
            if case .send(let operations) = action { return operations }
            return nil
        }
        XCTAssertLessThanOrEqual(sends.count, 1, "one update at a time")
        return sends.first ?? []
    }

    func testServicesGoIntoTheZoneSeveralAnUpdateEachChosenAsIfThoseBeforeWereApplied() {
        var machine = Machine(maximumServices: 10, operationsPerUpdate: 3)
        let services = (0..<5).map { service("S\($0)", host: "box") }
        for item in services {
            _ = machine.handle(.seen(item.key))
            _ = machine.handle(.found(item))
        }
        XCTAssertEqual(
            update(machine.handle(.zoneListed([:]))),
            services.prefix(3).map { .write($0, replacing: nil, droppingHost: nil) })
        XCTAssertEqual(
            update(machine.handle(.updateSucceeded)),
            services.suffix(2).map { .write($0, replacing: nil, droppingHost: nil) }
                + [.enumerate(adding: [], removing: [], browseDomain: true)])
        XCTAssertEqual(update(machine.handle(.updateSucceeded)), [])
        XCTAssertEqual(machine.mirroredCount, 5)
        // All of them leave: the host goes with the last, the type after it, in one update.
        _ = machine.handle(.linkSettled)
        var removals: [DiscoveryGateway.ZoneOperation] = []
        for item in services { removals += update(machine.handle(.lost(item.key))) }
        XCTAssertEqual(removals, [.remove(services[0].key, droppingHost: nil)], "one update in flight")
        XCTAssertEqual(
            update(machine.handle(.updateSucceeded)),
            [
                .remove(services[1].key, droppingHost: nil), .remove(services[2].key, droppingHost: nil),
                .remove(services[3].key, droppingHost: nil),
            ])
        XCTAssertEqual(
            update(machine.handle(.updateSucceeded)),
            [
                .remove(services[4].key, droppingHost: "box"),
                .enumerate(adding: [], removing: ["_ipp._tcp"], browseDomain: false),
            ])
        XCTAssertEqual(update(machine.handle(.updateSucceeded)), [])
        XCTAssertEqual(machine.mirroredCount, 0)
    }

    func testAnUpdateOfSeveralTheServerCannotTakeIsSentOneByOneAndOnlyTheBadOneIsSkipped() {
        var machine = Machine(maximumServices: 10, operationsPerUpdate: 4)
        _ = machine.handle(.zoneListed([:]))
        _ = machine.handle(.updateSucceeded)  // the browsing domain
        let good = service("Good"), huge = service("Huge"), fine = service("Fine")
        for item in [good, huge, fine] { _ = machine.handle(.seen(item.key)) }
        XCTAssertEqual(update(machine.handle(.found(good))).count, 1)
        _ = machine.handle(.found(huge))
        _ = machine.handle(.found(fine))
        XCTAssertEqual(update(machine.handle(.updateSucceeded)).count, 2, "huge and fine together")
        let tooLarge = Machine.Event.updateFailed(reason: "70000 bytes", retryable: false, unwritable: true)
        XCTAssertEqual(update(machine.handle(tooLarge)), [.write(huge, replacing: nil, droppingHost: nil)])
        // A timeout meanwhile: the same one goes alone again.
        let timedOut = machine.handle(.updateFailed(reason: "timed out", retryable: true, unwritable: false))
        guard case .retry? = timedOut.first else { return XCTFail("\(timedOut)") }
        XCTAssertEqual(update(machine.handle(.retryDue)), [.write(huge, replacing: nil, droppingHost: nil)])
        let skipped = machine.handle(tooLarge)
        XCTAssertTrue(skipped.contains { if case .skip(huge.key, _) = $0 { return true } else { return false } })
        XCTAssertEqual(update(skipped), [.write(fine, replacing: nil, droppingHost: nil)])
        XCTAssertEqual(update(machine.handle(.updateSucceeded)), [])
        XCTAssertEqual(machine.mirroredCount, 2, "good and fine, not huge")
    }

    func testAServerThatDoesNotAnswerIsTriedAgainWaitingTwiceAsLongEachTime() {
        var machine = Machine(maximumServices: 10)
        let printer = service("P")
        _ = machine.handle(.seen(printer.key))
        _ = machine.handle(.found(printer))
        let first = sent(machine.handle(.zoneListed([:])))
        var delays: [Duration] = []
        for _ in 0..<8 {
            let actions = machine.handle(.updateFailed(reason: "timed out", retryable: true, unwritable: false))
            guard case .retry(let delay, _)? = actions.first else { return XCTFail("\(actions)") }
            delays.append(delay)
            XCTAssertTrue(machine.isBehind)
            XCTAssertEqual(machine.handle(.found(printer)), [], "nothing sent while waiting")
            XCTAssertEqual(sent(machine.handle(.retryDue)), first, "the same update again")
            XCTAssertTrue(machine.isBehind, "still behind while the retry is in flight")
        }
        XCTAssertEqual(delays.prefix(4), [.seconds(1), .seconds(2), .seconds(4), .seconds(8)])
        XCTAssertEqual(delays.last, .seconds(60), "at most a minute")
        _ = machine.handle(.updateSucceeded)
        XCTAssertEqual(machine.mirroredCount, 1)
        XCTAssertFalse(machine.isBehind)
    }

    /// A status board for `lab-a.home.arpa` and the statuses it said, in order.
    private func recordingBoard(
        interval: Duration
    ) -> (DiscoveryGateway.StatusBoard, Locked<[DiscoveryGateway.Status]>) {
        let said = Locked<[DiscoveryGateway.Status]>([])
        let board = DiscoveryGateway.StatusBoard(labelDomain: "lab-a.home.arpa", interval: interval) {
            guard case .status(let status) = $0 else { return }
            said.withLock { $0.append(status) }
        }
        return (board, said)
    }

    /// The status board: a burst of changes is one report (the status at its end), a failure
    /// is the last error with the zone behind, and announcements count per label (a TXT
    /// change announced again counts once).
    func testTheStatusIsSaidOnceABurstIsOverWithTheLastErrorAndAnnouncementsPerLabel() {
        let (board, said) = recordingBoard(interval: .milliseconds(200))
        defer { board.finish() }
        let printer = Key(name: "Printer", type: "_ipp._tcp")
        for count in 1...50 { board.observe(mirrored: count, waiting: 0, behind: false, listed: true) }
        board.observe(.announced(printer, fromLabel: "lab-b", as: "Printer"))
        board.observe(.announced(printer, fromLabel: "lab-b", as: "Printer"))
        XCTAssertTrue(eventually(timeout: 10) { said.value.count == 1 }, "\(said.value)")
        var expected = DiscoveryGateway.Status(labelDomain: "lab-a.home.arpa")
        expected.mirrored = 50
        expected.announced = ["lab-b": 1]
        XCTAssertEqual(said.value, [expected], "one report for the burst, as it ended")

        board.observe(.retrying(reason: "the server did not answer", seconds: 2))
        board.observe(mirrored: 50, waiting: 3, behind: true, listed: true)
        XCTAssertTrue(eventually(timeout: 10) { said.value.count == 2 }, "\(said.value)")
        let failing = said.value.last
        XCTAssertEqual(failing?.lastError, "the server did not answer")
        XCTAssertNotNil(failing?.lastErrorDate)
        XCTAssertEqual(failing?.retrying, true)
        XCTAssertEqual(failing?.waiting, 3)

        board.observe(.unannounced(printer, fromLabel: "lab-b"))
        board.observe(mirrored: 50, waiting: 3, behind: false, listed: true)
        XCTAssertTrue(eventually(timeout: 10) { said.value.count == 3 }, "\(said.value)")
        XCTAssertEqual(said.value.last?.announced, [:])
        XCTAssertEqual(said.value.last?.retrying, false)
        XCTAssertEqual(said.value.last?.lastError, "the server did not answer", "the last error stays said")
    }

    /// Before the zone is read, a failed read is the zone being behind; once read, it is not.
    func testAZoneThatCannotBeReadAtTheStartIsSaidToBeBehind() {
        let (board, said) = recordingBoard(interval: .milliseconds(50))
        defer { board.finish() }
        board.observe(mirrored: 0, waiting: 0, behind: false, listed: false)
        board.observe(.retrying(reason: "reading the zone: no answer", seconds: 1))
        XCTAssertTrue(eventually(timeout: 10) { said.value.last?.retrying == true }, "\(said.value)")
        board.observe(mirrored: 0, waiting: 0, behind: false, listed: true)
        XCTAssertTrue(eventually(timeout: 10) { said.value.last?.retrying == false }, "\(said.value)")
    }

    func testARefusedKeyStopsTheGateway() {
        var machine = Machine(maximumServices: 10)
        _ = machine.handle(.zoneListed([:]))
        XCTAssertEqual(
            machine.handle(.updateFailed(reason: "BADKEY", retryable: false, unwritable: false)),
            [.stop(reason: "BADKEY")])
    }

    func testAServiceFromAHostThatIsNoHostOfTheLinkIsSkipped() {
        var machine = Machine(maximumServices: 10)
        _ = drain(&machine, from: machine.handle(.zoneListed([:])))
        let odd = service("Odd", host: "")
        _ = machine.handle(.seen(odd.key))
        XCTAssertEqual(
            machine.handle(.found(odd)),
            [
                .skip(
                    odd.key,
                    reason:
                        "its host is not one of the link's (NAME.local): a host HOST.LABEL.local is another link's, announced here by a gateway, and never written back"
                )
            ])
    }

    func testOnlyAddressesThatRouteToAHostAreWrittenOrAnnounced() {
        for bytes: [UInt8] in [
            [127, 0, 0, 1], [169, 254, 7, 7], [0, 0, 0, 0], [224, 0, 0, 251], [255, 255, 255, 255],
            [0xfe, 0x80] + Array(repeating: 0, count: 13) + [1], Array(repeating: 0, count: 15) + [1],
            [0xff, 0x02] + Array(repeating: 0, count: 13) + [0xfb],
        ] {
            XCTAssertFalse(Service.routesOffTheLink(bytes), "\(bytes)")
        }
        XCTAssertTrue(Service.routesOffTheLink([198, 18, 1, 10]))
        XCTAssertTrue(Service.routesOffTheLink([0x20, 0x01, 0x0d, 0xb8] + Array(repeating: 0, count: 11) + [1]))
    }

    func testOnlyHostNamesOfTheLinkAreTakenNotThoseAGatewayAnnounces() {
        XCTAssertEqual(Service.hostOnTheLink("printer.local."), "printer")
        XCTAssertNil(Service.hostOnTheLink("printer.lab-a.local"), "another link's host, announced here: no echo")
        for name in ["_ipp._tcp.local", "printer.example.com", "a b.local", "-x.local", ".local", "x..local"] {
            XCTAssertNil(Service.hostOnTheLink(name), name)
        }
        XCTAssertFalse(DiscoveryGateway.mayMirror(type: "_dns-sd._udp"))
        XCTAssertFalse(DiscoveryGateway.mayMirror(type: "ipp"))
        XCTAssertTrue(DiscoveryGateway.mayMirror(type: "_ipp._tcp"))
    }

    func testAWriteListsTheTypeAndReplacesTheHostsAddressesInOneUpdate() throws {
        let updates = try GatewayUpdates(
            zone: try DNSName(parsing: "home.arpa"), domain: try DNSName(parsing: "home.arpa"), label: "lab-a")
        var printer = service("Office Printer", host: "box.sub")
        printer.addresses = [[198, 18, 1, 20], Array(repeating: 0x20, count: 16)]
        let message = try updates.message(for: .write(printer, replacing: nil, droppingHost: "old"), id: 1)
        let lines = GatewayUpdates.nsupdateLines(message)
        XCTAssertEqual(
            lines.split(separator: "\n").map(String.init),
            [
                "zone home.arpa.",
                "update delete Office\\032Printer._ipp._tcp.lab-a.home.arpa.",
                "update add _ipp._tcp.lab-a.home.arpa. 120 PTR Office\\032Printer._ipp._tcp.lab-a.home.arpa.",
                "update add Office\\032Printer._ipp._tcp.lab-a.home.arpa. 120 SRV 0 0 631 box.sub.lab-a.home.arpa.",
                "update add Office\\032Printer._ipp._tcp.lab-a.home.arpa. 120 TXT \"rp=ipp\"",
                "update add _services._dns-sd._udp.lab-a.home.arpa. 120 PTR _ipp._tcp.lab-a.home.arpa.",
                "update delete box.sub.lab-a.home.arpa. A",
                "update delete box.sub.lab-a.home.arpa. AAAA",
                "update add box.sub.lab-a.home.arpa. 120 A 198.18.1.20",
                "update add box.sub.lab-a.home.arpa. 120 AAAA 2020:2020:2020:2020:2020:2020:2020:2020",
                "update delete old.lab-a.home.arpa.",
                "send",
            ])
    }

    func testAServiceThatDoesNotResolveGivesItsPlaceToOneWaiting() {
        var machine = Machine(maximumServices: 1)
        let silent = service("Silent"), waiting = service("Waiting")
        XCTAssertEqual(machine.handle(.seen(silent.key)), [.resolve(silent.key)])
        _ = machine.handle(.seen(waiting.key))
        XCTAssertEqual(
            machine.handle(.unresolved(silent.key)),
            [
                .skip(silent.key, reason: "it did not resolve in time"), .stopResolving(silent.key),
                .resolve(waiting.key),
            ])
        XCTAssertEqual(machine.handle(.found(silent)), [], "no longer mirrored")
        // Its turn comes back once the other leaves.
        XCTAssertEqual(machine.handle(.lost(waiting.key)), [.stopResolving(waiting.key), .resolve(silent.key)])
    }

    // MARK: Announcing the other links' services

    private func announcement(
        _ name: String, label: String = "lab-a", host: String = "printer", port: UInt16 = 631,
        note: String = "first", addresses: [[UInt8]] = [[198, 18, 1, 10]]
    ) -> DiscoveryGateway.Announcement {
        DiscoveryGateway.Announcement(
            label: label,
            service: Service(
                key: .init(name: name, type: "_ipp._tcp"), host: host, port: port, txt: [Array("note=\(note)".utf8)],
                addresses: addresses))
    }

    private func keyed(
        _ list: [DiscoveryGateway.Announcement]
    ) -> [DiscoveryGateway.Announcement.ID: DiscoveryGateway
        .Announcement]
    {
        Dictionary(uniqueKeysWithValues: list.map { ($0.id, $0) })
    }

    func testAnotherLinksServicesAreAnnouncedOnAHostOfTheirOwnOncePerHost() {
        let printer = announcement("Office Printer"), scanner = announcement("Scanner")
        let plan = DiscoveryGateway.AnnouncementPlan(made: [:], hosts: [:], wanted: keyed([printer, scanner]))
        XCTAssertEqual(plan.publishHosts, ["printer.lab-a.local": [[198, 18, 1, 10]]], "one host for both")
        XCTAssertEqual(plan.publishServices, [printer, scanner])
        XCTAssertEqual(printer.hostName, "printer.lab-a.local")
        XCTAssertTrue(plan.withdrawServices.isEmpty && plan.withdrawHosts.isEmpty && plan.changeText.isEmpty)
    }

    func testOneHostsServicesShareEntryGroupsOfEightAtMostInTheOrderTheyCame() {
        let printers = (0..<10).map { announcement("Printer \($0)") }
        let scanners = (0..<2).map { announcement("Scanner \($0)", host: "scanner") }
        // Interleaved as a zone read may list them: each host's stay together, in order.
        let mixed = [printers[0], scanners[0]] + printers[1...] + [scanners[1]]
        let groups = DiscoveryGateway.RemoteAnnouncer.groups(of: mixed)
        XCTAssertEqual(groups.map(\.count), [8, 2, 2], "avahi-daemon allows 32 records a group, four a service")
        XCTAssertEqual(groups[0] + groups[1], printers)
        XCTAssertEqual(groups[2], scanners)
        XCTAssertEqual(Set(groups.map { Set($0.map(\.hostName)) }.map(\.count)), [1], "one host a group")
        XCTAssertEqual(DiscoveryGateway.RemoteAnnouncer.groups(of: [printers[0]]).map(\.count), [1])
        XCTAssertTrue(DiscoveryGateway.RemoteAnnouncer.groups(of: []).isEmpty)
    }

    func testAGroupsOrALargeRecordsGoodbyesCountForMoreInThePaceOfWithdrawals() {
        typealias Announcer = DiscoveryGateway.RemoteAnnouncer
        let printer = announcement("Printer")
        XCTAssertEqual(Announcer.goodbyeWeight(ofRecordBytes: printer.recordBytes), 1, "an ordinary service")
        let eight = (0..<8).map { announcement("Printer \($0)") }
        XCTAssertEqual(Announcer.goodbyeWeight(ofRecordBytes: eight.reduce(0) { $0 + $1.recordBytes }), 2)
        var large = printer
        large.service.txt =
            [Array(repeating: UInt8(ascii: "x"), count: 250)]
            + Array(repeating: [UInt8](repeating: 0x61, count: 200), count: 40)
        XCTAssertGreaterThan(large.recordBytes, 8_000)
        XCTAssertEqual(
            Announcer.goodbyeWeight(ofRecordBytes: large.recordBytes), 12,
            "two for each 1,400 bytes begun: counted as if six packets on each of IPv4 and IPv6")
    }

    func testAServiceThatLeavesTheZoneIsWithdrawnWithItsHostOnceNoneIsLeft() {
        let printer = announcement("Office Printer"), scanner = announcement("Scanner")
        let hosts = ["printer.lab-a.local": [[UInt8]]([[198, 18, 1, 10]])]
        let one = DiscoveryGateway.AnnouncementPlan(
            made: keyed([printer, scanner]), hosts: hosts, wanted: keyed([printer]))
        XCTAssertEqual(one.withdrawServices, [scanner.id])
        XCTAssertTrue(one.withdrawHosts.isEmpty, "the printer is still on it")
        let none = DiscoveryGateway.AnnouncementPlan(made: keyed([printer]), hosts: hosts, wanted: [:])
        XCTAssertEqual(none.withdrawServices, [printer.id])
        XCTAssertEqual(none.withdrawHosts, ["printer.lab-a.local"])
        XCTAssertTrue(
            DiscoveryGateway.AnnouncementPlan(made: keyed([printer]), hosts: hosts, wanted: keyed([printer])).isEmpty,
            "nothing changed: nothing to do")
    }

    func testATXTChangeKeepsItsPlaceAndAPortChangePublishesAgain() {
        let printer = announcement("Office Printer")
        let hosts = ["printer.lab-a.local": [[UInt8]]([[198, 18, 1, 10]])]
        let text = DiscoveryGateway.AnnouncementPlan(
            made: keyed([printer]), hosts: hosts, wanted: keyed([announcement("Office Printer", note: "second")]))
        XCTAssertEqual(text.changeText.map(\.service.txt), [[Array("note=second".utf8)]])
        XCTAssertTrue(text.withdrawServices.isEmpty && text.publishServices.isEmpty)
        let moved = announcement("Office Printer", port: 632)
        let port = DiscoveryGateway.AnnouncementPlan(made: keyed([printer]), hosts: hosts, wanted: keyed([moved]))
        XCTAssertEqual(port.withdrawServices, [printer.id])
        XCTAssertEqual(port.publishServices, [moved])
    }

    func testAHostWhoseAddressesChangeIsPublishedAgainAndTheSameNameOnTwoLinksStaysTwo() {
        let printer = announcement("Office Printer")
        let hosts = ["printer.lab-a.local": [[UInt8]]([[198, 18, 1, 10]])]
        let readdressed = announcement("Office Printer", addresses: [[198, 18, 1, 11]])
        let plan = DiscoveryGateway.AnnouncementPlan(made: keyed([printer]), hosts: hosts, wanted: keyed([readdressed]))
        XCTAssertEqual(plan.withdrawHosts, ["printer.lab-a.local"])
        XCTAssertEqual(plan.publishHosts, ["printer.lab-a.local": [[198, 18, 1, 11]]])
        XCTAssertTrue(plan.publishServices.isEmpty, "its services keep naming the host")
        let otherLink = announcement("Office Printer", label: "lab-c")
        let both = DiscoveryGateway.AnnouncementPlan(made: [:], hosts: [:], wanted: keyed([printer, otherLink]))
        XCTAssertEqual(both.publishServices.count, 2, "the label keeps them apart")
        XCTAssertEqual(Set(both.publishHosts.keys), ["printer.lab-a.local", "printer.lab-c.local"])
    }
}
