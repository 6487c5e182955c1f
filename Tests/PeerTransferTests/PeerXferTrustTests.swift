import Foundation
@testable import PeerTransferCore
import SalutTestSupport
import XCTest

/// Trust by key, with real daemons: a squatter that answers a receiver's name first gets
/// nothing unless the user trusted its key.
final class PeerXferTrustTests: SalutTestCase {
    /// The key `peerxfer identity` prints for configuration `config`.
    private func key(_ lab: PeerXferLab, _ config: String) throws -> String {
        let key = try lab.key(ofConfig: config)
        XCTAssertEqual(key.count, 64)
        return key
    }

    func testASquatterOnANewNameGetsNothingWithoutATerminalAndTheRefusalSaysHowToPair() throws {
        let lab = try PeerXferLab()
        let name = PeerXferLab.uniqueName("Kitchen")
        try lab.serve(name: name, config: "squatter", inbox: lab.path("squatted"))
        try lab.makeFile("src/payroll.txt", size: 100)
        let (status, output) = try lab.send([lab.path("src/payroll.txt")], to: name, config: "sender", trusting: [])
        XCTAssertEqual(status, 6, output)
        let squatterKey = try key(lab, "squatter")
        XCTAssertTrue(output.contains("is new to this device") && output.contains("nothing was sent"), output)
        XCTAssertTrue(
            output.contains("peerxfer trust --pin '\(name)' \(squatterKey) --config '\(lab.path("sender"))'"), output)
        XCTAssertTrue(output.contains("verification code "), output)
        XCTAssertEqual(PeerXferLab.listing(lab.path("squatted")), [])
        XCTAssertFalse(FileManager.default.fileExists(atPath: lab.path("sender/known-peers.json")), "nothing pinned")
    }

    func testExpectKeyRefusesTheSquatterAndFindsTheRealReceiverUnderItsNewName() throws {
        let lab = try PeerXferLab()
        let name = PeerXferLab.uniqueName("Kitchen")
        // The squatter claims the name first; avahi-daemon renames the real receiver.
        try lab.serve(name: name, config: "squatter", inbox: lab.path("squatted"))
        let real = try lab.serve(name: name, config: "real", inbox: lab.path("inbox"))
        XCTAssertTrue(real.output.contains("\(name) #2"), real.output)
        let realKey = try key(lab, "real")
        try lab.makeFile("src/payroll.txt", size: 100)

        // A key nobody on the link has is refused, and nothing is sent anywhere.
        let (wrong, wrongOutput) = try lab.send(
            [lab.path("src/payroll.txt")], to: name, config: "sender",
            trusting: ["--expect-key", "0123456789abcdef"])
        XCTAssertEqual(wrong, 6, wrongOutput)
        XCTAssertTrue(wrongOutput.contains("not the one you expected (0123456789abcdef…)"), wrongOutput)
        XCTAssertEqual(PeerXferLab.listing(lab.path("squatted")) + PeerXferLab.listing(lab.path("inbox")), [])

        let (status, output) = try lab.send(
            [lab.path("src/payroll.txt")], to: name, config: "sender",
            trusting: ["--expect-key", String(realKey.prefix(16))])
        XCTAssertEqual(status, 0, output)
        XCTAssertTrue(PeerXferLab.sameContents(lab.path("src/payroll.txt"), lab.path("inbox/payroll.txt")))
        XCTAssertEqual(PeerXferLab.listing(lab.path("squatted")), [])
        // Pinned under the name the user gave: the next plain send goes to the real one too.
        try lab.makeFile("src/second.txt", size: 50)
        let (again, againOutput) = try lab.send([lab.path("src/second.txt")], to: name, config: "sender", trusting: [])
        XCTAssertEqual(again, 0, againOutput)
        XCTAssertTrue(PeerXferLab.sameContents(lab.path("src/second.txt"), lab.path("inbox/second.txt")))
        XCTAssertEqual(PeerXferLab.listing(lab.path("squatted")), [])
    }

