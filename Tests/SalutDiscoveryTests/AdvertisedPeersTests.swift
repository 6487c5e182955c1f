import Foundation
import SalutTestSupport
import XCTest

@testable import SalutDiscovery
@testable import SalutStreams

/// `AdvertisedPeers`' rules without I/O: which services to connect to, and whose a client's key
/// is. (Connecting through it, against the avahi-daemon, is `LANChatExampleTests`.)
final class AdvertisedPeersTests: XCTestCase {
    let own = String(repeating: "0", count: 64)
    let aliceKey = String(repeating: "a", count: 64)
    let bobKey = String(repeating: "b", count: 64)
    let alice = DiscoveredService(name: "alice", type: "_chat._tcp")
    let bob = DiscoveredService(name: "bob", type: "_chat._tcp")
    let me = DiscoveredService(name: "me", type: "_chat._tcp")

    var folder = ""
    override func setUpWithError() throws {
        folder = FileManager.default.temporaryDirectory.appendingPathComponent("peers-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
    }
    override func tearDown() { try? FileManager.default.removeItem(atPath: folder) }

    func peers(maximumConcurrentConnections: Int = 8) throws -> AdvertisedPeers {
        AdvertisedPeers(
            txtKey: "fp", trustedKeys: try TrustedKeys(path: folder + "/known"), ownKey: own.uppercased(),
            maximumConcurrentConnections: maximumConcurrentConnections)
    }

    /// A browse listing `advertising` (service to the key in its `fp`; nil: no record yet).
    func listing(_ advertising: [DiscoveredService: String?], removed: [DiscoveredService] = []) throws -> BrowseUpdate
    {
        var records: [DiscoveredService: TXTRecord] = [:]
        for case (let service, let key?) in advertising { records[service] = try TXTRecord(["fp": key]) }
        return BrowseUpdate(
            changes: removed.map { .removed($0) }, services: Set(advertising.keys), isComplete: true,
            txtRecords: records)
    }

    /// The services due, each one's reservation ended at once (as a try that ended).
    func due(_ peers: AdvertisedPeers, after update: BrowseUpdate? = nil) async throws -> Set<DiscoveredService> {
        let services = peers.servicesToConnect(after: update)
        for service in services { await end(peers, service) }
        return Set(services)
    }

    /// Ends `service`'s reservation the way a try ends: a refused connect (it advertises a key the
    /// book trusts for "holder", so it is refused before anything is connected).
    func end(_ peers: AdvertisedPeers, _ service: DiscoveredService) async {
        let key = peers.advertisedKey(of: service) ?? own
        _ = try? peers.trustedKeys.trustOnFirstUse(key == own ? aliceKey : key, for: "holder")
        _ = try? await peers.connect(to: service, tls: .client)
        try? peers.trustedKeys.forget("holder")
    }

    func testEachServiceIsDueOnceAndAgainWhenItsKeyOrTheBooksEntryChangesOrItComesBack() async throws {
        let peers = try peers()
        // This end's own advertisement is never due; the others are, once.
        let first = try await due(peers, after: try listing([alice: aliceKey, bob: bobKey, me: own]))
        XCTAssertEqual(first, [alice, bob])
        let again = try await due(peers)
        XCTAssertEqual(again, [])
        let same = try await due(peers, after: try listing([alice: aliceKey, bob: bobKey, me: own]))
        XCTAssertEqual(same, [])
        // Bob advertises another key: due again, alone.
        let cKey = String(repeating: "c", count: 64)
        let changed = try await due(peers, after: try listing([alice: aliceKey, bob: cKey, me: own]))
        XCTAssertEqual(changed, [bob])
        // The book's entry for alice changes (trusted now, then removed by hand): due each time.
        XCTAssertTrue(try peers.trustedKeys.trustOnFirstUse(aliceKey, for: "alice"))
        let trusted = try await due(peers)
        XCTAssertEqual(trusted, [alice])
        try peers.trustedKeys.forget("alice")
        let forgotten = try await due(peers)
        XCTAssertEqual(forgotten, [alice])
        // Alice leaves and comes back with the same key: due again; or is asked for again.
        let left = try await due(peers, after: try listing([bob: cKey], removed: [alice]))
        XCTAssertEqual(left, [])
        let back = try await due(peers, after: try listing([alice: aliceKey, bob: cKey]))
        XCTAssertEqual(back, [alice])
        peers.tryAgain(bob)
        let retried = try await due(peers)
        XCTAssertEqual(retried, [bob])
        // A client admitted as alice (Alice, in another case): alice is due again.
        peers.tryAgain(named: "Alice")
        let rejoin = try await due(peers)
        XCTAssertEqual(rejoin, [alice])
        // A service whose record is not known yet waits for it (it may be this end's own).
        let carol = DiscoveredService(name: "carol", type: "_chat._tcp")
        let unknown = try await due(peers, after: try listing([alice: aliceKey, bob: cKey, carol: nil]))
        XCTAssertEqual(unknown, [])
        let known = try await due(peers, after: try listing([alice: aliceKey, bob: cKey, carol: bobKey]))
        XCTAssertEqual(known, [carol])
        XCTAssertEqual(peers.advertisedKey(of: carol), bobKey)
    }

    func testAtMostTheLimitIsReservedAndThoseWaitingLongestComeFirst() async throws {
        let peers = try peers(maximumConcurrentConnections: 2)
        let kitchen = DiscoveredService(name: "Kitchen", type: "_chat._tcp")
        let kelvin = DiscoveredService(name: "\u{212a}itchen", type: "_chat._tcp")  // a Kelvin sign for the K
        let update = try listing([kitchen: aliceKey, kelvin: bobKey, alice: aliceKey])
        // A look-alike is another service. Two are reserved; the third waits, however often asked.
        let first = peers.servicesToConnect(after: update)
        XCTAssertEqual(first.count, 2)
        XCTAssertEqual(peers.servicesToConnect(after: update), [])
        XCTAssertEqual(peers.servicesToConnect(), [])
        // One leaves the browse before it was tried: its place goes to the third; when it comes
        // back it waits for a try to end.
        let without = try listing(
            [kitchen: aliceKey, kelvin: bobKey, alice: aliceKey].filter { $0.key != first[1] }, removed: [first[1]])
        let third = peers.servicesToConnect(after: without)
        XCTAssertEqual(third.count, 1)
        XCTAssertEqual(Set(first + third), [kitchen, kelvin, alice])
        XCTAssertEqual(peers.servicesToConnect(after: update), [])
        await end(peers, third[0])
        XCTAssertEqual(peers.servicesToConnect(), [first[1]])
        await end(peers, first[0])
        await end(peers, first[1])
        // The first one tried changes its key again and again: the one waiting longest (the
        // second) goes before it.
        let changed = try listing([
            first[0]: String(repeating: "c", count: 64), first[1]: String(repeating: "d", count: 64),
            third[0]: peers.advertisedKey(of: third[0]),
        ])
        XCTAssertEqual(peers.servicesToConnect(after: changed, skipping: [first[1]]), [first[0]])
        XCTAssertEqual(peers.servicesToConnect(), [first[1]], "skipped, not tried: still due")
    }

    func testConnectingRefusesThisEndsKeyAndAKeyTrustedUnderAnotherNameBeforeConnecting() async throws {
        let peers = try peers()
        _ = peers.servicesToConnect(after: try listing([alice: aliceKey, me: own]))
        XCTAssertTrue(try peers.trustedKeys.trustOnFirstUse(aliceKey, for: "bob"))
        for (service, code, other) in [
            (me, AdvertisedPeers.Refusal.Code.ownKey, nil), (alice, .anotherNamesKey, "bob"),
        ] {
            do {
                let pair = try await withDeadline(10, "connect") { try await peers.connect(to: service, tls: .client) }
                pair.close()
                XCTFail("connected to \(service)")
            } catch let refusal as AdvertisedPeers.Refusal {
                XCTAssertEqual(refusal.code, code)
                XCTAssertEqual(refusal.service, service)
                XCTAssertEqual(refusal.otherName, other)
            }
        }
        XCTAssertNil(peers.trustedKeys.key(for: "alice"), "nothing trusted for a refused name")
    }

    func testAClientsKeyBelongsToItsTrustedNameOrToTheOneUntrustedNameAdvertisingIt() async throws {
        let peers = try peers()
        _ = peers.servicesToConnect(after: try listing([alice: aliceKey, bob: bobKey, me: own]))
        // Advertised by one name with no key trusted: that name; trusted only when asked.
        let unproven = try await peers.owner(ofClientKey: aliceKey, waitingUpTo: .zero)
        XCTAssertEqual(unproven, "alice")
        XCTAssertNil(peers.trustedKeys.key(for: "alice"))
        let proven = try await peers.owner(ofClientKey: aliceKey.uppercased(), trustingOnFirstUse: true)
        XCTAssertEqual(proven, "alice")
        XCTAssertEqual(peers.trustedKeys.key(for: "alice"), aliceKey)
        // Now alice's key is hers wherever it is advertised, and a name trusted with another key
        // cannot claim it; this end's key and a key nobody advertises belong to no one.
        _ = peers.servicesToConnect(after: try listing([bob: aliceKey, me: own]))
        let moved = try await peers.owner(ofClientKey: aliceKey, waitingUpTo: .zero)
        XCTAssertEqual(moved, "alice")
        XCTAssertTrue(try peers.trustedKeys.trustOnFirstUse(bobKey, for: "bob"))
        _ = peers.servicesToConnect(after: try listing([bob: String(repeating: "c", count: 64)]))
        let claimedByATrustedName = try await peers.owner(
            ofClientKey: String(repeating: "c", count: 64), waitingUpTo: .milliseconds(200))
        XCTAssertNil(claimedByATrustedName)
        let ownKey = try await peers.owner(ofClientKey: own, waitingUpTo: .zero)
        XCTAssertNil(ownKey)
        let notAKey = try await peers.owner(ofClientKey: "not a key", waitingUpTo: .zero)
        XCTAssertNil(notAKey)
    }

    func testTwoNamesAdvertisingOneKeyClaimItNeitherAndALateListingIsWaitedFor() async throws {
        let peers = try peers()
        let twin = DiscoveredService(name: "alice-twin", type: "_chat._tcp")
        _ = peers.servicesToConnect(after: try listing([alice: aliceKey, twin: aliceKey]))
        let claimedTwice = try await peers.owner(ofClientKey: aliceKey, waitingUpTo: .milliseconds(200))
        XCTAssertNil(claimedTwice)
        // A client heard before its advertisement is seen: admitted once the browse lists it.
        let key = bobKey
        let waiting = Task { try await peers.owner(ofClientKey: key, waitingUpTo: .seconds(30)) }
        _ = peers.servicesToConnect(after: try listing([alice: aliceKey, bob: bobKey]))
        let late = try await withDeadline(30, "the late listing") { try await waiting.value }
        XCTAssertEqual(late, "bob")
    }

    func testTwoNamesAdvertisingOneUntrustedKeyAreBothRefusedBeforeConnecting() async throws {
        let peers = try peers()
        let twin = DiscoveredService(name: "alice-twin", type: "_chat._tcp")
        _ = peers.servicesToConnect(after: try listing([alice: aliceKey, twin: aliceKey]))
        for (service, other) in [(alice, "alice-twin"), (twin, "alice")] {
            do {
                let pair = try await withDeadline(10, "connect") { try await peers.connect(to: service, tls: .client) }
                pair.close()
                XCTFail("connected to \(service)")
            } catch let refusal as AdvertisedPeers.Refusal {
                XCTAssertEqual(refusal.code, .sharedKey)
                XCTAssertEqual(refusal.otherName, other)
                XCTAssertTrue(refusal.description.contains("neither is trusted"), refusal.description)
            }
        }
        XCTAssertEqual(peers.trustedKeys.entries, [:])
        // The other name goes: alice is due again (she was refused only for the sharing).
        XCTAssertEqual(peers.servicesToConnect(after: try listing([alice: aliceKey], removed: [twin])), [alice])
    }

    func testAtMostThirtyTwoClientsWaitForTheirNameAndTheOthersAreAnsweredAtOnce() async throws {
        let peers = try peers()
        let strangers = (0..<AdvertisedPeers.maximumWaitingClients).map { String(format: "%064x", $0 + 1) }
        let waiting = strangers.map { key in Task { try await peers.owner(ofClientKey: key, waitingUpTo: .seconds(60)) }
        }
        defer { waiting.forEach { $0.cancel() } }
        try await eventually("the waiting clients are counted", timeout: 10) {
            peers.waitingClientsNow == AdvertisedPeers.maximumWaitingClients
        }
        // One more, with as long a wait: answered (none) long before its wait would end.
        let more = try await withDeadline(10, "the client past the cap") {
            try await peers.owner(ofClientKey: String(repeating: "e", count: 64), waitingUpTo: .seconds(60))
        }
        XCTAssertNil(more)
        waiting.forEach { $0.cancel() }
        for task in waiting { _ = await task.result }
        XCTAssertEqual(peers.waitingClientsNow, 0)
    }

    func testRefusedClientsAreReportedAtMostOncePerIntervalWithACount() async throws {
        let peers = try peers()
        let reports = Locked<[AdvertisedPeers.RefusedClients]>([])
        // A long interval while the burst comes (nothing but the first may be reported), then
        // a short one: the next refusal after it is reported with the count of those unsaid.
        let burst = peers.clientEvaluator(waitingUpTo: .zero, reportingAtMostEvery: .seconds(3600)) { report in
            reports.withLock { $0.append(report) }
        }
        let later = peers.clientEvaluator(waitingUpTo: .zero, reportingAtMostEvery: .zero) { report in
            reports.withLock { $0.append(report) }
        }
        func refuse(_ n: Int, with evaluate: TLSTrustEvaluator) async throws {
            let decided = Locked<Bool?>(nil)
            let trust = TLSPeerTrust(
                certificateSHA256: "", publicKeySHA256: String(format: "%064x", n), subject: "", protocolVersion: "",
                cipherSuite: "", policyFailure: nil)
            evaluate(trust) { ok in decided.withLock { $0 = ok } }
            try await eventually("client \(n) is decided", timeout: 10) { decided.value != nil }
            XCTAssertEqual(decided.value, false)
        }
        try await refuse(1, with: burst)
        try await eventually("the first refusal is reported", timeout: 10) { reports.value.count == 1 }
        XCTAssertEqual(reports.value.first?.othersSinceLastReport, 0)
        XCTAssertEqual(
            reports.value.first?.description,
            "refused a client with key \(String(format: "%064x", 1)): no peer is trusted with it, and no new peer advertises it (a known peer whose key changed is refused until its old entry is removed from the book)"
        )
        for n in 2...5 { try await refuse(n, with: burst) }
        try await refuse(6, with: later)
        try await eventually("the next report counts the four unsaid", timeout: 10) { reports.value.count == 2 }
        XCTAssertEqual(reports.value.last?.othersSinceLastReport, 4)
        XCTAssertTrue(reports.value.last?.description.hasSuffix("(and 4 other clients since the last report)") ?? false)
    }

    func testARefusalSaysWhatIsWrongAndForAChangedKeyWhatToDo() {
        let path = folder + "/known"
        let changed = AdvertisedPeers.Refusal(
            code: .keyChanged, service: DiscoveredService(name: "car\u{7}ol", type: "_chat._tcp"), key: bobKey,
            trustedKey: aliceKey, otherName: nil, bookPath: path)
        XCTAssertEqual(
            changed.description,
            "it now advertises TLS key \(bobKey), not the one trusted for its name (\(aliceKey)); once its owner confirms the new key, remove \"car\\x07ol\" from \(path)"
        )
        let other = AdvertisedPeers.Refusal(
            code: .anotherNamesKey, service: alice, key: bobKey, trustedKey: nil, otherName: "bob", bookPath: nil)
        XCTAssertEqual(other.description, "its key is the one trusted for bob")
    }
}
