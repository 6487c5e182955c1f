import Foundation
import SalutDiscovery
import SalutStreams
import SalutTestSupport
import XCTest

/// The async API against the real avahi-daemon.
final class AsyncDiscoveryTests: XCTestCase {
    func testPublishBrowseResolveWithTXT() async throws {
        let type = uniqueType()
        let txt = try TXTRecord(["path": "/index.html", "v": "2"])
        let ad = try await ServiceAdvertisement.publish(name: "Salut Test", type: type, port: 4321, txtRecord: txt)
        XCTAssertEqual(ad.name, "Salut Test")

        let found = try await browse(type, until: { $0.contains { $0.name == "Salut Test" } })
        let service = try XCTUnwrap(found.first { $0.name == "Salut Test" })
        XCTAssertEqual(service.type, type)
        XCTAssertEqual(service.domain, "local")

        let resolved = try await service.resolve(timeout: 5)
        XCTAssertEqual(resolved.port, 4321)
        XCTAssertEqual(resolved.txtRecord.string(for: "path"), "/index.html")
        XCTAssertEqual(resolved.txtRecord.string(for: "V"), "2", "TXT keys are case-insensitive")
        let info = try await DiscoveryContext.shared.daemonInfo()
        XCTAssertEqual(resolved.hostName, info.hostNameFQDN)
        XCTAssertTrue(
            resolved.addresses.contains { $0.host == "127.0.0.1" && $0.port == 4321 },
            "addresses: \(resolved.addresses)")
    }

    /// DNS-SD names compare without regard to ASCII case (RFC 6762), as Apple's resolver
    /// compares them; Avahi's resolver alone answers only the published spelling.
    func testANameIsResolvedWhateverItsASCIICaseAndOnlyThatOneIsTaken() async throws {
        let type = uniqueType()
        let ad = try await ServiceAdvertisement.publish(name: "Kitchen Printer", type: type, port: 4322)
        defer { ad.cancel() }
        let other = try await ServiceAdvertisement.publish(name: "Kitchen Printer 2", type: type, port: 4323)
        defer { other.cancel() }
        _ = try await browse(type, until: { $0.contains { $0.name == "Kitchen Printer" } })
        let resolved = try await DiscoveredService(name: "kitchen PRINTER", type: type).resolve(timeout: 5)
        XCTAssertEqual(resolved.port, 4322)
        XCTAssertEqual(resolved.service.name, "Kitchen Printer", "the result carries the published spelling")
        // Case only: another name is not found.
        do {
            _ = try await DiscoveredService(name: "kitchen printer 3", type: type).resolve(timeout: 1.5)
            XCTFail("a name that differs by more than case was resolved")
        } catch {
            XCTAssertEqual((error as? DiscoveryError)?.code, .timedOut, "\(error)")
        }
    }

    /// A look-alike written with other code points (a Kelvin sign for the K) is another service,
    /// as it is to avahi-daemon: both are listed, and its goodbye removes it alone. (Swift's
    /// string comparison takes the two names for one; the browse once merged them, so the
    /// look-alike's goodbye removed the real service.)
    func testALookAlikeNameIsAnotherServiceAndItsGoodbyeRemovesItAlone() async throws {
        let type = uniqueType("la")
        let real = DiscoveredService(name: "Kitchen", type: type)
        let twin = DiscoveredService(name: "\u{212a}itchen", type: type)
        XCTAssertNotEqual(real, twin)
        XCTAssertEqual(Set([real, twin, DiscoveredService(name: "Kitchen", type: type)]).count, 2)
        let ad = try await ServiceAdvertisement.publish(name: "Kitchen", type: type, port: 4324)
        defer { ad.cancel() }
        let publisher = try Foreign(["avahi-publish", "-s", twin.name, type, "4325"])
        defer { publisher.stop() }
        let listed = try await withDeadline(15, "both listed, then the twin gone") { () -> BrowseUpdate in
            var both = false
            for try await update in try ServiceBrowser(type: type) {
                if !both, update.services.isSuperset(of: [real, twin]) {
                    both = true
                    publisher.stop()  // avahi-publish withdraws with a goodbye
                }
                if both, !update.services.contains(twin) { return update }
            }
            throw CancellationError()
        }
        XCTAssertEqual(listed.services, [real], "the real service stays listed")
        XCTAssertFalse(listed.changes.contains(.removed(real)), "\(listed.changes)")
    }