    func testAcceptNewKeyPinsTheFirstKeyAndAPinMadeOutOfBandRefusesASquatter() throws {
        let lab = try PeerXferLab()
        let name = PeerXferLab.uniqueName("Desk")
        try lab.serve(name: name, config: "first", inbox: lab.path("first"))
        try lab.makeFile("src/a.txt", size: 10)
        let (status, output) = try lab.send(
            [lab.path("src/a.txt")], to: name, config: "sender", trusting: ["--accept-new-key"])
        XCTAssertEqual(status, 0, output)
        XCTAssertTrue(output.contains("\"firstUse\":true"), output)
        let known = try KnownPeers.load(from: lab.path("sender/known-peers.json"))
        XCTAssertEqual(known.pins[name], try key(lab, "first"))

        // A receiver not running yet, pinned from the key its owner read out; a squatter on
        // its name is refused as a changed key, even with --accept-new-key.
        let office = PeerXferLab.uniqueName("Office")
        let officeKey = try key(lab, "office")
        let (pinned, pinnedOutput) = try lab.run(["trust", "--pin", office, officeKey, "--config", lab.path("sender")])
        XCTAssertEqual(pinned, 0, pinnedOutput)
        try lab.serve(name: office, config: "squatter", inbox: lab.path("squatted"))
        for trusting in [[], ["--accept-new-key"]] {
            let (refused, refusedOutput) = try lab.send(
                [lab.path("src/a.txt")], to: office, config: "sender", trusting: trusting)
            XCTAssertEqual(refused, 6, refusedOutput)
            XCTAssertTrue(refusedOutput.contains("KEY CHANGED"), refusedOutput)
        }
        XCTAssertEqual(PeerXferLab.listing(lab.path("squatted")), [])
        // Usage errors: a short or non-ASCII key, a key without --pin.
        let fullWidth = String(repeating: "\u{FF11}", count: 64)
        for arguments in [
            ["trust", "--pin", office, "abcd"], ["trust", "--pin", office, fullWidth], ["trust", office, officeKey],
            ["send", lab.path("src/a.txt"), "--to", office, "--expect-key", "abc"],
            ["send", lab.path("src/a.txt"), "--to", office, "--expect-key", officeKey, "--accept-new-key"],
        ] {
            let (code, said) = try lab.run(arguments + ["--config", lab.path("sender")])
            XCTAssertEqual(code, 2, "\(arguments): \(said)")
        }
    }

    func testLookAlikeAndOtherCaseNamesOfAPinnedReceiverAreKeyChanged() throws {
        let lab = try PeerXferLab()
        let base = "Kitchen \(UUID().uuidString.prefix(4).lowercased())"
        let realKey = try key(lab, "real")
        XCTAssertEqual(try lab.run(["trust", "--pin", base, realKey, "--config", lab.path("sender")]).status, 0)
        try lab.makeFile("src/a.txt", size: 10)
        // Cyrillic і and full-width letters look like the pinned name.
        let lookAlike = base.replacingOccurrences(of: "i", with: "\u{0456}")
        let wide = "Ｋｉｔｃｈｅｎ" + base.dropFirst(7)
        for (index, variant) in [base.uppercased(), lookAlike, String(wide)].enumerated() {
            try lab.serve(name: variant, config: "squatter\(index)", inbox: lab.path("squatted\(index)"))
            let (status, output) = try lab.send(
                [lab.path("src/a.txt")], to: variant, config: "sender", trusting: ["--accept-new-key"])
            XCTAssertEqual(status, 6, "\(variant): \(output)")
            XCTAssertTrue(output.contains("KEY CHANGED"), "\(variant): \(output)")
            XCTAssertEqual(PeerXferLab.listing(lab.path("squatted\(index)")), [])
        }
        let (_, peers) = try lab.run(["peers", "--config", lab.path("sender"), "--timeout", "2"])
        XCTAssertTrue(peers.contains("KEY CHANGED (looks like"), peers)
    }

