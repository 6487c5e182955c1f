import Foundation
import SalutStreams
import SalutTestSupport
import XCTest

@testable import SalutDiscovery

/// Several of one host's services announced in one avahi-daemon entry group (the gateway's
/// `--announce-remote`), against the sandbox daemon and `avahi-browse`.
final class AnnouncedGroupTests: XCTestCase {
    private func announcement(_ name: String, type: String, host: String, note: String) -> DiscoveryGateway.Announcement
    {
        DiscoveryGateway.Announcement(
            label: "lab-g",
            service: DiscoveryGateway.MirroredService(
                key: .init(name: name, type: type), host: host, port: 631, txt: [Array("note=\(note)".utf8)],
                addresses: [[198, 18, 1, 10]]))
    }

    /// avahi-browse's resolved lines for `type`, by instance name (its escapes as it prints them).
    private func resolved(_ type: String) throws -> [String: [Substring]] {
        let out = try Foreign(["avahi-browse", "-rpt", type]).finish()
        var lines: [String: [Substring]] = [:]
        for line in out.split(separator: "\n") where line.hasPrefix("=;") {
            let fields = line.split(separator: ";", omittingEmptySubsequences: false)
            if fields.count > 9 { lines[String(fields[3])] = fields }
        }
        return lines
    }

    func testOneHostsServicesShowTogetherChangeTheirTextOneByOneAndGoTogether() async throws {
        let type = uniqueType("g")
        let host = "grouped-\(UInt16.random(in: 1...UInt16.max))"
        let hostAd = try await HostAdvertisement.publish(hostName: "\(host).lab-g.local", addresses: ["198.18.1.10"])
        let members = ["First", "Second", "Third"].map { announcement($0, type: type, host: host, note: "one") }
        let group = try await DiscoveryGateway.AnnouncedGroup.publish(members, context: .shared)
        XCTAssertEqual(group.ids, members.map(\.id))
        var seen: [String: [Substring]] = [:]
        XCTAssertTrue(
            try eventually(timeout: 10, interval: 0.2) {
                seen = try resolved(type)
                return seen.count == 3
            }, "all three resolved on the group's host: \(seen.keys.sorted())")
        for name in ["First", "Second", "Third"] {
            let fields = try XCTUnwrap(seen[name], "\(name) not listed: \(seen.keys.sorted())")
            XCTAssertEqual(fields[6], Substring("\(host).lab-g.local"))
            XCTAssertEqual(fields[7], "198.18.1.10")
            XCTAssertEqual(fields[8], "631")
        }

        // One member's TXT record changes; the others keep theirs.
        try group.changeTXTRecord(of: members[1].id, to: TXTRecord(["note": "two"]))
        XCTAssertTrue(
            try eventually(timeout: 10, interval: 0.2) {
                seen = try resolved(type)
                return seen["Second"]?[9].contains("note=two") == true
            }, "the second's new TXT record: \(seen["Second"] ?? [])")
        XCTAssertTrue(seen["First"]?[9].contains("note=one") == true, "\(seen["First"] ?? [])")
        XCTAssertTrue(seen["Third"]?[9].contains("note=one") == true, "\(seen["Third"] ?? [])")

        await group.withdraw()
        XCTAssertTrue(
            try eventually(timeout: 10, interval: 0.2) {
                try Foreign(["avahi-browse", "-pt", type]).finish().split(separator: "\n").allSatisfy {
                    !$0.hasPrefix("+;")
                }
            }, "all three gone")
        await hostAd.withdraw()
    }

    func testAGroupWithANameTakenOnItsDaemonFailsWholeWithCollision() async throws {
        let type = uniqueType("g")
        let host = "grouped-\(UInt16.random(in: 1...UInt16.max))"
        let taken = try Foreign(["avahi-publish", "-s", "Taken", type, "80"])
        defer { taken.stop() }
        XCTAssertTrue(taken.waitForOutput(containing: "Established", seconds: 10), taken.output)
        let members = ["Free", "Taken"].map { announcement($0, type: type, host: host, note: "one") }
        do {
            _ = try await DiscoveryGateway.AnnouncedGroup.publish(members, context: .shared)
            XCTFail("a group holding a taken name must fail")
        } catch let error as DiscoveryError {
            XCTAssertEqual(error.code, .collision, "\(error)")
        }
    }
}
