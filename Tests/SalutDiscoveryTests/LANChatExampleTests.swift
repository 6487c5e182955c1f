import Foundation
import Salut
import SalutTestSupport
import XCTest

/// Examples/LANChat (`lan-chat`), three instances and an impostor, through the avahi-daemon.
final class LANChatExampleTests: XCTestCase {
    func testHelpTeachesTheArgumentsAndBadArgumentsAreAUsageError() throws {
        let binary = BuiltProduct.path("lan-chat")
        guard FileManager.default.isExecutableFile(atPath: binary) else {
            return XCTFail("build lan-chat first (Scripts/test does: swift build --build-tests)")
        }
        let help = try Foreign([binary, "--help"])
        let helpText = help.finish(seconds: 10)
        XCTAssertEqual(help.process.terminationStatus, 0, helpText)
        XCTAssertTrue(helpText.contains("usage: lan-chat NAME DIRECTORY [TYPE]"), helpText)
        for (arguments, problem) in [
            (["only-a-name"], "give a NAME and a DIRECTORY"), (["--nmae", "dir"], "unknown option --nmae"),
            (["alice", "/nonexistent/x", "not-a-type"], "invalid service type"),
            (["", "/nonexistent/y"], "the name is empty"),
        ] {
            let bad = try Foreign([binary] + arguments)
            let badText = bad.finish(seconds: 10)
            XCTAssertEqual(bad.process.terminationStatus, 2, badText)
            XCTAssertTrue(badText.contains(problem), badText)
        }
    }

    func testThreePeersChatAndAnImpostorUnderAKnownNameIsRefusedBothWays() async throws {
        let binary = BuiltProduct.path("lan-chat")
        guard FileManager.default.isExecutableFile(atPath: binary) else {
            return XCTFail("build lan-chat first (Scripts/test does: swift build --build-tests)")
        }
        let type = uniqueType("lc")
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("lan-chat-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: root) }
        func start(_ name: String, _ folder: String) throws -> Foreign {
            try FileManager.default.createDirectory(atPath: root + "/" + folder, withIntermediateDirectories: true)
            return try Foreign([binary, name, root + "/" + folder, type])
        }
        func expect(_ peer: Foreign, _ text: String, _ seconds: Double = 20, line: UInt = #line) {
            XCTAssertTrue(peer.waitForOutput(containing: text, seconds: seconds), "\(text): \(peer.output)", line: line)
        }
        let alice = try start("alice", "a")
        let bob = try start("bob", "b")
        let carol = try start("carol", "c")
        defer { for peer in [alice, bob, carol] { peer.stop() } }
        for (peer, others) in [(alice, ["bob", "carol"]), (bob, ["alice", "carol"]), (carol, ["alice", "bob"])] {
            for other in others { expect(peer, "connected to \(other)") }
        }
        let connected = Date()

        // A line reaches every other peer, labelled with the name its key was trusted under;
        // text from the network is escaped (the bell is shown, not rung).
        alice.write("bonjour from alice\u{07}\n")
        expect(bob, "[alice] bonjour from alice\\x07")
        expect(carol, "[alice] bonjour from alice\\x07")
        carol.write("salut\n")
        expect(alice, "[carol] salut")
        expect(bob, "[carol] salut")

        // Carol is stopped (SIGTERM): she leaves cleanly, closing her connections with TLS's
        // close_notify. Then someone else takes her name with another key.
        kill(carol.process.processIdentifier, SIGTERM)
        XCTAssertTrue(carol.waitForExit(seconds: 20), carol.output)
        expect(carol, "disconnected from alice (this chat is leaving)")
        expect(alice, "disconnected from carol (")
        expect(bob, "disconnected from carol (")
        XCTAssertFalse(alice.output.contains("close_notify") || bob.output.contains("close_notify"), alice.output)
        let impostor = try start("carol", "m")
        defer { impostor.stop() }
        expect(impostor, "listening as carol (key ")
        let key = String(impostor.output.components(separatedBy: "(key ").last!.prefix(64))
        // Alice and Bob do not connect to it (it advertises another key than they trust for
        // "carol"), and refuse it as a client (its key is not carol's).
        for peer in [alice, bob] {
            expect(peer, "not connecting to carol: it now advertises TLS key \(key)")
            expect(peer, "refused a client with key \(key): no peer is trusted with it, and no new peer advertises it")
        }
        // With TLS 1.3 a client hears of its refusal after its side of the handshake: it is not
        // said connected until the peer's hello, which never comes; nothing it types goes there.
        expect(impostor, "alice did not admit this chat (if our key changed, they must remove our old entry)")
        expect(impostor, "bob did not admit this chat")
        XCTAssertFalse(impostor.output.contains("connected to"), impostor.output)
        // Alice's person is told that the key changed, what to do if it did, and does it: once
        // carol's entry is gone from alice's `known`, alice tries carol again by herself (no new
        // advertisement), trusts the new key and says so; bob, who did nothing, still refuses.
        expect(alice, "once its owner confirms the new key, remove \"carol\" from \(root)/a/known")
        var aliceKnown = try JSONDecoder().decode(
            [String: String].self, from: Data(contentsOf: URL(fileURLWithPath: root + "/a/known")))
        aliceKnown["carol"] = nil
        try JSONEncoder().encode(aliceKnown).write(to: URL(fileURLWithPath: root + "/a/known"), options: .atomic)
        XCTAssertEqual(chmod(root + "/a/known", 0o600), 0)  // (whatever the umask made it)
        expect(alice, "carol's key \(key) is trusted from now on")
        XCTAssertFalse(bob.output.contains("carol's key \(key)"), bob.output)
        // Alice's connection proved to the new carol that alice now takes her key: carol joins
        // alice again by herself (she had been refused), and what she types reaches alice.
        expect(impostor, "connected to alice")
        impostor.write("new carol here\n")
        expect(alice, "[carol] new carol here")
        // A name that points at bob's listener and advertises bob's key (holding no key of its
        // own), with a line break in it: not trusted as another name for bob (bob takes it for
        // himself and leaves it alone), and the file of trusted keys stays whole.
        let bobKey = String(bob.output.components(separatedBy: "(key ").last!.prefix(64))
        let bobPort = try await DiscoveredService(name: "bob", type: type).resolve(timeout: 10).port
        let squatter = try Foreign(["avahi-publish", "-s", "x\nZ bob", type, "\(bobPort)", "fp=\(bobKey)"])
        defer { squatter.stop() }
        expect(alice, "not connecting to x\\x0aZ bob: its key is the one trusted for bob")
        let known = try JSONDecoder().decode(
            [String: String].self, from: Data(contentsOf: URL(fileURLWithPath: root + "/a/known")))
        XCTAssertEqual(known["bob"], bobKey)
        XCTAssertEqual(Set(known.keys), ["bob", "carol"])

        // The chat goes on between the others, past lan-chat's 15 s bound on a peer's hello (a
        // connection that said hello is not cut by it).
        let bound = 16 - Date().timeIntervalSince(connected)
        if bound > 0 { try await Task.sleep(for: .seconds(bound)) }
        alice.write("still here\n")
        expect(bob, "[alice] still here")
        // By now bob has seen the squatter for long: it advertises his own key, so he never
        // tried it, nor said anything of it.
        XCTAssertFalse(bob.output.contains("x\\x0aZ bob"), bob.output)
        for peer in [alice, bob] { peer.closeInput() }
        XCTAssertTrue(alice.waitForExit(seconds: 20) && bob.waitForExit(seconds: 20))
    }
}