    /// The walk-through of docs/peerxfer.md ("Your first file"): two fresh configurations, one
    /// command on each side, two answers typed, and the file is there with the devices paired
    /// both ways (the sender pinned the receiver, the receiver trusts the sender). Prints how
    /// long it took, for the docs.
    func testFromTwoFreshDevicesToAFileReceivedAndPairedWithOneCommandEach() throws {
        let lab = try PeerXferLab()
        let started = Date()
        let kitchen = PeerXferLab.uniqueName("Kitchen")
        func onATerminal(_ arguments: [String]) throws -> Foreign {
            let command = ([PeerXferLab.binary] + arguments).map { "'\($0)'" }.joined(separator: " ")
            return try Foreign(["/usr/bin/script", "-qec", command, "/dev/null"])
        }
        // The receiver: one command.
        let receiver = try onATerminal([
            "serve", "--name", kitchen, "--accept", "ask", "--config", lab.path("kitchen"), "--inbox",
            lab.path("inbox"),
        ])
        defer { receiver.stop() }
        XCTAssertTrue(receiver.waitForOutput(containing: "serving", seconds: 20), receiver.output)
        try lab.makeFile("src/notes.txt", size: 300)
        // The sender: one command; it asks to trust the receiver, showing the code.
        let sender = try onATerminal([
            "send", lab.path("src/notes.txt"), "--to", kitchen, "--name", "Laptop", "--config", lab.path("laptop"),
        ])
        defer { sender.stop() }
        XCTAssertTrue(sender.waitForOutput(containing: "Trust this key and send? [y/N]", seconds: 20), sender.output)
        let code = VerificationCode.between(try key(lab, "laptop"), try key(lab, "kitchen"))
        XCTAssertTrue(sender.output.contains("verification code  \(code)"), sender.output)
        sender.write("y\n")
        // The receiver's question shows the same code and the sender's name; "a" accepts and
        // trusts the sender.
        XCTAssertTrue(receiver.waitForOutput(containing: "Accept? [y/N/a/p]", seconds: 20), receiver.output)
        XCTAssertTrue(receiver.output.contains("code \(code)"), receiver.output)
        XCTAssertTrue(receiver.output.contains("\"Laptop\""), receiver.output)
        receiver.write("a\n")
        XCTAssertTrue(sender.waitForExit(seconds: 30), sender.output)
        XCTAssertEqual(sender.process.terminationStatus, 0, sender.output)
        XCTAssertTrue(PeerXferLab.sameContents(lab.path("src/notes.txt"), lab.path("inbox/notes.txt")))
        print(
            "walk-through: first file received and paired after \(String(format: "%.1f", -started.timeIntervalSinceNow)) s"
        )

        // Paired both ways: the next send asks nothing on the sender, and the receiver knows
        // the sender by the name it was trusted under.
        let (listed, list) = try lab.run(["trust", "--list", "--config", lab.path("laptop")])
        XCTAssertEqual(listed, 0, list)
        XCTAssertTrue(list.contains(kitchen), list)
        let trusted = try KnownPeers.load(from: lab.path("kitchen/known-peers.json")).trusted
        XCTAssertNotNil(trusted[try key(lab, "laptop")], "\(trusted)")
        try lab.makeFile("src/more.txt", size: 30)
        let again = try onATerminal(["send", lab.path("src/more.txt"), "--to", kitchen, "--config", lab.path("laptop")])
        defer { again.stop() }
        XCTAssertTrue(receiver.waitForOutput(containing: "trusted sender \"Laptop\"", seconds: 20), receiver.output)
        XCTAssertTrue(
            eventually(timeout: 20) { receiver.output.components(separatedBy: "Accept? [y/N").count == 3 },
            receiver.output)
        receiver.write("y\n")
        XCTAssertTrue(again.waitForExit(seconds: 30), again.output)
        XCTAssertEqual(again.process.terminationStatus, 0, again.output)
        XCTAssertFalse(again.output.contains("Trust this key"), again.output)
        XCTAssertTrue(PeerXferLab.sameContents(lab.path("src/more.txt"), lab.path("inbox/more.txt")))
    }