    func testCancelIsSeenAsRemoval() async throws {
        let type = uniqueType()
        let ad = try await ServiceAdvertisement.publish(name: "Going Away", type: type, port: 1000)
        let removed = try await withDeadline(10, "removal") {
            var seen = false
            for try await update in try ServiceBrowser(type: type) {
                if update.services.contains(where: { $0.name == "Going Away" }), !seen {
                    seen = true
                    ad.cancel()
                }
                if seen, update.changes.contains(.removed(DiscoveredService(name: "Going Away", type: type))) {
                    return true
                }
            }
            return false
        }
        XCTAssertTrue(removed)
    }

    func testCollisionRenamesOrFails() async throws {
        let type = uniqueType()
        let first = try await ServiceAdvertisement.publish(name: "Twin", type: type, port: 1)
        let second = try await ServiceAdvertisement.publish(name: "Twin", type: type, port: 2)
        XCTAssertEqual(first.name, "Twin")
        XCTAssertNotEqual(second.name, "Twin")
        XCTAssertTrue(second.name.hasPrefix("Twin"), second.name)
        do {
            _ = try await ServiceAdvertisement.publish(name: "Twin", type: type, port: 3, allowRename: false)
            XCTFail("publishing a taken name without renaming must fail")
        } catch let error as DiscoveryError {
            XCTAssertEqual(error, .collision(name: "Twin"))
        }
        let services = try await browse(type, until: { $0.count == 2 })
        XCTAssertEqual(Set(services.map(\.name)), ["Twin", second.name])
    }

    func testTXTUpdateIsSeenByMonitor() async throws {
        let type = uniqueType()
        let ad = try await ServiceAdvertisement.publish(
            name: "Changing", type: type, port: 5, txtRecord: try TXTRecord(["n": "1"]))
        let service = DiscoveredService(name: "Changing", type: type)
        let values = try await withDeadline(10, "TXT update") {
            var values: [String] = []
            for await record in try service.txtRecordUpdates() {
                values.append(record.string(for: "n") ?? "?")
                if values == ["1"] { try ad.updateTXTRecord(TXTRecord(["n": "2"])) }
                if values.last == "2" { break }
            }
            return values
        }
        XCTAssertEqual(values, ["1", "2"])
    }

    func testSubtypePublishesAndBrowses() async throws {
        let base = uniqueType()
        let ad = try await ServiceAdvertisement.publish(name: "Printer", type: "_printer._sub.\(base)", port: 631)
        _ = ad
        let bySub = try await browse("_printer._sub.\(base)", until: { !$0.isEmpty })
        XCTAssertEqual(bySub.map(\.name), ["Printer"])
        let byBase = try await browse(base, until: { !$0.isEmpty })
        XCTAssertEqual(byBase.map(\.name), ["Printer"])
    }

    func testServiceTypeEnumeration() async throws {
        let type = uniqueType()
        let ad = try await ServiceAdvertisement.publish(name: "Typed", type: type, port: 7)
        _ = ad
        let types = try await withDeadline(10, "type enumeration") {
            for try await update in try ServiceBrowser.serviceTypes()
            where update.services.contains(where: { $0.name == type }) {
                return update.services
            }
            return []
        }
        XCTAssertTrue(types.contains { $0.name == type })
    }

    func testResolveTimesOutForAMissingService() async throws {
        let started = Date()
        do {
            _ = try await DiscoveredService(name: "Nobody", type: uniqueType()).resolve(timeout: 1)
            XCTFail("resolving a missing service must time out")
        } catch let error as DiscoveryError {
            XCTAssertEqual(error, .timedOut)
        }
        XCTAssertLessThan(Date().timeIntervalSince(started), 4, "the timeout must be honoured")
    }

