import Foundation
import SalutTestSupport
import XCTest

/// Discovery beyond one link: two subnets joined by a router that forwards no multicast
/// (`Scripts/lan-lab up-routed`), a real BIND 9 on the router serving `home.arpa`. A service
/// published from subnet A by signed DNS updates is found, resolved and connected to from
/// subnet B, where mDNS cannot reach.
final class LabWideAreaTests: XCTestCase {
    static let netsvc = LabHost.packageRoot.appendingPathComponent(".build/debug/netsvc").path
    /// The TSIG key of the lab's DNS server: `lan-lab up-routed` records its folder.
    static var key: String {
        let state = ProcessInfo.processInfo.environment["SALUT_LAB_DIR"] ?? "/run/salut-lab"
        let folder = (try? String(contentsOfFile: state + "/dns-dir", encoding: .utf8))?.trimmingCharacters(in: .whitespacesAndNewlines) ?? ""
        return folder + "/salut-publisher.key"
    }

    override func setUpWithError() throws {
        guard ProcessInfo.processInfo.environment["SALUT_ROUTED_LAB"] == "1" else {
            throw XCTSkip("routed-lab tests run from Scripts/test, which brings up the two-subnet lab (SALUT_ROUTED_LAB=1)")
        }
    }

    private let a1 = LabHost(name: "a1"), b1 = LabHost(name: "b1")

    /// The zone's records other than those it starts with, seen from subnet B through a zone
    /// transfer from the router.
    private func zoneFromB() throws -> [String] {
        let out = try b1.run(["dig", "+noall", "+answer", "+time=2", "@198.18.2.1", "home.arpa", "AXFR"])
        return out.split(separator: "\n").map { $0.split(whereSeparator: { $0 == " " || $0 == "\t" }).joined(separator: " ") }
            .filter { !$0.isEmpty && !$0.contains(" SOA ") && !$0.contains(" NS ") && !$0.hasPrefix("ns.home.arpa.")
                && !$0.contains("._dns-sd._udp.") && !$0.hasPrefix("_dns-update.") }
            .sorted()
    }

    func testAServiceOnSubnetAIsFoundResolvedAndConnectedFromSubnetB() throws {
        // A type of its own each run: avahi-daemon keeps wide-area answers (the type's PTR set
        // included) for their TTL, so a second run would see the first one's list.
        let type = "_wa\(UUID().uuidString.prefix(6).lowercased())._tcp"
        let name = "Across Subnets"
        let escaped = name.replacingOccurrences(of: " ", with: "\\032")
        let publisher = try a1.start([Self.netsvc, "publish", name, type, "0", "--listen",
                                      "--exec", "echo hello-from-a1; cat", "k=v", "--domain", "home.arpa", "--tsig-key", Self.key])
        defer { publisher.stop() }
        XCTAssertTrue(publisher.waitForOutput(containing: "(listening)", seconds: 20), publisher.output)

        // Salut's own unicast browse from subnet B, resolved.
        let unicast = try b1.run([Self.netsvc, "browse", type, "--domain", "home.arpa", "--dns-server", "198.18.2.1",
                                  "--resolve", "--terminate", "--json"])
        XCTAssertTrue(unicast.contains("\"name\":\"\(name)\""), unicast)
        XCTAssertTrue(unicast.contains("198.18.1.10"), "subnet A's address: \(unicast)")
        XCTAssertTrue(unicast.contains(#""txt":{"k":"v"}"#), unicast)

        // avahi-daemon's wide-area browse on subnet B finds it through the same server.
        let avahi = try b1.run(["avahi-browse", "-d", "home.arpa", "-r", "-t", "-p", type])
        XCTAssertTrue(avahi.contains("=;n/a;n/a;\(escaped);\(type);home.arpa;"), avahi)
        XCTAssertTrue(avahi.contains("198.18.1.10"), avahi)

        // Salut's ServiceBrowser through that same avahi-daemon path.
        let viaAvahi = try b1.run([Self.netsvc, "browse", type, "--domain", "home.arpa", "--resolve", "--terminate"], timeout: 30)
        XCTAssertTrue(viaAvahi.contains(name) && viaAvahi.contains("198.18.1.10"), viaAvahi)

        // mDNS does not cross the router: on B's own link the service is not there.
        let link = try b1.run([Self.netsvc, "browse", type, "--terminate"])
        XCTAssertFalse(link.contains(name), "multicast crossed the router: \(link)")

        // Connected to by name from subnet B, through the wide-area domain.
        let connected = try b1.run(["/bin/sh", "-c", "echo hi-from-b1 | \(Self.netsvc) connect '\(name)' \(type) --domain home.arpa"],
                                   timeout: 30)
        XCTAssertTrue(connected.contains("hello-from-a1") && connected.contains("hi-from-b1"), connected)

        // BIND holds exactly what was written: PTR, SRV, TXT and the host's address.
        let records = try zoneFromB()
        XCTAssertEqual(records.count, 4, records.joined(separator: "\n"))
        XCTAssertTrue(records.contains { $0.hasPrefix("\(type).home.arpa.") && $0.contains(" PTR ") }, records.joined(separator: "\n"))
        XCTAssertTrue(records.contains { $0.contains(" A 198.18.1.10") }, records.joined(separator: "\n"))

        // Stopped on A, gone for B.
        publisher.stop()
        XCTAssertTrue(publisher.waitForExit(seconds: 15))
        let after = try b1.run([Self.netsvc, "browse", type, "--domain", "home.arpa", "--dns-server", "198.18.2.1", "--terminate"])
        XCTAssertFalse(after.contains(name), after)
        let left = try zoneFromB()
        XCTAssertTrue(left.allSatisfy { $0.contains(" IN A ") }, "only the host's address is left: \(left)")
    }

    func testAWrongKeyFromSubnetAIsRefusedAndWritesNothing() throws {
        let wrong = NSTemporaryDirectory() + "salut-wrong-\(UUID().uuidString.prefix(6)).key"
        try #"key "salut-publisher" { algorithm hmac-sha256; secret "d3Jvbmcgc2VjcmV0"; };"#.write(toFile: wrong, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(atPath: wrong) }
        let job = try a1.start([Self.netsvc, "publish", "Refused", "_salutwa._tcp", "9", "--domain", "home.arpa", "--tsig-key", wrong])
        XCTAssertTrue(job.waitForExit(seconds: 30), job.output)
        XCTAssertEqual(job.process.terminationStatus, 1)
        XCTAssertTrue(job.output.contains("BADSIG"), job.output)
        let zone = try zoneFromB()
        XCTAssertFalse(zone.contains { $0.contains("Refused") }, "nothing of the refused service was written: \(zone)")
    }
}