    func testASendOnATerminalAsksWithTheCodeAndNoSendsNothing() throws {
        let lab = try PeerXferLab()
        let name = PeerXferLab.uniqueName("Asked")
        try lab.serve(name: name, config: "receiver", inbox: lab.path("inbox"))
        try lab.makeFile("src/a.txt", size: 10)
        let code = VerificationCode.between(try key(lab, "sender"), try key(lab, "receiver"))
        for (answer, sent) in [("n", false), ("y", true)] {
            let command = [
                PeerXferLab.binary, "send", lab.path("src/a.txt"), "--to", name, "--config", lab.path("sender"),
            ]
            .map { "'\($0)'" }.joined(separator: " ")
            let sender = try Foreign(["/usr/bin/script", "-qec", command, "/dev/null"])
            defer { sender.stop() }
            XCTAssertTrue(
                sender.waitForOutput(containing: "Trust this key and send? [y/N]", seconds: 20), sender.output)
            XCTAssertTrue(sender.output.contains("verification code  \(code)"), sender.output)
            sender.write("\(answer)\n")
            XCTAssertTrue(sender.waitForExit(seconds: 30), sender.output)
            XCTAssertEqual(FileManager.default.fileExists(atPath: lab.path("inbox/a.txt")), sent, sender.output)
        }
    }

    func testAQueuedSendThatMeetsAnImpostorPausesAndIsDeliveredToTheRealReceiverLater() throws {
        let lab = try PeerXferLab()
        let name = PeerXferLab.uniqueName("Paired")
        setenv("PEERXFER_RETRY_DELAY", "1", 1)
        defer { unsetenv("PEERXFER_RETRY_DELAY") }
        // Paired with the real receiver (not running yet); an impostor has its name.
        XCTAssertEqual(
            try lab.run(["trust", "--pin", name, try key(lab, "real"), "--config", lab.path("sender")]).status, 0)
        let impostor = try lab.serve(name: name, config: "impostor", inbox: lab.path("squatted"))
        let daemon = try lab.serve(name: PeerXferLab.uniqueName("Outbox"), config: "sender", inbox: lab.path("own"))
        try lab.makeFile("src/queued.bin", size: 5000)
        let (queued, output) = try lab.run([
            "send", lab.path("src/queued.bin"), "--to", name, "--config", lab.path("sender"), "--background",
        ])
        XCTAssertEqual(queued, 0, output)
        // Paused, and status says why; not given up.
        let paused = try lab.status(of: "sender", once: "KEY CHANGED")
        XCTAssertTrue(paused.contains("KEY CHANGED") && paused.contains("queued.bin"), paused)
        XCTAssertEqual(PeerXferLab.listing(lab.path("squatted")), [])
        // The impostor goes, the real receiver comes: delivered to it alone.
        impostor.stop()
        try lab.serve(name: name, config: "real", inbox: lab.path("inbox"))
        XCTAssertTrue(daemon.waitForOutput(containing: "delivered and verified", seconds: 60), daemon.output)
        XCTAssertTrue(PeerXferLab.sameContents(lab.path("src/queued.bin"), lab.path("inbox/queued.bin")))
        XCTAssertEqual(PeerXferLab.listing(lab.path("squatted")), [])
    }

