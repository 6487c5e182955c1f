import Salut
import XCTest

@testable import PeerTransferCore

/// How a send finds, judges and reaches its receiver, without a network: trust is by key.
final class SenderStateMachineTests: XCTestCase {
    typealias Machine = Sender.StateMachine

    let kitchenKey = String(repeating: "ab", count: 32)
    let squatterKey = String(repeating: "cd", count: 32)
    let ownKey = String(repeating: "01", count: 32)

    func resolved(_ name: String, key: String, domain: String = "local") -> ResolvedService {
        ResolvedService(
            service: DiscoveredService(name: name, type: TransferLimits.serviceType, domain: domain),
            hostName: "host.local", port: 4000,
            txtRecord: try! TXTRecord(["v": "\(TransferLimits.protocolVersion)", "fp": key]))
    }

    func machine(
        _ name: String = "Kitchen", rule: Machine.FirstContactRule = .refuse, expecting: String? = nil,
        domain: String = "local", grants: Bool = false
    ) -> Machine {
        Machine(
            Machine.Settings(
                name: name, domain: domain, expectedKey: expecting, firstContact: rule, honoursQueuedGrants: grants,
                ownKey: ownKey, configOption: ""))
    }

    func book(pins: [String: String] = [:], trusted: [String: String] = [:], grants: [String]? = nil) -> KnownPeers {
        var book = KnownPeers()
        book.pins = pins
        book.trusted = trusted
        book.acceptingNewKey = grants
        return book
    }

    func failure(_ action: Machine.Action, file: StaticString = #filePath, line: UInt = #line) -> PeerTransferError? {
        guard case .fail(let error) = action else {
            XCTFail("expected a failure, got \(action)", file: file, line: line)
            return nil
        }
        return error
    }

    func testAPinnedReceiverIsSentToWithoutPinningAgain() {
        var machine = machine()
        let kitchen = resolved("Kitchen", key: kitchenKey)
        XCTAssertEqual(
            machine.lookedUp(.success(kitchen), book: .success(book(pins: ["Kitchen": kitchenKey]))),
            .connect(kitchen.service, key: kitchenKey))
        guard case .transfer(let reached) = machine.connected() else { return XCTFail("not reached") }
        XCTAssertEqual(reached.pin, .never)
        XCTAssertFalse(reached.firstUse)
        XCTAssertEqual(reached.spelled, "Kitchen")
    }

    func testANewReceiverIsRefusedWithTheCommandThatPairsIt() {
        var machine = machine()
        let error = failure(machine.lookedUp(.success(resolved("Kitchen", key: kitchenKey)), book: .success(book())))
        XCTAssertEqual(error?.exitCode, 6)
        XCTAssertTrue(
            error?.message.contains("peerxfer trust --pin 'Kitchen' \(kitchenKey)") == true,
            "\(String(describing: error))")
        XCTAssertTrue(
            error?.message.contains(VerificationCode.between(ownKey, kitchenKey)) == true, "the code is shown")
    }

    func testANewReceiverAskedAboutIsPinnedOnlyOnceItAccepts() {
        var machine = machine(rule: .ask)
        let kitchen = resolved("Kitchen", key: kitchenKey)
        XCTAssertEqual(
            machine.lookedUp(.success(kitchen), book: .success(book())),
            .ask(
                NewReceiver(
                    name: "Kitchen", key: kitchenKey, code: VerificationCode.between(ownKey, kitchenKey), knownAs: nil))
        )
        XCTAssertEqual(machine.answered(trusting: true), .connect(kitchen.service, key: kitchenKey))
        guard case .transfer(let reached) = machine.connected() else { return XCTFail("not reached") }
        XCTAssertEqual(reached.pin, .onceAccepted)
        XCTAssertTrue(reached.firstUse)
    }

    func testAPersonWhoSaysNoSendsNothing() {
        var machine = machine(rule: .ask)
        _ = machine.lookedUp(.success(resolved("Kitchen", key: kitchenKey)), book: .success(book()))
        let error = failure(machine.answered(trusting: false))
        XCTAssertEqual(error?.exitCode, 6)
        XCTAssertTrue(error?.message.contains("you did not trust") == true)
    }

