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

    private func gateway(label: String, type: String) throws -> Foreign {
        try a1.start([
            Self.netsvc, "gateway", "--domain", "home.arpa", "--tsig-key", LabWideAreaTests.key, "--link-label", label,
            "--types", type, "--settle", "1", "--json",
        ])
    }

    /// B's unicast browse of `type` under `domain`, resolved, as JSON lines.
    private func browseFromB(_ type: String, in domain: String) throws -> String {
        try b1.run([
            Self.netsvc, "browse", type, "--domain", domain, "--dns-server", "198.18.2.1", "--resolve", "--terminate",
            "--json",
        ])
    }

    /// Asks B's browse again until `condition` holds (unicast DNS pushes nothing), 20 s at most.
    private func browseFromB(
        _ type: String, in domain: String, until condition: (String) -> Bool
    ) throws -> String {
        var seen = ""
        let deadline = Date().addingTimeInterval(20)
        repeat { seen = try browseFromB(type, in: domain) } while !condition(seen) && Date() < deadline
        return seen
    }

    func testAForeignServiceOnAIsMirroredFollowedAndRemovedForB() throws {
        let type = "_gw\(UUID().uuidString.prefix(6).lowercased())._tcp"
        let label = "lab-a\(UUID().uuidString.prefix(4).lowercased())"
        let domain = "\(label).home.arpa"
        let printer = try a1.start(["avahi-publish", "-s", "Office Printer", type, "631", "rp=ipp", "note=first"])
        defer { printer.stop() }
        let gateway = try gateway(label: label, type: type)
        defer { gateway.stop() }
        XCTAssertTrue(gateway.waitForOutput(containing: #""event":"mirrored""#, seconds: 30), gateway.output)

        // Found and resolved from B by unicast DNS, at A's routed address.
        let found = try browseFromB(type, in: domain)
        XCTAssertTrue(found.contains(#""name":"Office Printer""#), found)
        XCTAssertTrue(found.contains("198.18.1.10"), "subnet A's address: \(found)")
        XCTAssertTrue(found.contains(#""rp":"ipp""#) && found.contains(#""note":"first""#), found)
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
        XCTAssertTrue(gateway.waitForOutput(containing: #""event":"removed""#, seconds: 20), gateway.output)
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

        // Plain mDNS on B finds it, on A's host under the label, at A's routed address.
        var line: String?
        let deadline = Date().addingTimeInterval(20)
        repeat {
            line = try b1.run(["avahi-browse", "-rpt", type]).split(separator: "\n").map(String.init).first {
                $0.hasPrefix("=;") && $0.contains("Far\\032Printer") && $0.contains(";198.18.1.10;")
            }
        } while line == nil && Date() < deadline
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
}