    func testAPairedDeviceAnsweringANewNameIsNotSentToSilentlyAndAQueuedGrantIsNoForegroundOne() throws {
        let lab = try PeerXferLab()
        // Bob is paired; a copy of Bob's configuration serves as "Carol", a name never paired.
        let bob = PeerXferLab.uniqueName("Bob"), carol = PeerXferLab.uniqueName("Carol")
        XCTAssertEqual(
            try lab.run(["trust", "--pin", bob, try key(lab, "bob"), "--config", lab.path("sender")]).status, 0)
        try lab.serve(name: carol, config: "bob", inbox: lab.path("bob-inbox"))
        try lab.makeFile("src/for-carol.txt", size: 10)
        let (status, output) = try lab.send([lab.path("src/for-carol.txt")], to: carol, config: "sender", trusting: [])
        XCTAssertEqual(status, 6, output)
        XCTAssertTrue(output.contains("is paired here as \\\"\(bob)\\\""), output)
        XCTAssertEqual(PeerXferLab.listing(lab.path("bob-inbox")), [])
        XCTAssertNil(
            try KnownPeers.load(from: lab.path("sender/known-peers.json")).pins[carol], "the new name was not pinned")

        // A queued send's --accept-new-key grant is the daemon's only, and goes with a cancel.
        let nowhere = PeerXferLab.uniqueName("Nowhere")
        let (queued, queuedOutput) = try lab.run([
            "send", lab.path("src/for-carol.txt"), "--to", nowhere, "--config", lab.path("sender"),
            "--background", "--accept-new-key",
        ])
        XCTAssertEqual(queued, 0, queuedOutput)
        try lab.serve(name: nowhere, config: "attacker", inbox: lab.path("attacker-inbox"))
        let (foreground, foregroundOutput) = try lab.send(
            [lab.path("src/for-carol.txt")], to: nowhere, config: "sender", trusting: [])
        XCTAssertEqual(foreground, 6, foregroundOutput)
        XCTAssertEqual(try lab.run(["cancel", "--all", "--config", lab.path("sender")]).status, 0)
        XCTAssertNil(
            try KnownPeers.load(from: lab.path("sender/known-peers.json")).acceptingNewKey,
            "the grant went with the cancel")
        XCTAssertEqual(PeerXferLab.listing(lab.path("attacker-inbox")), [])
    }

    func testAnImpostorAdvertisingThePinnedKeyDoesNotHideTheRealReceiver() throws {
        // From the attack round: the search by key took the first receiver advertising the
        // key; an impostor sorting first (its TLS check fails) hid the real one.
        let lab = try PeerXferLab()
        let tag = UUID().uuidString.prefix(4)
        let realKey = try key(lab, "real")
        XCTAssertEqual(
            try lab.run(["trust", "--pin", "Victim \(tag)", realKey, "--config", lab.path("sender")]).status, 0)
        try lab.serve(name: "Real \(tag)", config: "real", inbox: lab.path("inbox"))
        let certificate = try TestCertificate.make()
        let netsvc = BuiltProduct.path("netsvc")
        let impostor = try Foreign([
            netsvc, "publish", "AAA \(tag)", "_peerxfer._tcp", "0", "v=2", "fp=\(realKey)", "--listen",
            "--tls-cert", certificate.certificateFile, "--tls-key", certificate.keyFile,
        ])
        defer { impostor.stop() }
        XCTAssertTrue(impostor.waitForOutput(containing: "published", seconds: 10), impostor.output)
        try lab.makeFile("src/a.txt", size: 10)
        let (status, output) = try lab.send(
            [lab.path("src/a.txt")], to: "Victim \(tag)", config: "sender", trusting: [])
        XCTAssertEqual(status, 0, output)
        XCTAssertTrue(PeerXferLab.sameContents(lab.path("src/a.txt"), lab.path("inbox/a.txt")))
    }