    func testAChangedKeyIsRefusedWhateverTheCaseOfTheName() {
        // The pinned key is looked for under any name first; nobody else advertises it.
        var machine = machine("kitchen", rule: .acceptNewKey)
        XCTAssertEqual(
            machine.lookedUp(
                .success(resolved("KITCHEN", key: squatterKey)), book: .success(book(pins: ["Kitchen": kitchenKey]))),
            .searchByKey(kitchenKey))
        let refused = failure(machine.searchedByKey([]))
        XCTAssertEqual(refused?.exitCode, 6)
        XCTAssertTrue(refused?.message.hasPrefix("KEY CHANGED") == true, "\(String(describing: refused))")
    }

    func testTheDecisionNamesTheReceiverAsItPublishesItself() {
        var asked = machine("kitchen", rule: .ask)
        let action = asked.lookedUp(.success(resolved("Kitchen", key: kitchenKey)), book: .success(book()))
        guard case .ask(let receiver) = action else { return XCTFail("\(action)") }
        XCTAssertEqual(receiver.name, "Kitchen")
        let said = failure(asked.answered(trusting: false))
        XCTAssertTrue(said?.message.contains("you did not trust \"Kitchen\"") == true, "\(String(describing: said))")
        var refused = machine("kitchen")
        let error = failure(refused.lookedUp(.success(resolved("Kitchen", key: kitchenKey)), book: .success(book())))
        XCTAssertTrue(
            error?.message.hasPrefix("\"Kitchen\" is new to this device") == true, "\(String(describing: error))")
    }

    func testASquattedNameSendsToTheDeviceWithThePinnedKeyUnderItsNewName() {
        var machine = machine()
        let pinned = book(pins: ["Kitchen": kitchenKey])
        XCTAssertEqual(
            machine.lookedUp(.success(resolved("Kitchen", key: squatterKey)), book: .success(pinned)),
            .searchByKey(kitchenKey))
        let real = resolved("Kitchen #2", key: kitchenKey)
        XCTAssertEqual(machine.searchedByKey([real]), .connect(real.service, key: kitchenKey))
        guard case .transfer(let reached) = machine.connected() else { return XCTFail("not reached") }
        XCTAssertTrue(reached.foundByKey)
        XCTAssertEqual(reached.renamedFrom, "Kitchen")
        XCTAssertEqual(reached.pin, .beforeSending, "the paired device under the link's new name")
    }

    func testAPairedNameThatIsNotThereIsLookedForByKeyThenReportedNotFound() {
        var machine = machine()
        XCTAssertEqual(
            machine.lookedUp(
                .failure(.peerNotFound("not found")), book: .success(book(pins: ["Kitchen": kitchenKey]))),
            .searchByKey(kitchenKey))
        XCTAssertEqual(machine.searchedByKey([]), .reportNotFound)
        var unknown = self.machine()
        XCTAssertEqual(
            unknown.lookedUp(.failure(.peerNotFound("not found")), book: .success(book())), .reportNotFound,
            "nothing to look for by key")
    }

    func testAFailedNameServerIsNotTakenForAMissingReceiver() {
        var machine = machine()
        let error = failure(machine.lookedUp(.failure(.runtime("SERVFAIL")), book: .success(book())))
        XCTAssertEqual(error?.exitCode, 1)
    }

    func testAnExpectedKeyThatDiffersIsRefusedAndOneThatMatchesPins() {
        var wrong = machine(expecting: String(kitchenKey.prefix(16)))
        XCTAssertEqual(
            wrong.lookedUp(.success(resolved("Kitchen", key: squatterKey)), book: .success(book())),
            .searchByKey(String(kitchenKey.prefix(16))))
        let error = failure(wrong.searchedByKey([]))
        XCTAssertTrue(error?.message.contains("not the one you expected") == true, "\(String(describing: error))")

        var right = machine(expecting: String(kitchenKey.prefix(16)))
        let kitchen = resolved("Kitchen", key: kitchenKey)
        XCTAssertEqual(
            right.lookedUp(.success(kitchen), book: .success(book())), .connect(kitchen.service, key: kitchenKey))
        guard case .transfer(let reached) = right.connected() else { return XCTFail("not reached") }
        XCTAssertEqual(reached.pin, .onceAccepted)
    }