    func testBadInputIsATypedError() async throws {
        XCTAssertThrowsError(try ServiceBrowser(type: "http._tcp")) { error in
            XCTAssertEqual((error as? DiscoveryError)?.code, .invalidServiceType, "\(error)")
        }
        // Over RFC 6335's 15 characters: taken on .local (as mDNSResponder and Avahi take it),
        // refused elsewhere (as mDNSResponder refuses it); a label over 63 bytes never fits.
        XCTAssertNoThrow(try ServiceBrowser(type: "_waytoolongservicename._tcp"))
        XCTAssertThrowsError(try ServiceBrowser(type: "_waytoolongservicename._tcp", domain: "example.org")) { error in
            XCTAssertTrue("\(error)".contains("outside .local"), "\(error)")
        }
        XCTAssertThrowsError(try ServiceBrowser(type: "_" + String(repeating: "a", count: 63) + "._tcp"))
        XCTAssertThrowsError(try ServiceBrowser(type: "_http._sctp"))
        XCTAssertThrowsError(try ServiceBrowser(type: "_http._tcp", domain: "bad..domain"))
        for (name, port) in [(String(repeating: "x", count: 64), 1), ("ok", 70000), ("ok", -1)] {
            do {
                _ = try await ServiceAdvertisement.publish(name: name, type: "_http._tcp", port: port)
                XCTFail("publish(\(name), \(port)) must fail")
            } catch let error as DiscoveryError {
                switch error.code {
                case .invalidServiceName, .invalidPort: break
                default: XCTFail("unexpected \(error)")
                }
            }
        }
        // 63 bytes of UTF-8 fit; 64 do not, however few characters they are.
        let emoji = String(repeating: "é", count: 32)  // 64 bytes
        do {
            _ = try await ServiceAdvertisement.publish(name: emoji, type: "_http._tcp", port: 1)
            XCTFail("a 64-byte name must be refused")
        } catch let error as DiscoveryError where error.code == .invalidServiceName {}
    }

    func testForeignPublisherIsFoundAndResolved() async throws {
        let type = uniqueType()
        let publisher = try Foreign(["avahi-publish", "-s", "Foreign One", type, "2468", "k=v", "flag"])
        defer { publisher.stop() }
        let found = try await browse(type, until: { $0.contains { $0.name == "Foreign One" } })
        let resolved = try await found.first!.resolve()
        XCTAssertEqual(resolved.port, 2468)
        XCTAssertEqual(resolved.txtRecord.string(for: "k"), "v")
        XCTAssertTrue(resolved.txtRecord.contains("flag"))
        XCTAssertNil(resolved.txtRecord["flag"], "a key without '=' is a boolean attribute")
    }

    func testOurServiceIsSeenByAvahiBrowse() async throws {
        let type = uniqueType()
        let ad = try await ServiceAdvertisement.publish(
            name: "Ours Here", type: type, port: 1357, txtRecord: try TXTRecord(["a": "b"]))
        _ = ad
        var line: String?
        try eventually(timeout: 10, interval: 0) {
            let out = try Foreign(["avahi-browse", "-rpt", type]).finish()
            line = out.split(separator: "\n").map(String.init).first {
                $0.hasPrefix("=;") && $0.contains("Ours\\032Here")
            }
            return line != nil
        }
        let fields = try XCTUnwrap(line, "avahi-browse never resolved our service").split(
            separator: ";", omittingEmptySubsequences: false)
        XCTAssertEqual(fields[4], Substring(type))
        XCTAssertEqual(fields[8], "1357")
        XCTAssertEqual(fields[9], "\"a=b\"")
    }
}

extension AsyncDiscoveryTests {
    /// The attributes go on the wire in the order the record holds them (the monitor reads the
    /// raw TXT rdata), and resolving reads them back in that order.
    func testTXTOrderOnTheWire() async throws {
        let type = uniqueType()
        var txt = TXTRecord()
        for key in ["zeta", "alpha", "mid"] { try txt.set(key, to: Data(key.utf8)) }
        let ad = try await ServiceAdvertisement.publish(name: "Ordered", type: type, port: 9, txtRecord: txt)
        _ = ad
        let service = DiscoveredService(name: "Ordered", type: type)
        let raw = try await withDeadline(10, "TXT monitor") {
            for await record in try service.txtRecordUpdates() { return record }
            return TXTRecord()
        }
        XCTAssertEqual(raw.entries.map(\.key), ["zeta", "alpha", "mid"])
        XCTAssertEqual(raw.data, txt.data)
        let resolved = try await service.resolve()
        XCTAssertEqual(resolved.txtRecord.entries.map(\.key), ["zeta", "alpha", "mid"])
    }
}