    func testTrustListsWhatIsPairedAndUntrustTakesAKeysStart() throws {
        let lab = try PeerXferLab()
        let a = String(repeating: "ab", count: 32), c = String(repeating: "cd", count: 32)
        _ = try lab.key(ofConfig: "c")
        let (empty, emptyOutput) = try lab.run(["trust", "--list", "--config", lab.path("c")])
        XCTAssertEqual(empty, 0, emptyOutput)
        XCTAssertTrue(emptyOutput.contains("nothing is paired or trusted here"), emptyOutput)
        XCTAssertEqual(try lab.run(["trust", "--pin", "Kitchen", a, "--config", lab.path("c")]).status, 0)
        XCTAssertEqual(try lab.run(["trust", c, "--config", lab.path("c")]).status, 0)
        let (_, listed) = try lab.run(["trust", "--list", "--config", lab.path("c")])
        XCTAssertTrue(listed.contains("receiver \"Kitchen\"  key \(a)") && listed.contains("sender key \(c)"), listed)
        // The start of a key (8 hex digits or more) names it, when it names one only; the key
        // goes under every name it has here, and each is said.
        XCTAssertEqual(try lab.run(["trust", "--pin", "Kitchen (old name)", a, "--config", lab.path("c")]).status, 0)
        let (forgot, forgotOutput) = try lab.run(["untrust", String(a.prefix(8)), "--config", lab.path("c")])
        XCTAssertEqual(forgot, 0, forgotOutput)
        XCTAssertTrue(
            forgotOutput.contains("forgot the receiver \"Kitchen\" [key \(a.prefix(16))…] (pinned)"), forgotOutput)
        XCTAssertTrue(
            forgotOutput.contains("forgot the receiver \"Kitchen (old name)\" [key \(a.prefix(16))…] (pinned)"),
            forgotOutput)
        let (_, after) = try lab.run(["trust", "--list", "--config", lab.path("c")])
        XCTAssertFalse(after.contains(a), after)
        XCTAssertTrue(after.contains(c), after)
        XCTAssertEqual(try lab.run(["trust", "--list", "x", "--config", lab.path("c")]).status, 2)
    }

    func testTrustByNameWithoutATerminalShowsTheKeyAndPinsNothing() throws {
        let lab = try PeerXferLab()
        let name = PeerXferLab.uniqueName("Shown")
        try lab.serve(name: name, config: "receiver", inbox: lab.path("inbox"))
        let (status, output) = try lab.run(["trust", name, "--config", lab.path("sender")])
        XCTAssertEqual(status, 6, output)
        XCTAssertTrue(output.contains("peerxfer trust --pin '\(name)' \(try key(lab, "receiver"))"), output)
        XCTAssertNil(try KnownPeers.load(from: lab.path("sender/known-peers.json")).pins[name])
    }
}

/// The known-peers book: by key, look-alikes, and no decision lost between processes.
final class KnownPeersTests: XCTestCase {
    private let a = String(repeating: "aa", count: 32), b = String(repeating: "bb", count: 32)

