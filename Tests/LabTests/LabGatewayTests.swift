import Foundation
import Salut
import SalutTestSupport
import XCTest

/// `netsvc gateway` in the routed lab: a service published by mDNS on subnet A (by a foreign
/// publisher, `avahi-publish`) is mirrored into BIND's `home.arpa` under `lab-a`, and found,
/// resolved and followed from subnet B, where mDNS does not reach.
final class LabGatewayTests: XCTestCase {
    static let netsvc = BuiltProduct.path("netsvc")

    override func setUpWithError() throws {
        guard ProcessInfo.processInfo.environment["SALUT_ROUTED_LAB"] == "1" else {
            throw XCTSkip(
                "routed-lab tests run from Scripts/test, which brings up the two-subnet lab (SALUT_ROUTED_LAB=1)")
        }
    }

    private let a1 = LabHost(name: "a1"), b1 = LabHost(name: "b1")

    private func gateway(label: String, type: String, json: Bool = true) throws -> Foreign {
        try a1.start(
            [
                Self.netsvc, "gateway", "--domain", "home.arpa", "--tsig-key", LabWideAreaTests.key, "--link-label",
                label, "--types", type, "--settle", "1",
            ] + (json ? ["--json"] : []))
    }

    /// python-zeroconf, a foreign mDNS stack (Tests/Foreign/zeroconf_peer.py), on a host.
    private static let zeroconf = LabHost.packageRoot.appendingPathComponent("Tests/Foreign/zeroconf_peer.py").path

    /// The lab's DNS server (BIND on the router), stopped and started again from its folder.
    private static func dnsServer(_ verb: String) throws -> String {
        let folder = URL(fileURLWithPath: LabWideAreaTests.key).deletingLastPathComponent().path
        return try LabHost(name: "r1").run(
            [LabHost.packageRoot.appendingPathComponent("Scripts/dns-server").path, verb, folder], timeout: 40)
    }

    /// B's unicast browse of `type` under `domain`, resolved, as JSON lines.
    private func browseFromB(_ type: String, in domain: String) throws -> String {
        try b1.run([
            Self.netsvc, "browse", type, "--domain", domain, "--dns-server", "198.18.2.1", "--resolve", "--terminate",
            "--json",
        ])
    }

    /// Asks B's browse again until `condition` holds (unicast DNS pushes nothing), `seconds` at
    /// most.
    private func browseFromB(
        _ type: String, in domain: String, seconds: TimeInterval = 20, until condition: (String) -> Bool
    ) throws -> String {
        var seen = ""
        try eventually(timeout: seconds, interval: 0) {
            seen = try browseFromB(type, in: domain)
            return condition(seen)
        }
        return seen
    }

