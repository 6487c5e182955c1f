import Foundation
import SalutTestSupport
import XCTest

/// Discovery across two lab hosts, each with its own avahi-daemon.
final class LabDiscoveryTests: XCTestCase {
    /// The lab itself works: a service that avahi-publish announces on h1 is seen and resolved
    /// by avahi-browse on h2, over IPv4 (198.18.0.1) and IPv6 link-local.
    func testForeignToolsSeeEachOtherAcrossHosts() throws {
        try LabHost.requireLab()
        let h1 = LabHost(name: "h1"), h2 = LabHost(name: "h2")
        let publisher = try h1.start(["avahi-publish", "-s", "Lab Probe", "_salutprobe._tcp", "4711", "k=v"])
        defer { publisher.stop() }
        XCTAssertTrue(
            publisher.waitForOutput(containing: "Established", seconds: 10),
            "avahi-publish on h1 did not establish its service")
        var lines: [String] = []
        try eventually(timeout: 15, interval: 0) {
            let out = try h2.run(["avahi-browse", "-rpt", "_salutprobe._tcp"])
            lines = out.split(separator: "\n").map(String.init).filter { $0.hasPrefix("=;") }
            return lines.count >= 2
        }
        let v4 = lines.first { $0.contains(";IPv4;") }
        let v6 = lines.first { $0.contains(";IPv6;") }
        XCTAssertNotNil(v4, "no IPv4 resolution in \(lines)")
        XCTAssertNotNil(v6, "no IPv6 resolution in \(lines)")
        XCTAssertTrue(v4?.contains(";198.18.0.1;4711;\"k=v\"") ?? false, v4 ?? "")
        XCTAssertTrue(v6?.contains(";fe80::") ?? false, v6 ?? "")
        XCTAssertTrue(v4?.contains("Lab\\032Probe") ?? false, v4 ?? "")
    }
}

extension LabDiscoveryTests {
    static var netsvc: String {
        BuiltProduct.path("netsvc")
    }

    /// Salut on h1 publishes, Salut on h2 browses and resolves: one service however many
    /// protocols carry it, resolved to h1's IPv4 address and its IPv6 link-local address with
    /// the scope of h2's interface.
    func testSalutFindsSalutAcrossHostsWithLinkLocalScope() throws {
        try LabHost.requireLab()
        let h1 = LabHost(name: "h1"), h2 = LabHost(name: "h2")
        let publisher = try h1.start([Self.netsvc, "publish", "Across", "_salutlab._tcp", "6006", "who=h1", "--json"])
        defer { publisher.stop() }
        XCTAssertTrue(publisher.waitForOutput(containing: "\"published\"", seconds: 15), publisher.output)

        let browse = try h2.run([Self.netsvc, "browse", "_salutlab._tcp", "--terminate", "--json"], timeout: 20)
        let adds = browse.split(separator: "\n").filter { $0.contains("\"add\"") }
        XCTAssertEqual(adds.count, 1, "one service, seen over IPv4 and IPv6, is reported once: \(browse)")

        var resolved: [String: Any] = [:]
        try eventually(timeout: 15, interval: 0) {
            let out = try h2.run([Self.netsvc, "resolve", "Across", "_salutlab._tcp", "--json"], timeout: 20)
            resolved = (try? JSONSerialization.jsonObject(with: Data(out.utf8)) as? [String: Any]) ?? [:]
            return ((resolved["addresses"] as? [String])?.count ?? 0) >= 2
        }
        let addresses = resolved["addresses"] as? [String] ?? []
        XCTAssertEqual(resolved["port"] as? Int, 6006)
        XCTAssertEqual(resolved["host"] as? String, "salut-h1.local")
        XCTAssertEqual((resolved["txt"] as? [String: Any])?["who"] as? String, "h1")
        XCTAssertTrue(addresses.contains("198.18.0.1"), "\(addresses)")
        XCTAssertTrue(
            addresses.contains { $0.hasPrefix("fe80:") && $0.hasSuffix("%lab0") },
            "the IPv6 link-local address carries its scope: \(addresses)")
    }

    /// An auto-listening service published by netsvc on h1 is reached by name from h2: resolved
    /// through h2's own daemon, connected (IPv6 link-local first, with its scope, or IPv4), and
    /// the bytes come back through the child process h1 runs per connection.
    func testAutoListeningServiceIsReachedByNameFromAnotherHost() throws {
        try LabHost.requireLab()
        let h1 = LabHost(name: "h1"), h2 = LabHost(name: "h2")
        let publisher = try h1.start([
            Self.netsvc, "publish", "Lab Echo", "_salutecho._tcp", "0", "--listen",
            "--exec", "printf 'peer=%s\\n' \"$NETSVC_PEER\"; cat",
        ])
        defer { publisher.stop() }
        XCTAssertTrue(publisher.waitForOutput(containing: "(listening)", seconds: 15), publisher.output)
        let out = try h2.run(
            ["/bin/sh", "-c", "echo hello-from-h2 | \(Self.netsvc) connect 'Lab Echo' _salutecho._tcp"], timeout: 30)
        XCTAssertTrue(out.contains("hello-from-h2"), out)
        let peer = out.split(separator: "\n").first { $0.hasPrefix("peer=") }.map(String.init) ?? ""
        XCTAssertTrue(peer.contains("198.18.0.2") || peer.contains("fe80:"), "the connection came from h2: \(out)")
    }
}