    func testVerdictsAreByKeyAndHoldLookAlikesToThePin() {
        var known = KnownPeers()
        known.pins["Kitchen"] = a
        known.trusted[b] = "laptop"
        XCTAssertEqual(known.verdict(forReceiver: "Kitchen", key: a), .pinned(as: "Kitchen"))
        XCTAssertEqual(known.verdict(forReceiver: "KITCHEN", key: b), .keyChanged(pinnedAs: "Kitchen", pinnedKey: a))
        XCTAssertEqual(
            known.verdict(forReceiver: "K\u{0456}tchen", key: b), .keyChanged(pinnedAs: "Kitchen", pinnedKey: a))
        XCTAssertEqual(known.verdict(forReceiver: "Ｋｉｔｃｈｅｎ", key: b), .keyChanged(pinnedAs: "Kitchen", pinnedKey: a))
        XCTAssertEqual(
            known.verdict(forReceiver: "Kit\u{200B}chen", key: b), .keyChanged(pinnedAs: "Kitchen", pinnedKey: a))
        // From the attack round: small capitals, Cherokee, a trailing (no-break) space, I for l.
        for lookAlike in [
            "\u{1D0B}itchen", "Kit\u{1D04}hen", "Kitchen ", "Kitchen\u{A0}", "KItchen", "K1tchen", "Kitchen  ",
        ] {
            XCTAssertEqual(
                known.verdict(forReceiver: lookAlike, key: b), .keyChanged(pinnedAs: "Kitchen", pinnedKey: a),
                lookAlike.debugDescription)
        }
        known.pins["Victor"] = a
        XCTAssertEqual(
            known.verdict(forReceiver: "\u{13D9}ictor", key: b), .keyChanged(pinnedAs: "Victor", pinnedKey: a))
        XCTAssertEqual(
            known.verdict(forReceiver: "\u{0475}ictor", key: b), .keyChanged(pinnedAs: "Victor", pinnedKey: a))
        XCTAssertEqual(known.verdict(forReceiver: "Kitchen #2", key: a), .renamed(pinnedAs: "Kitchen"))
        XCTAssertEqual(known.verdict(forReceiver: "Laptop", key: b), .trustedKey(label: "laptop"))
        XCTAssertEqual(known.verdict(forReceiver: "Office", key: b.uppercased()), .new)
        XCTAssertEqual(known.verdict(forReceiver: "Kitten", key: String(repeating: "cc", count: 32)), .new)
    }

    func testABadFileIsAnErrorAndIsNeverWrittenOver() throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("known-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let file = folder + "/known-peers.json"
        try Data("{\"pins\": {\"Kitchen\": ".utf8).write(to: URL(fileURLWithPath: file))
        let a = self.a
        XCTAssertThrowsError(try KnownPeers.update(at: file) { $0.pins["Office"] = a }) { error in
            XCTAssertTrue("\(error)".contains("not a valid known-peers file"), "\(error)")
        }
        XCTAssertEqual(try String(contentsOfFile: file, encoding: .utf8), "{\"pins\": {\"Kitchen\": ")
    }

    func testChangesAtOnceLoseNoDecision() throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("known-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let file = folder + "/known-peers.json"
        let (a, b) = (self.a, self.b)
        try KnownPeers.update(at: file) { $0.pins["Doomed"] = a }
        // Twenty first uses at once, and an untrust among them: each is kept.
        DispatchQueue.concurrentPerform(iterations: 21) { index in
            do {
                try KnownPeers.update(at: file) { known in
                    if index == 20 { known.pins["Doomed"] = nil } else { known.pins["Peer \(index)"] = b }
                }
            } catch {
                XCTFail("\(error)")
            }
        }
        let known = try KnownPeers.load(from: file)
        XCTAssertEqual(known.pins.count, 20, "\(known.pins.keys.sorted())")
        XCTAssertNil(known.pins["Doomed"])
    }

    func testVerificationCodesAgreeOnBothEndsAndKeysAreASCIIHex() throws {
        XCTAssertEqual(VerificationCode.between(a, b), VerificationCode.between(b, a.uppercased()))
        XCTAssertNotEqual(
            VerificationCode.between(a, b), VerificationCode.between(a, String(repeating: "cc", count: 32)))
        XCTAssertTrue(VerificationCode.between(a, b).wholeMatch(of: /[0-9]{5} [0-9]{5} [0-9]{5} [0-9]{5}/) != nil)
        XCTAssertEqual(try KeyText.prefix("AABB:ccdd:0011:2233", option: "--expect-key"), "aabbccdd00112233")
        XCTAssertThrowsError(try KeyText.prefix(String(repeating: "\u{FF11}", count: 64), option: "--expect-key"))
        XCTAssertThrowsError(try KeyText.prefix("abcd", option: "--expect-key"))
        XCTAssertNil(KeyText.whole(String(repeating: "\u{0661}", count: 64)))
        XCTAssertEqual(KeyText.whole(a.uppercased()), a)
    }
}
