import Foundation
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
        XCTAssertTrue(publisher.waitForOutput(containing: "Established", timeout: 10), "avahi-publish on h1 did not establish its service")
        var lines: [String] = []
        let deadline = Date().addingTimeInterval(15)
        repeat {
            let out = try h2.run(["avahi-browse", "-rpt", "_salutprobe._tcp"])
            lines = out.split(separator: "\n").map(String.init).filter { $0.hasPrefix("=;") }
        } while lines.count < 2 && Date() < deadline
        let v4 = lines.first { $0.contains(";IPv4;") }
        let v6 = lines.first { $0.contains(";IPv6;") }
        XCTAssertNotNil(v4, "no IPv4 resolution in \(lines)")
        XCTAssertNotNil(v6, "no IPv6 resolution in \(lines)")
        XCTAssertTrue(v4?.contains(";198.18.0.1;4711;\"k=v\"") ?? false, v4 ?? "")
        XCTAssertTrue(v6?.contains(";fe80::") ?? false, v6 ?? "")
        XCTAssertTrue(v4?.contains("Lab\\032Probe") ?? false, v4 ?? "")
    }
}