    func testAForeignServiceOnAIsMirroredFollowedAndRemovedForB() throws {
        let type = "_gw\(UUID().uuidString.prefix(6).lowercased())._tcp"
        let label = "lab-a\(UUID().uuidString.prefix(4).lowercased())"
        let domain = "\(label).home.arpa"
        let printer = try a1.start(["avahi-publish", "-s", "Office Printer", type, "631", "rp=ipp", "note=first"])
        defer { printer.stop() }
        // A second publisher of another stack: python-zeroconf, on a host of its own.
        let scanner = try a1.start([Self.zeroconf, "publish", "198.18.1.10", "Hall Scanner", type, "9100", "ty=zc"])
        defer { scanner.stop() }
        XCTAssertTrue(scanner.waitForOutput(containing: "published", seconds: 20), scanner.output)
        let gateway = try gateway(label: label, type: type)
        defer { gateway.stop() }
        XCTAssertTrue(gateway.waitForOutput(containing: #""event":"mirrored""#, seconds: 30), gateway.output)

        // Found and resolved from B by unicast DNS, at A's routed address: both publishers'.
        let found = try browseFromB(type, in: domain) { $0.contains("Office Printer") && $0.contains("Hall Scanner") }
        XCTAssertTrue(found.contains(#""name":"Office Printer""#), found)
        XCTAssertTrue(found.contains("198.18.1.10"), "subnet A's address: \(found)")
        XCTAssertTrue(found.contains(#""rp":"ipp""#) && found.contains(#""note":"first""#), found)
        XCTAssertTrue(found.contains(#""name":"Hall Scanner""#) && found.contains(#""ty":"zc""#), found)
        let scannerHost = try b1.run(["dig", "+short", "@198.18.2.1", "zc-hall.\(domain)", "A"])
        XCTAssertEqual(scannerHost.trimmingCharacters(in: .whitespacesAndNewlines), "198.18.1.10", scannerHost)
        // The status line says what the zone holds now.
        XCTAssertTrue(
            gateway.waitForOutput(containing: #""mirrored":2,"retrying":false"#, seconds: 20), gateway.output)
        scanner.stop()
        XCTAssertTrue(scanner.waitForExit(seconds: 10), scanner.output)
        // The label is a browsing domain of the zone, for wide-area clients; dig sees the SRV.
        let browsing = try b1.run(["dig", "+short", "@198.18.2.1", "b._dns-sd._udp.home.arpa", "PTR"])
        XCTAssertTrue(browsing.contains("\(domain)."), browsing)
        let srv = try b1.run(["dig", "+short", "@198.18.2.1", "Office\\032Printer.\(type).\(domain)", "SRV"])
        XCTAssertTrue(srv.contains("631 salut-a1.\(domain)."), srv)
        // avahi-daemon's wide-area browse on B finds it too.
        let avahi = try b1.run(["avahi-browse", "-d", domain, "-r", "-t", "-p", type])
        XCTAssertTrue(avahi.contains("Office\\032Printer;\(type);\(domain);"), avahi)
        // mDNS itself did not cross: it is not on B's link.
        XCTAssertFalse(try b1.run([Self.netsvc, "browse", type, "--terminate"]).contains("Office Printer"))

        // The TXT record changes on A (published again with another note): it follows.
        printer.stop()
        XCTAssertTrue(printer.waitForExit(seconds: 10))
        let again = try a1.start(["avahi-publish", "-s", "Office Printer", type, "631", "rp=ipp", "note=second"])
        defer { again.stop() }
        let changed = try browseFromB(type, in: domain) { $0.contains(#""note":"second""#) }
        XCTAssertTrue(changed.contains(#""note":"second""#), "the change reached B: \(changed)")

        // Withdrawn on A (a goodbye): gone for B.
        again.stop()
        XCTAssertTrue(again.waitForExit(seconds: 10))
        let gone = try browseFromB(type, in: domain) { !$0.contains("Office Printer") }
        XCTAssertFalse(gone.contains("Office Printer"), gone)
        XCTAssertTrue(
            gateway.waitForOutput(containing: #""event":"removed","name":"Office Printer""#, seconds: 20),
            gateway.output)
    }

    /// The DNS server restarts while the gateway runs, and the link changes meanwhile: the
    /// updates it refuses are tried again (the JSON status says the zone is behind, and why),
    /// and once it answers the zone catches up: the new service in, the withdrawn one out,
    /// nothing written twice.
    func testAServerThatRestartsCatchesUpAndTheStatusSaysSo() throws {
        let type = "_gb\(UUID().uuidString.prefix(6).lowercased())._tcp"
        let label = "lab-r\(UUID().uuidString.prefix(4).lowercased())"
        let domain = "\(label).home.arpa"
        let early = try a1.start(["avahi-publish", "-s", "Early", type, "7001"])
        defer { early.stop() }
        let gateway = try gateway(label: label, type: type)
        defer { gateway.stop() }
        XCTAssertTrue(
            gateway.waitForOutput(containing: #""mirrored":1,"retrying":false"#, seconds: 30), gateway.output)

        _ = try Self.dnsServer("stop")
        var resumed = false
        defer { if !resumed { _ = try? Self.dnsServer("resume") } }
        let late = try a1.start(["avahi-publish", "-s", "Late", type, "7002"])
        defer { late.stop() }
        early.stop()
        XCTAssertTrue(early.waitForExit(seconds: 10))
        XCTAssertTrue(
            gateway.waitForOutput(containing: #""event":"retrying""#, seconds: 30), "no retry: \(gateway.output)")
        XCTAssertTrue(
            gateway.waitForOutput(containing: #""retrying":true"#, seconds: 10), "no status: \(gateway.output)")
        XCTAssertTrue(gateway.output.contains(#""lastError":"#), gateway.output)

        _ = try Self.dnsServer("resume")
        resumed = true
        let beforeResume = gateway.output.count
        // (The retries wait twice as long each time, a minute at most: within ~40 s here.)
        let caughtUp = try browseFromB(type, in: domain, seconds: 60) { $0.contains("Late") && !$0.contains("Early") }
        XCTAssertTrue(caughtUp.contains(#""name":"Late""#), "the zone did not catch up: \(caughtUp)")
        XCTAssertFalse(caughtUp.contains("Early"), caughtUp)
        let srv = try b1.run(["dig", "+short", "@198.18.2.1", "Late.\(type).\(domain)", "SRV"])
        XCTAssertEqual(srv.split(separator: "\n").count, 1, "written once: \(srv)")
        XCTAssertTrue(
            eventually(timeout: 20) {
                gateway.output.dropFirst(beforeResume).contains(#""mirrored":1,"retrying":false"#)
            }, "the status says it caught up, after the server came back: \(gateway.output)")
        // (The zone is left as it was found.)
        late.stop()
        XCTAssertTrue(
            gateway.waitForOutput(containing: #""event":"removed","name":"Late""#, seconds: 30), gateway.output)
    }

    /// A device on A announces 5,000 services at once (raw mDNS, Tests/Foreign/mdns_flood.py):
    /// the zone holds --max-services of them, the status counts those waiting (at most 4 × the
    /// limit are kept), and the
    /// gateway's memory stays under 150 MiB; their goodbyes empty the zone of them again.
    func testAFloodOfServicesFillsTheZoneToTheLimitInBoundedMemory() throws {
        let type = "_gx\(UUID().uuidString.prefix(6).lowercased())._tcp"
        let label = "lab-f\(UUID().uuidString.prefix(4).lowercased())"
        let domain = "\(label).home.arpa"
        let flood = LabHost.packageRoot.appendingPathComponent("Tests/Foreign/mdns_flood.py").path
        let gateway = try a1.start([
            Self.netsvc, "gateway", "--domain", "home.arpa", "--tsig-key", LabWideAreaTests.key, "--link-label", label,
            "--types", type, "--settle", "1", "--max-services", "50", "--json",
        ])
        defer { gateway.stop() }
        XCTAssertTrue(gateway.waitForOutput(containing: #""event":"started""#, seconds: 20), gateway.output)
        let sent = try a1.run([flood, "198.18.1.10", type, "5000"], timeout: 60)
        XCTAssertTrue(sent.contains("sent 625 packets"), sent)
        defer { _ = try? a1.run([flood, "198.18.1.10", type, "5000", "goodbye"], timeout: 60) }
        XCTAssertTrue(
            gateway.waitForOutput(containing: #""mirrored":50,"retrying":false"#, seconds: 90),
            String(gateway.output.suffix(2000)))
        let pointers = try b1.run(["dig", "+short", "@198.18.2.1", "\(type).\(domain)", "PTR"])
        XCTAssertEqual(pointers.split(separator: "\n").count, 50, "the limit, no more")
        XCTAssertTrue(
            gateway.waitForOutput(containing: #""waiting":200"#, seconds: 30),
            "the status counts 200 waiting (4 × --max-services, the most it keeps): \(gateway.output.suffix(2000))")
        let status = try String(contentsOfFile: "/proc/\(gateway.process.processIdentifier)/status", encoding: .utf8)
        let peak = status.split(separator: "\n").first { $0.hasPrefix("VmHWM:") }.flatMap {
            Int($0.split(separator: " ", omittingEmptySubsequences: true).dropFirst().first ?? "")
        }
        let kibibytes = try XCTUnwrap(peak, status)
        XCTAssertLessThan(kibibytes, 150 * 1024, "the gateway's peak memory, KiB")
        print("LabGatewayTests: the gateway's peak memory during a flood of 5,000 services: \(kibibytes / 1024) MiB")

        // They leave: the zone is as it was found. (The 625 goodbye packets go out twice, a
        // second apart, as a careful responder repeats them: once, on a loaded machine, a CI run
        // saw one service of the 50 stay in the zone for 60 s, as if avahi-daemon on a1 had lost
        // a goodbye packet and so kept the service in its cache; a lost goodbye is the ghost
        // case, which the gateway cannot tell from a live service.)
        for _ in 0..<2 {
            let left = try a1.run([flood, "198.18.1.10", type, "5000", "goodbye"], timeout: 60)
            XCTAssertTrue(left.contains("sent"), left)
            Thread.sleep(forTimeInterval: 1)
        }
        var remaining = pointers
        XCTAssertTrue(
            try eventually(timeout: 60, interval: 1) {
                remaining = try b1.run(["dig", "+short", "@198.18.2.1", "\(type).\(domain)", "PTR"])
                return remaining.trimmingCharacters(in: .whitespacesAndNewlines).isEmpty
            }, "still in the zone: \(remaining)")
    }

    /// Two gateways on one link under one label (for redundancy): the zone holds each record
    /// once; a change and a withdrawal reach it while either runs; SIGUSR1 has one say where it
    /// stands.
    func testTwoGatewaysOnOneLinkWriteEachRecordOnce() throws {
        let type = "_g2\(UUID().uuidString.prefix(6).lowercased())._tcp"
        let label = "lab-d\(UUID().uuidString.prefix(4).lowercased())"
        let domain = "\(label).home.arpa"
        let printer = try a1.start(["avahi-publish", "-s", "Twice", type, "7101", "note=one"])
        defer { printer.stop() }
        let first = try gateway(label: label, type: type)
        defer { first.stop() }
        let second = try gateway(label: label, type: type, json: false)
        defer { second.stop() }
        XCTAssertTrue(first.waitForOutput(containing: #""event":"mirrored""#, seconds: 30), first.output)
        XCTAssertTrue(second.waitForOutput(containing: "mirrored \"Twice\"", seconds: 30), second.output)
        let name = "Twice.\(type).\(domain)"
        for (record, expected) in [("SRV", "7101 salut-a1.\(domain)."), ("TXT", "\"note=one\"")] {
            let answer = try b1.run(["dig", "+short", "@198.18.2.1", name, record])
            XCTAssertEqual(answer.split(separator: "\n").count, 1, "\(record) once: \(answer)")
            XCTAssertTrue(answer.contains(expected), answer)
        }
        let pointers = try b1.run(["dig", "+short", "@198.18.2.1", "\(type).\(domain)", "PTR"])
        XCTAssertEqual(pointers.split(separator: "\n").count, 1, pointers)
        let address = try b1.run(["dig", "+short", "@198.18.2.1", "salut-a1.\(domain)", "A"])
        XCTAssertEqual(address.trimmingCharacters(in: .whitespacesAndNewlines), "198.18.1.10", address)

        // Asked, the text-mode one says where it stands.
        let statusLines = { second.output.split(separator: "\n").filter { $0.hasPrefix("status: ") } }
        XCTAssertEqual(kill(second.process.processIdentifier, SIGUSR1), 0)
        XCTAssertTrue(eventually(timeout: 10) { !statusLines().isEmpty }, second.output)
        XCTAssertTrue(
            statusLines().first?.contains("1 service of this link in \(domain)") == true, second.output)

        // One stops: a change made then reaches the zone through the other, once.
        first.stop()
        XCTAssertTrue(first.waitForExit(seconds: 10), first.output)
        printer.stop()
        XCTAssertTrue(printer.waitForExit(seconds: 10))
        let changed = try a1.start(["avahi-publish", "-s", "Twice", type, "7101", "note=two"])
        defer { changed.stop() }
        let seen = try browseFromB(type, in: domain) { $0.contains(#""note":"two""#) }
        XCTAssertTrue(seen.contains(#""note":"two""#), seen)
        let txt = try b1.run(["dig", "+short", "@198.18.2.1", name, "TXT"])
        XCTAssertEqual(txt.trimmingCharacters(in: .whitespacesAndNewlines), "\"note=two\"", txt)
        changed.stop()
        XCTAssertTrue(changed.waitForExit(seconds: 10))
        let gone = try browseFromB(type, in: domain) { !$0.contains("Twice") }
        XCTAssertFalse(gone.contains("Twice"), gone)
    }

    func testAfterKill9AndARestartTheZoneEqualsTheLink() throws {
        let type = "_gk\(UUID().uuidString.prefix(6).lowercased())._tcp"
        let label = "lab-k\(UUID().uuidString.prefix(4).lowercased())"
        let domain = "\(label).home.arpa"
        let stays = try a1.start(["avahi-publish", "-s", "Stays", type, "80"])
        defer { stays.stop() }
        let leaves = try a1.start(["avahi-publish", "-s", "Leaves", type, "81"])
        defer { leaves.stop() }
        let first = try gateway(label: label, type: type)
        defer { first.stop() }
        let both = try browseFromB(type, in: domain) { $0.contains("Stays") && $0.contains("Leaves") }
        XCTAssertTrue(both.contains("Stays") && both.contains("Leaves"), both)

        // The gateway dies without a word; a service leaves while it is down.
        XCTAssertEqual(kill(first.process.processIdentifier, SIGKILL), 0)
        XCTAssertTrue(first.waitForExit(seconds: 10))
        leaves.stop()
        XCTAssertTrue(leaves.waitForExit(seconds: 10))

        // Restarted: what left is removed once the link settled, what stays stays.
        let second = try gateway(label: label, type: type)
        defer { second.stop() }
        XCTAssertTrue(second.waitForOutput(containing: #""event":"listed","services":2"#, seconds: 20), second.output)
        let after = try browseFromB(type, in: domain) { !$0.contains("Leaves") }
        XCTAssertFalse(after.contains("Leaves"), "the orphan was removed: \(after)")
        XCTAssertTrue(after.contains("Stays"), after)
        // (The zone is left as it was found, for the other lab tests: the service leaves first.)
        stays.stop()
        XCTAssertTrue(
            eventually(timeout: 20) { second.output.components(separatedBy: #""event":"removed""#).count == 3 },
            second.output)
    }

    /// `publish --domain` with a name below the zone's apex (not a zone of its own): the zone is
    /// found by the SOA walk, and the service is written there.
    func testPublishingUnderANameBelowTheZoneFindsTheZone() throws {
        let type = "_gs\(UUID().uuidString.prefix(6).lowercased())._tcp"
        let domain = "lab-s\(UUID().uuidString.prefix(4).lowercased()).home.arpa"
        let publisher = try a1.start([
            Self.netsvc, "publish", "Below", type, "8080", "--domain", domain, "--tsig-key", LabWideAreaTests.key,
        ])
        defer { publisher.stop() }
        XCTAssertTrue(publisher.waitForOutput(containing: "published", seconds: 20), publisher.output)
        let found = try browseFromB(type, in: domain)
        XCTAssertTrue(found.contains(#""name":"Below""#) && found.contains("198.18.1.10"), found)
        // Withdrawn; the host's address (kept by a publisher that stops, as the host's) goes
        // too, so that the other lab tests find the zone as it was.
        publisher.stop()
        XCTAssertTrue(publisher.waitForExit(seconds: 15))
        let host = try a1.run(["hostname", "-s"]).trimmingCharacters(in: .whitespacesAndNewlines)
        let cleaned = try a1.run([
            "/bin/sh", "-c",
            "printf 'server 198.18.1.1\\nupdate delete \(host).\(domain) A\\nsend\\n' | nsupdate -k '\(LabWideAreaTests.key)'",
        ])
        XCTAssertFalse(cleaned.contains("failed"), cleaned)
    }

    /// Watching every type, at most `--max-types` at a time: a type that leaves the link frees
    /// its place, and a type that waited for one is mirrored then (the places were never given
    /// back: one burst of types blinded a gateway to new types until it restarted).
    func testATypeThatLeavesTheLinkFreesItsPlaceForOneThatWaited() throws {
        let tag = UUID().uuidString.prefix(6).lowercased()
        let (first, second) = ("_gf\(tag)._tcp", "_gs\(tag)._tcp")
        let label = "lab-t\(tag.prefix(4))"
        let early = try a1.start(["avahi-publish", "-s", "Early", first, "4001"])
        defer { early.stop() }
        let gateway = try a1.start([
            Self.netsvc, "gateway", "--domain", "home.arpa", "--tsig-key", LabWideAreaTests.key, "--link-label", label,
            "--max-types", "1", "--settle", "1", "--json",
        ])
        defer { gateway.stop() }
        XCTAssertTrue(
            gateway.waitForOutput(containing: #""event":"mirrored","name":"Early","type":"\#(first)""#, seconds: 30),
            gateway.output)
        let late = try a1.start(["avahi-publish", "-s", "Late", second, "4002"])
        defer { late.stop() }
        XCTAssertTrue(gateway.waitForOutput(containing: "wait until types leave the link", seconds: 30), gateway.output)
        early.stop()
        XCTAssertTrue(
            gateway.waitForOutput(containing: #""event":"mirrored","name":"Late","type":"\#(second)""#, seconds: 30),
            gateway.output)
        let listed = try b1.run(["dig", "+short", "@198.18.2.1", "_services._dns-sd._udp.\(label).home.arpa", "PTR"])
        XCTAssertTrue(listed.contains(second), listed)
        // The zone is left as it was found: the later tests read it whole.
        late.stop()
        XCTAssertTrue(
            gateway.waitForOutput(containing: #""event":"removed","name":"Late""#, seconds: 30), gateway.output)
    }

    func testBadInputIsOneLineAndWritesNothing() throws {
        // A label that is no DNS label, a type that is no type: usage errors before anything.
        for (arguments, words) in [
            (["--link-label", "lab.a"], "is not a DNS label"), (["--types", "ipp"], "is not a service type"),
        ] {
            let job = try a1.start(
                [Self.netsvc, "gateway", "--domain", "home.arpa", "--tsig-key", LabWideAreaTests.key] + arguments)
            XCTAssertTrue(job.waitForExit(seconds: 20), job.output)
            XCTAssertEqual(job.process.terminationStatus, 2, job.output)
            XCTAssertTrue(job.output.contains(words), job.output)
        }
        // A key the server refuses: exit 1, naming it.
        let wrong = NSTemporaryDirectory() + "salut-gw-wrong-\(UUID().uuidString.prefix(6)).key"
        try #"key "salut-publisher" { algorithm hmac-sha256; secret "d3Jvbmcgc2VjcmV0"; };"#.write(
            toFile: wrong, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(atPath: wrong) }
        let refused = try a1.start([
            Self.netsvc, "gateway", "--domain", "home.arpa", "--tsig-key", wrong, "--link-label", "refused",
            "--types", "_gwrefused._tcp", "--settle", "0.5",
        ])
        XCTAssertTrue(refused.waitForExit(seconds: 30), refused.output)
        XCTAssertEqual(refused.process.terminationStatus, 1, refused.output)
        XCTAssertTrue(refused.output.contains("BADSIG"), refused.output)
        let written = try b1.run(["dig", "+short", "@198.18.2.1", "b._dns-sd._udp.home.arpa", "PTR"])
        XCTAssertFalse(written.contains("refused.home.arpa"), written)
        // A zone the server does not hold: exit 1, saying so (not blaming the key).
        let elsewhere = try a1.start([
            Self.netsvc, "gateway", "--domain", "no-such-zone.example", "--tsig-key", LabWideAreaTests.key,
            "--link-label", "elsewhere", "--types", "_gwrefused._tcp",
        ])
        XCTAssertTrue(elsewhere.waitForExit(seconds: 30), elsewhere.output)
        XCTAssertEqual(elsewhere.process.terminationStatus, 1, elsewhere.output)
        XCTAssertTrue(elsewhere.output.contains("holds no zone for that name"), elsewhere.output)
        XCTAssertTrue(
            elsewhere.output.split(separator: "\n").contains {
                $0.hasPrefix("netsvc: ") && $0.contains("no-such-zone")
            },
            "one line says it all: \(elsewhere.output)")
    }

    /// `--announce-remote` on B: A's service, mirrored into the zone by A's gateway, is announced
    /// on B's link by mDNS, so that a client that speaks only mDNS (avahi-browse without `-d`)
    /// finds it, at A's routed address, and connects to it; B's gateway does not write it back
    /// under its own label; withdrawn on A, it is gone from B's link.
    func testAnotherLinksServiceIsAnnouncedOnBByMDNSAndReachable() throws {
        let type = "_ga\(UUID().uuidString.prefix(6).lowercased())._tcp"
        let suffix = UUID().uuidString.prefix(4).lowercased()
        let (labelA, labelB) = ("lab-a\(suffix)", "lab-b\(suffix)")
        let port = Int.random(in: 20_000...29_999)
        let server = try a1.start(["python3", "-m", "http.server", "\(port)", "--bind", "198.18.1.10"])
        defer { server.stop() }
        let printer = try a1.start(["avahi-publish", "-s", "Far Printer", type, "\(port)", "note=first"])
        defer { printer.stop() }
        let gatewayA = try gateway(label: labelA, type: type)
        defer { gatewayA.stop() }
        XCTAssertTrue(gatewayA.waitForOutput(containing: #""event":"mirrored""#, seconds: 30), gatewayA.output)
        let gatewayB = try b1.start([
            Self.netsvc, "gateway", "--domain", "home.arpa", "--tsig-key", LabWideAreaTests.key, "--link-label", labelB,
            "--types", type, "--settle", "1", "--json", "--announce-remote",
        ])
        defer { gatewayB.stop() }
        XCTAssertTrue(
            gatewayB.waitForOutput(containing: #""event":"announced","from":"\#(labelA)""#, seconds: 30),
            gatewayB.output)
        XCTAssertTrue(
            gatewayB.waitForOutput(containing: #""announced":{"\#(labelA)":1}"#, seconds: 10),
            "B's status counts what it announces from A: \(gatewayB.output)")

        // Plain mDNS on B finds it, on A's host under the label, at A's routed address.
        var line: String?
        try eventually(timeout: 20, interval: 0) {
            line = try b1.run(["avahi-browse", "-rpt", type]).split(separator: "\n").map(String.init).first {
                $0.hasPrefix("=;") && $0.contains("Far\\032Printer") && $0.contains(";198.18.1.10;")
            }
            return line != nil
        }
        let fields = try XCTUnwrap(line, "B's mDNS never showed A's service").split(
            separator: ";", omittingEmptySubsequences: false)
        XCTAssertEqual(fields[6], Substring("salut-a1.\(labelA).local"))
        XCTAssertEqual(fields[8], Substring("\(port)"))
        XCTAssertEqual(fields[9], "\"note=first\"")
        // A client on B connects to it where mDNS said.
        let status = try b1.run([
            "python3", "-c",
            "import urllib.request; print(urllib.request.urlopen('http://\(fields[7]):\(fields[8])/', timeout=10).status)",
        ])
        XCTAssertEqual(status.trimmingCharacters(in: .whitespacesAndNewlines), "200", status)
        // Another stack's browser on B (python-zeroconf) finds and resolves it the same.
        let foreign = try b1.run([Self.zeroconf, "browse", "198.18.2.10", type, "6"], timeout: 30)
        XCTAssertTrue(
            foreign.contains("found;Far Printer;salut-a1.\(labelA).local.;198.18.1.10;\(port);note=first"), foreign)
        // No echo: B's gateway, which mirrors this type on its link, did not write it under its
        // own label.
        XCTAssertFalse(gatewayB.output.contains(#""event":"mirrored""#), gatewayB.output)
        let echoed = try b1.run(["dig", "+short", "@198.18.2.1", "_services._dns-sd._udp.\(labelB).home.arpa", "PTR"])
        XCTAssertEqual(echoed.trimmingCharacters(in: .whitespacesAndNewlines), "", echoed)

        // Withdrawn on A: A's gateway removes it from the zone, B's withdraws it from B's link.
        printer.stop()
        XCTAssertTrue(printer.waitForExit(seconds: 10))
        XCTAssertTrue(
            gatewayB.waitForOutput(containing: #""event":"unannounced""#, seconds: 30), gatewayB.output)
        var after = ""
        let goneBy = Date().addingTimeInterval(10)
        repeat {
            after = try b1.run(["avahi-browse", "-pt", type])
        } while after.contains("Far\\032Printer")
            && Date() < goneBy
        XCTAssertFalse(after.contains("Far\\032Printer"), "still on B's link: \(after)")
    }

    /// `--announce-remote` on B announces one host's services that come in one read of the zone
    /// in one avahi entry group: all listed on B's link; one that leaves A takes the group down,
    /// and the others are announced again (still listed, still resolving), the one gone stays
    /// gone; once another leaves too, B's gateway mirrors a service of B's own under its name.
    func testOneHostsServicesAnnouncedTogetherStayWhenOneOfThemLeaves() throws {
        let type = "_gg\(UUID().uuidString.prefix(6).lowercased())._tcp"
        let suffix = UUID().uuidString.prefix(4).lowercased()
        let (labelA, labelB) = ("lab-a\(suffix)", "lab-b\(suffix)")
        let names = ["Shelf One", "Shelf Two", "Shelf Three"]
        var publishers: [Foreign] = []
        for (index, name) in names.enumerated() {
            publishers.append(try a1.start(["avahi-publish", "-s", name, type, "\(7201 + index)"]))
        }
        defer { publishers.forEach { $0.stop() } }
        let gatewayA = try gateway(label: labelA, type: type)
        defer { gatewayA.stop() }
        XCTAssertTrue(
            eventually(timeout: 30, interval: 0.2) {
                gatewayA.output.components(separatedBy: #""event":"mirrored""#).count - 1 == names.count
            }, gatewayA.output)
        let gatewayB = try b1.start([
            Self.netsvc, "gateway", "--domain", "home.arpa", "--tsig-key", LabWideAreaTests.key, "--link-label", labelB,
            "--types", type, "--settle", "1", "--json", "--announce-remote",
        ])
        defer { gatewayB.stop() }
        XCTAssertTrue(
            gatewayB.waitForOutput(containing: #""announced":{"\#(labelA)":3}"#, seconds: 30), gatewayB.output)
        func listed() throws -> Set<String> {
            Set(
                try b1.run(["avahi-browse", "-rpt", type]).split(separator: "\n").compactMap { line in
                    let fields = line.split(separator: ";", omittingEmptySubsequences: false)
                    return line.hasPrefix("=;") && fields.count > 8 ? String(fields[3]) : nil
                })
        }
        /// Waits until B's link lists and resolves exactly `expected` (20 s at most).
        func waitUntilListed(_ expected: Set<String>, _ what: String) throws {
            var now: Set<String> = []
            XCTAssertTrue(
                try eventually(timeout: 20, interval: 0.2) {
                    now = try listed()
                    return now == expected
                }, "\(what): \(now)")
        }
        let escaped = names.map { $0.replacingOccurrences(of: " ", with: "\\032") }
        try waitUntilListed(Set(escaped), "all three resolved on B")

        // The second leaves A: the other two stay on B (announced again), it does not.
        publishers[1].stop()
        XCTAssertTrue(
            gatewayB.waitForOutput(
                containing: #""event":"unannounced","from":"\#(labelA)","name":"Shelf Two""#, seconds: 30),
            gatewayB.output)
        XCTAssertTrue(
            gatewayB.waitForOutput(containing: #""announced":{"\#(labelA)":2}"#, seconds: 30), gatewayB.output)
        try waitUntilListed([escaped[0], escaped[2]], "the first and third resolved on B, the second gone")

        // The first leaves A too; a service of B's own link under its name is then B's to
        // mirror (the gateway no longer counts the name as one it announces).
        publishers[0].stop()
        XCTAssertTrue(
            gatewayB.waitForOutput(
                containing: #""event":"unannounced","from":"\#(labelA)","name":"Shelf One""#, seconds: 30),
            gatewayB.output)
        // (Once B's browsers saw it go: a name that never left the link's browse is not seen anew.)
        XCTAssertTrue(
            try eventually(timeout: 20, interval: 0.2) {
                !(try b1.run(["avahi-browse", "-pt", type]).contains(escaped[0]))
            }, "the first gone from B")
        let local = try b1.start(["avahi-publish", "-s", "Shelf One", type, "7299"])
        defer { local.stop() }
        XCTAssertTrue(
            gatewayB.waitForOutput(
                containing: #""event":"mirrored","name":"Shelf One","type":"\#(type)""#, seconds: 30),
            gatewayB.output)
        // The zone is left as it was found: the later tests read it whole.
        local.stop()
        publishers[2].stop()
        XCTAssertTrue(
            gatewayB.waitForOutput(containing: #""event":"removed","name":"Shelf One""#, seconds: 30), gatewayB.output)
        XCTAssertTrue(
            gatewayA.waitForOutput(containing: #""event":"removed","name":"Shelf Three""#, seconds: 30),
            gatewayA.output)
    }
}