extension AsyncDiscoveryTests {
    func testLocalHostNameResolvesThroughAvahi() async throws {
        let info = try await DiscoveryContext.shared.daemonInfo()
        let addresses = try await DiscoveryContext.shared.addresses(ofHost: info.hostNameFQDN, family: .ipv4)
        XCTAssertTrue(addresses.contains { $0.host == "127.0.0.1" }, "\(addresses)")
        do {
            _ = try await DiscoveryContext.shared.addresses(
                ofHost: "no-such-host-\(UInt32.random(in: 0...UInt32.max)).local", timeout: 2)
            XCTFail("an unknown host must not resolve")
        } catch let error as DiscoveryError {
            XCTAssertTrue(error == .timedOut || error == .notFound, "\(error)")
        }
        do {
            _ = try await DiscoveryContext.shared.addresses(ofHost: "bad..name.local")
            XCTFail("a malformed host name must be refused")
        } catch let error as DiscoveryError where error.code == .invalidHostName {}
    }
}

extension AsyncDiscoveryTests {
    /// `withdraw()` returns once the daemon has been told: browsers then see the service go
    /// (after mDNS's one-second goodbye grace) without anything else from us.
    func testWithdrawReachesTheDaemonBeforeReturning() async throws {
        let type = uniqueType()
        let ad = try await ServiceAdvertisement.publish(name: "Short Lived", type: type, port: 3)
        let before = try Foreign(["avahi-browse", "-pt", type]).finish()
        XCTAssertTrue(before.contains("Short\\032Lived"), before)
        await ad.withdraw()
        var after = ""
        try eventually(timeout: 5, interval: 0) {
            after = try Foreign(["avahi-browse", "-pt", type]).finish()
            return !after.contains("Short\\032Lived")
        }
        XCTAssertFalse(after.contains("Short\\032Lived"), "still listed 5 s after withdraw: \(after)")
    }
}

extension AsyncDiscoveryTests {
    /// A service published on behalf of another host (a gateway announcing another link's
    /// printer): avahi-browse resolves it to that host and its address, and the host goes with
    /// its handle.
    func testAServiceOnAnotherHostResolvesToThatHostsAddress() async throws {
        let type = uniqueType()
        let hostName = "printer-\(UInt16.random(in: 1...UInt16.max)).lab-x.local"
        let host = try await HostAdvertisement.publish(hostName: hostName, addresses: ["198.18.1.10"])
        let ad = try await ServiceAdvertisement.publish(name: "Far Printer", type: type, port: 631, host: host.hostName)
        var line: String?
        try eventually(timeout: 10, interval: 0) {
            let out = try Foreign(["avahi-browse", "-rpt", type]).finish()
            line = out.split(separator: "\n").map(String.init).first {
                $0.hasPrefix("=;") && $0.contains("Far\\032Printer")
            }
            return line != nil
        }
        let fields = try XCTUnwrap(line, "avahi-browse never resolved it").split(
            separator: ";", omittingEmptySubsequences: false)
        XCTAssertEqual(fields[6], Substring(hostName))
        XCTAssertEqual(fields[7], "198.18.1.10")
        XCTAssertEqual(fields[8], "631")
        let resolved = try await DiscoveredService(name: "Far Printer", type: type).resolve()
        XCTAssertEqual(resolved.hostName, hostName)
        XCTAssertTrue(resolved.addresses.contains { $0.host == "198.18.1.10" }, "\(resolved.addresses)")

        // A name not in .local, or an address that is none, is refused.
        for (name, addresses) in [("printer.example.com", ["198.18.1.10"]), ("p.lab-x.local", ["not an address"])] {
            do {
                _ = try await HostAdvertisement.publish(hostName: name, addresses: addresses)
                XCTFail("\(name) \(addresses) must be refused")
            } catch let error as DiscoveryError where error.code == .invalidDomain {}
        }

        await ad.withdraw()
        await host.withdraw()
        // Gone: asked for, the name finds no address (within the deadline, or the test fails).
        try await eventually("the host's withdrawal", interval: 0.2) {
            do {
                _ = try await DiscoveryContext.shared.addresses(ofHost: hostName, family: .ipv4, timeout: 1)
                return false
            } catch let error as DiscoveryError where error == .timedOut || error == .notFound {
                return true
            }
        }
    }
}
