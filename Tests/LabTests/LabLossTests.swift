import Foundation
import SalutTestSupport
import XCTest

/// Loss and attack in the lab (`Scripts/lan-lab loss HOST PERCENT`: nftables drops that share
/// of a host's packets each way at random; this kernel has no netem).
final class LabLossTests: XCTestCase {
    static var netsvc: String { BuiltProduct.path("netsvc") }
    static var peerxfer: String { BuiltProduct.path("peerxfer") }

    private func setLoss(_ host: LabHost, _ percent: Int) throws {
        let script = LabHost.packageRoot.appendingPathComponent("Scripts/lan-lab").path
        let job = try Foreign([script, "loss", host.name, String(percent)])
        XCTAssertTrue(job.waitForExit(seconds: 10), job.output)
        XCTAssertEqual(job.process.terminationStatus, 0, job.output)
    }

    private func events(_ text: String) -> [[String: Any]] {
        text.split(separator: "\n").compactMap {
            try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any]
        }
    }

    /// Ten services whose goodbyes are all lost (their host's multicast dropped while they are
    /// withdrawn) stay in the other host's avahi-daemon cache; `browse --verify` there lists each as removed
    /// within 15 s, both hosts still losing 10 % each way, and keeps the one that stays.
    func testWithdrawnServicesWhoseGoodbyesAreLostLeaveBrowseVerifyWithinFifteenSeconds() throws {
        try LabHost.requireLab()
        let h1 = LabHost(name: "h1"), h2 = LabHost(name: "h2")
        defer {
            try? setLoss(h1, 0)
            try? setLoss(h2, 0)
        }
        let type = "_loss\(String(UInt32.random(in: 0..<UInt32.max), radix: 36))._tcp"
        let stays = try h1.start([Self.netsvc, "publish", "Stays", type, "7000"])
        defer { stays.stop() }
        var leaving: [Foreign] = []
        defer { leaving.forEach { $0.stop() } }
        for index in 0..<10 {
            leaving.append(try h1.start(["avahi-publish", "-s", "Leaves \(index)", type, String(7001 + index)]))
        }
        XCTAssertTrue(stays.waitForOutput(containing: "published", seconds: 15), stays.output)
        for publisher in leaving {
            XCTAssertTrue(publisher.waitForOutput(containing: "Established", seconds: 15), publisher.output)
        }
        // Both hosts lose 10 % each way: h2's own queries are refused on the way out (EPERM) one
        // time in ten, which must count as a lost attempt, not as an error or as silence.
        try setLoss(h1, 10)
        try setLoss(h2, 10)
        // A 4 s period: the bound is then about 10 s (4 + two 3 s checks), with room under 15 s
        // on a loaded machine (the default 6 s made it 11.9 s of a 12 s bound).
        let watch = try h2.start([Self.netsvc, "browse", type, "--verify", "--verify-every", "4", "--json"])
        defer { watch.stop() }
        let listed = eventually(timeout: 40) {
            self.events(watch.output).filter { $0["event"] as? String == "add" }.count >= 11
        }
        XCTAssertTrue(listed, "all 11 listed and answering: \(watch.output)")

        // Every goodbye lost: h1's multicast mDNS (to port 5353: announcements and goodbyes) is
        // dropped from here on, while its unicast answers to direct queries still leave.
        let mute = try h1.run([
            "nft",
            "add table inet salutmute ; add chain inet salutmute out { type filter hook output priority 0 ; } ;"
                + " add rule inet salutmute out oifname lab0 udp dport 5353 drop",
        ])
        defer { _ = try? h1.run(["nft", "delete table inet salutmute"]) }
        XCTAssertEqual(mute, "")
        leaving.forEach { $0.stop() }
        let withdrawn = Date()
        let gone = eventually(timeout: 15) {
            Set(
                self.events(watch.output).filter { $0["event"] as? String == "remove" }.compactMap {
                    $0["name"] as? String
                }
            )
            .isSuperset(of: (0..<10).map { "Leaves \($0)" })
        }
        let took = Date().timeIntervalSince(withdrawn)
        XCTAssertTrue(gone, "every withdrawn service reported removed within 15 s: \(watch.output)")
        print("lab loss: 10 withdrawn services reported gone by browse --verify in \(String(format: "%.1f", took)) s")
        for removal in events(watch.output)
        where removal["event"] as? String == "remove" && (removal["name"] as? String)?.hasPrefix("Leaves") == true {
            XCTAssertEqual(removal["reason"] as? String, "not-answering", "\(removal)")
        }
        let cache = try h2.run(["avahi-browse", "-pt", type])
        XCTAssertTrue(cache.contains("Leaves"), "the goodbyes were lost: h2's daemon still lists them: \(cache)")
        let last = events(watch.output).last { $0["name"] as? String == "Stays" }
        XCTAssertEqual(last?["event"] as? String, "add", "the service that stays is listed: \(watch.output)")
    }

    /// A send across a link losing 5 % each way completes byte-exact while one address holds 500
    /// idle TCP connections and 50 TLS ClientHellos that never go on (opening each again when
    /// it is cut) and opens and closes others as fast as it can; after it, the receiver is back
    /// to its descriptors and threads (`Scripts/lab-flood`).
    func testASendUnderLossAndAnIdleAndSilentFloodArrivesWholeAndTheReceiverRecovers() throws {
        try LabHost.requireLab()
        let h1 = LabHost(name: "h1"), h2 = LabHost(name: "h2")
        defer { try? setLoss(h1, 0) }
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent(
            "lab-loss-\(UUID().uuidString.prefix(8))"
        ).path
        defer { try? FileManager.default.removeItem(atPath: folder) }
        try FileManager.default.createDirectory(atPath: folder + "/outbox", withIntermediateDirectories: true)
        var payload = Data(count: 8 << 20)
        payload.withUnsafeMutableBytes { raw in
            for i in 0..<raw.count { raw[i] = UInt8(truncatingIfNeeded: i &* 131 &+ i >> 11) }
        }
        try payload.write(to: URL(fileURLWithPath: folder + "/outbox/payload.bin"))
        try Data(payload.reversed()).write(to: URL(fileURLWithPath: folder + "/outbox/quiet.bin"))
        let name = "Loss Inbox \(UInt16.random(in: 0...UInt16.max))"
        let receiver = try h1.start([
            Self.peerxfer, "serve", "--name", name, "--inbox", folder + "/inbox", "--config", folder + "/h1",
            "--accept", "all",
        ])
        defer { receiver.stop() }
        XCTAssertTrue(receiver.waitForOutput(containing: "serving", seconds: 20), receiver.output)
        let port = receiver.output.components(separatedBy: "on port ").last.flatMap { Int($0.prefix { $0.isNumber }) }
        let pid = receiver.process.processIdentifier
        XCTAssertEqual(
            (try? String(contentsOfFile: "/proc/\(pid)/comm", encoding: .utf8))?.trimmingCharacters(
                in: .whitespacesAndNewlines),
            "peerxfer", "the lab's exec chain ends in the receiver itself")
        let key = try h1.peerxferKey(Self.peerxfer, config: folder + "/h1")

        // The attacker has an address of its own on h2 (a second host, as far as the receiver
        // can tell); the good sender uses h2's first.
        _ = try h2.run(["ip", "addr", "replace", "198.18.0.102/24", "dev", "lab0"])
        defer { _ = try? h2.run(["ip", "addr", "del", "198.18.0.102/24", "dev", "lab0"]) }
        // Unattacked first, for the figure printed below.
        let quiet = try h2.run(
            [
                Self.peerxfer, "send", folder + "/outbox/quiet.bin", "--to", name, "--config", folder + "/h2",
                "--json", "--wait", "20", "--expect-key", key,
            ], timeout: 120)
        XCTAssertTrue(quiet.contains("\"verified\":1"), quiet)
        // The receiver's figures once it has served a transfer (its buffers and threads exist).
        let before = (descriptors: Self.count("/proc/\(pid)/fd"), threads: Self.count("/proc/\(pid)/task"))
        try setLoss(h1, 5)
        let attack = try h2.start([
            LabHost.packageRoot.appendingPathComponent("Scripts/lab-flood").path, "198.18.0.1", String(port ?? 0),
            "--idle", "500", "--hellos", "50", "--churn", "--seconds", "90", "--source", "198.18.0.102",
        ])
        defer { attack.stop() }
        XCTAssertTrue(attack.waitForOutput(containing: "holding", seconds: 30), attack.output)
        let sent = try h2.run(
            [
                Self.peerxfer, "send", folder + "/outbox/payload.bin", "--to", name, "--config", folder + "/h2",
                "--json", "--wait", "20", "--expect-key", key,
            ], timeout: 120)
        let done = sent.split(separator: "\n").last { $0.contains("\"event\":\"done\"") }.map(String.init) ?? ""
        XCTAssertTrue(done.contains("\"verified\":1") && done.contains("\"failed\":0"), sent)
        XCTAssertEqual(FileManager.default.contents(atPath: folder + "/inbox/payload.bin"), payload)
        let quietDone = quiet.split(separator: "\n").last { $0.contains("\"event\":\"done\"") } ?? ""
        print("lab loss: 8 MiB with no loss and no flood: \(quietDone)")
        print("lab loss: 8 MiB under 5 % loss and the flood: \(done)")

        attack.stop()
        XCTAssertTrue(attack.waitForOutput(containing: "churned", seconds: 10), attack.output)
        let counts = attack.output.split(separator: "\n").last { $0.hasPrefix("held") }.map(String.init) ?? ""
        print("lab loss: the flood: \(counts)")
        // (The churn thread's count is printed, not asserted: under the 5 % loss each of its
        // connects can time out for the few seconds a send takes, so it may read 0 though the
        // held connections and stalled hellos, checked above, were there all along.)
        try setLoss(h1, 0)
        // Every attacking connection is cut or closed; the receiver is back where it was.
        let recovered = eventually(timeout: 30) {
            Self.count("/proc/\(pid)/fd") <= before.descriptors + max(2, before.descriptors / 20)
                && Self.count("/proc/\(pid)/task") <= before.threads + max(2, before.threads / 20)
        }
        XCTAssertTrue(
            recovered,
            "descriptors \(before.descriptors) → \(Self.count("/proc/\(pid)/fd")), threads \(before.threads) → \(Self.count("/proc/\(pid)/task"))"
        )
    }

    /// A send whose receiver's link goes down for 3 s in the middle, on a link losing 10 % each
    /// way, ends with the file byte-exact at the receiver: the connection rides out the flap,
    /// or the send fails and the same command run again resumes from what had arrived.
    func testASendThroughALinkFlapArrivesWholeResumingIfItWasCut() throws {
        try LabHost.requireLab()
        let h1 = LabHost(name: "h1"), h2 = LabHost(name: "h2")
        defer {
            _ = try? h1.run(["ip", "link", "set", "lab0", "up"])
            try? setLoss(h1, 0)
        }
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent(
            "lab-flap-\(UUID().uuidString.prefix(8))"
        ).path
        defer { try? FileManager.default.removeItem(atPath: folder) }
        try FileManager.default.createDirectory(atPath: folder + "/outbox", withIntermediateDirectories: true)
        var payload = Data(count: 128 << 20)
        payload.withUnsafeMutableBytes { raw in
            for i in stride(from: 0, to: raw.count, by: 8) {
                raw.storeBytes(of: UInt64(i) &* 0x9E37_79B9_7F4A_7C15, toByteOffset: i, as: UInt64.self)
            }
        }
        try payload.write(to: URL(fileURLWithPath: folder + "/outbox/flap.bin"))
        let name = "Flap Inbox \(UInt16.random(in: 0...UInt16.max))"
        let receiver = try h1.start([
            Self.peerxfer, "serve", "--name", name, "--inbox", folder + "/inbox", "--config", folder + "/h1",
            "--accept", "all",
        ])
        defer { receiver.stop() }
        XCTAssertTrue(receiver.waitForOutput(containing: "serving", seconds: 20), receiver.output)
        let key = try h1.peerxferKey(Self.peerxfer, config: folder + "/h1")
        try setLoss(h1, 10)
        let command = [
            Self.peerxfer, "send", folder + "/outbox/flap.bin", "--to", name, "--config", folder + "/h2", "--json",
            "--wait", "30", "--expect-key", key,
        ]
        let send = try h2.start(command)
        defer { send.stop() }
        XCTAssertTrue(send.waitForOutput(containing: "\"event\":\"progress\"", seconds: 60), send.output)
        _ = try h1.run(["ip", "link", "set", "lab0", "down"])
        Thread.sleep(forTimeInterval: 3)  // the flap itself: how long the link stays down
        _ = try h1.run(["ip", "link", "set", "lab0", "up"])
        XCTAssertTrue(send.waitForExit(seconds: 180), "the send ended: \(send.output)")
        var outputs = [send.output]
        if send.process.terminationStatus != 0 {
            // Cut by the flap: the same command again sends only what is missing.
            outputs.append(try h2.run(command, timeout: 180))
        }
        let done =
            outputs.last?.split(separator: "\n").last { $0.contains("\"event\":\"done\"") }.map(String.init) ?? ""
        XCTAssertTrue(
            done.contains("\"verified\":1") && done.contains("\"failed\":0"), outputs.joined(separator: "\n---\n"))
        XCTAssertTrue(FileManager.default.contents(atPath: folder + "/inbox/flap.bin") == payload, "byte-exact")
        print("lab flap: \(outputs.count == 1 ? "rode out the flap" : "cut, then resumed"): \(done)")
    }

    private static func count(_ folder: String) -> Int {
        (try? FileManager.default.contentsOfDirectory(atPath: folder).count) ?? -1
    }
}
