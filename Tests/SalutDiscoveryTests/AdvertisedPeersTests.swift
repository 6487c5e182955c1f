import Foundation
import SalutStreams
import SalutTestSupport
import XCTest

@testable import SalutDiscovery

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

    func testEachServiceIsDueOnceAndAgainWhenItsKeyOrTheBooksEntryChangesOrItComesBack() throws {
        let peers = try peers()
        // This end's own advertisement is never due; the others are, once.
        XCTAssertEqual(
            Set(peers.follow(try listing([alice: aliceKey, bob: bobKey, me: own]))), [alice, bob])
        XCTAssertEqual(peers.follow(nil), [])
        XCTAssertEqual(peers.follow(try listing([alice: aliceKey, bob: bobKey, me: own])), [])
        // Bob advertises another key: due again, alone.
        XCTAssertEqual(peers.follow(try listing([alice: aliceKey, bob: aliceKey, me: own])), [bob])
        // The book's entry for alice changes (trusted now, then removed by hand): due each time.
        XCTAssertTrue(try peers.trustedKeys.trustOnFirstUse(aliceKey, for: "alice"))
        XCTAssertEqual(peers.follow(nil), [alice])
        try peers.trustedKeys.forget("alice")
        XCTAssertEqual(peers.follow(nil), [alice])
        // Alice leaves and comes back with the same key: due again.
        XCTAssertEqual(peers.follow(try listing([bob: aliceKey], removed: [alice])), [])
        XCTAssertEqual(peers.follow(try listing([alice: aliceKey, bob: aliceKey])), [alice])
        // A service whose record is not known yet is due, and due again once it advertises.
        let carol = DiscoveredService(name: "carol", type: "_chat._tcp")
        XCTAssertEqual(peers.follow(try listing([alice: aliceKey, bob: aliceKey, carol: nil])), [carol])
        XCTAssertEqual(peers.follow(try listing([alice: aliceKey, bob: aliceKey, carol: bobKey])), [carol])
        XCTAssertEqual(peers.advertisedKey(of: carol), bobKey)
    }

    func testALookAlikeNameIsAnotherServiceAndFewerThanTheLimitAreDueAtOnce() throws {
        let peers = try peers(maximumConcurrentConnections: 2)
        let kitchen = DiscoveredService(name: "Kitchen", type: "_chat._tcp")
        let kelvin = DiscoveredService(name: "\u{212a}itchen", type: "_chat._tcp")  // a Kelvin sign for the K
        let update = try listing([kitchen: aliceKey, kelvin: bobKey, alice: aliceKey])
        let first = peers.follow(update)
        XCTAssertEqual(first.count, 2)
        let second = peers.follow(nil)
        XCTAssertEqual(Set(first + second), [kitchen, kelvin, alice])
        XCTAssertEqual(peers.advertisedKey(of: kelvin), bobKey)
        XCTAssertEqual(peers.advertisedKey(of: kitchen), aliceKey)
    }

    func testAClientsKeyBelongsToItsTrustedNameOrToTheOneUntrustedNameAdvertisingIt() async throws {
        let peers = try peers()
        _ = peers.follow(try listing([alice: aliceKey, bob: bobKey, me: own]))
        // Advertised by one name with no key trusted: that name; trusted only when asked.
        let unproven = try await peers.owner(ofClientKey: aliceKey, waitingUpTo: .zero)
        XCTAssertEqual(unproven, "alice")
        XCTAssertNil(peers.trustedKeys.key(for: "alice"))
        let proven = try await peers.owner(ofClientKey: aliceKey.uppercased(), trustingOnFirstUse: true)
        XCTAssertEqual(proven, "alice")
        XCTAssertEqual(peers.trustedKeys.key(for: "alice"), aliceKey)
        // Now alice's key is hers wherever it is advertised, and a name trusted with another key
        // cannot claim it; this end's key and a key nobody advertises belong to no one.
        _ = peers.follow(try listing([bob: aliceKey, me: own]))
        let moved = try await peers.owner(ofClientKey: aliceKey, waitingUpTo: .zero)
        XCTAssertEqual(moved, "alice")
        XCTAssertTrue(try peers.trustedKeys.trustOnFirstUse(bobKey, for: "bob"))
        _ = peers.follow(try listing([bob: String(repeating: "c", count: 64)]))
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
        _ = peers.follow(try listing([alice: aliceKey, twin: aliceKey]))
        let claimedTwice = try await peers.owner(ofClientKey: aliceKey, waitingUpTo: .milliseconds(200))
        XCTAssertNil(claimedTwice)
        // A client heard before its advertisement is seen: admitted once the browse lists it.
        let key = bobKey
        let waiting = Task { try await peers.owner(ofClientKey: key, waitingUpTo: .seconds(30)) }
        _ = peers.follow(try listing([alice: aliceKey, bob: bobKey]))
        let late = try await withDeadline(30, "the late listing") { try await waiting.value }
        XCTAssertEqual(late, "bob")
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