    func testAQueuedGrantPinsOnlyForTheDaemonsSends() {
        let granted = book(grants: ["kitchen"])
        var daemon = machine(grants: true)
        let kitchen = resolved("Kitchen", key: kitchenKey)
        XCTAssertEqual(
            daemon.lookedUp(.success(kitchen), book: .success(granted)), .connect(kitchen.service, key: kitchenKey))
        var foreground = machine(grants: false)
        XCTAssertEqual(failure(foreground.lookedUp(.success(kitchen), book: .success(granted)))?.exitCode, 6)
    }

    func testAKeyPairedUnderAnotherNameIsAskedAboutNotSentToSilently() {
        var machine = machine("Office", rule: .ask)
        let action = machine.lookedUp(
            .success(resolved("Office", key: kitchenKey)), book: .success(book(pins: ["Kitchen": kitchenKey])))
        guard case .ask(let receiver) = action else { return XCTFail("\(action)") }
        XCTAssertEqual(receiver.knownAs, "Kitchen")
    }

    func testAnImpostorAdvertisingTheKeyIsPassedOverForTheNextOne() {
        var machine = machine()
        let pinned = book(pins: ["Kitchen": kitchenKey])
        _ = machine.lookedUp(.failure(.peerNotFound("gone")), book: .success(pinned))
        let impostor = resolved("Kitchen #2", key: kitchenKey)
        let real = resolved("Kitchen #3", key: kitchenKey)
        let other = resolved("Kitchen #4", key: squatterKey)
        XCTAssertEqual(machine.searchedByKey([impostor, other, real]), .connect(impostor.service, key: kitchenKey))
        XCTAssertEqual(
            machine.connectionFailed(.tls(pinMismatch: true, presented: squatterKey, description: "pin")),
            .connect(real.service, key: kitchenKey), "only those advertising the same key are tried")
        let error = failure(
            machine.connectionFailed(.tls(pinMismatch: true, presented: squatterKey, description: "pin")))
        XCTAssertTrue(
            error?.message.contains("presented a key (\(squatterKey))") == true, "\(String(describing: error))")
    }

    func testAReceiverGoneSinceTheLookUpIsNotThereOnTheLinkAndCannotConnectInAZone() {
        var link = machine()
        let kitchen = resolved("Kitchen", key: kitchenKey)
        _ = link.lookedUp(.success(kitchen), book: .success(book(pins: ["Kitchen": kitchenKey])))
        XCTAssertEqual(link.connectionFailed(.unreachable(description: "refused")), .reportNotFound)

        var zone = machine(domain: "home.arpa")
        let zoned = resolved("Kitchen", key: kitchenKey, domain: "home.arpa")
        XCTAssertEqual(
            zone.lookedUp(.success(zoned), book: .success(book(pins: ["Kitchen.home.arpa": kitchenKey]))),
            .connect(zoned.service, key: kitchenKey), "pinned under NAME.ZONE in a zone")
        XCTAssertEqual(failure(zone.connectionFailed(.unreachable(description: "refused")))?.exitCode, 1)
    }

    func testABookThatCannotBeReadRefusesEveryDecision() {
        var machine = machine(rule: .acceptNewKey)
        let error = failure(
            machine.lookedUp(
                .success(resolved("Kitchen", key: kitchenKey)), book: .failure(.runtime("not a known-peers file"))))
        XCTAssertEqual(error?.message, "not a known-peers file")
    }

    func testAReceiverWithoutAValidKeyIsRefused() {
        var machine = machine(rule: .acceptNewKey)
        let error = failure(machine.lookedUp(.success(resolved("Kitchen", key: "zz")), book: .success(book())))
        XCTAssertEqual(error?.exitCode, 6)
        XCTAssertTrue(error?.message.contains("no valid key") == true)
    }
}
