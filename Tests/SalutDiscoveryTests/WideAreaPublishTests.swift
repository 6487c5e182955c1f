import Foundation
@testable import SalutDiscovery
import SalutStreams
import SalutTestSupport
import XCTest

/// Publishing in a unicast DNS zone through a real BIND 9 (`Scripts/dns-server`, on loopback):
/// what Salut writes is read back with BIND's own `dig`.
final class WideAreaPublishTests: SalutTestCase {
    private var directory = ""
    private var port = 0
    private var nameServer: SocketAddress { SocketAddress.literal("127.0.0.1", port: UInt16(port))! }

    override func setUpWithError() throws {
        try XCTSkipUnless(
            FileManager.default.isExecutableFile(atPath: "/usr/sbin/named"),
            "BIND 9 is not installed (Scripts/bootstrap installs it)")
        directory = NSTemporaryDirectory() + "salut-dns-\(UUID().uuidString.prefix(8))"
        port = freeLoopbackPort()
        let started = try Foreign([Self.script, "start", directory, "127.0.0.1", String(port)])
        XCTAssertTrue(started.waitForExit(seconds: 30), "dns-server did not finish starting")
        XCTAssertTrue(started.output.contains("serving home.arpa"), started.output)
    }

    override func tearDownWithError() throws {
        guard !directory.isEmpty else { return }
        _ = try Foreign([Self.script, "stop", directory]).waitForExit(seconds: 15)
        try? FileManager.default.removeItem(atPath: directory)
    }

    private static var script: String {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent()
            .appendingPathComponent("Scripts/dns-server").path
    }

    private var key: SalutTSIGKey {
        get throws { try SalutTSIGKey(contentsOfFile: directory + "/salut-publisher.key") }
    }

    /// `dig +short` of NAME TYPE at the test server.
    private func dig(_ name: String, _ type: String) throws -> [String] {
        let out = try Foreign(["dig", "+short", "+time=2", "+tries=1", "-p", String(port), "@127.0.0.1", name, type])
            .finish()
        return out.split(separator: "\n").map(String.init).filter { !$0.hasPrefix(";") }
    }

    /// Every name in the zone and its records, from a zone transfer (`dig AXFR`), minus the
    /// records the zone starts with.
    private func zoneContents() throws -> [String] {
        let out = try Foreign([
            "dig", "+noall", "+answer", "+time=2", "-p", String(port), "@127.0.0.1", "home.arpa", "AXFR",
        ]).finish()
        return out.split(separator: "\n").map {
            $0.split(whereSeparator: { $0 == " " || $0 == "\t" }).joined(separator: " ")
        }
        .filter { line in
            !["SOA", "NS"].contains(line.split(separator: " ").dropFirst(3).first.map(String.init) ?? "")
                && !line.hasPrefix("ns.home.arpa.") && !line.contains("._dns-sd._udp.")
                && !line.hasPrefix("_dns-update.") && !line.isEmpty
        }
        .sorted()
    }

    private func publisher(
        _ name: String, key: SalutTSIGKey? = nil, renames: Bool = true, txt: [String] = ["path=/"]
    ) throws -> WideAreaPublisher {
        try WideAreaPublisher(
            name: name, type: "_http._tcp", subtypes: ["_printer"], domain: "home.arpa", port: 8080,
            txt: txt.map { Array($0.utf8) }, host: "salut-test",
            addresses: [SocketAddress.literal("198.18.0.1", port: 0)!], key: try key ?? self.key,
            nameServer: nameServer, renames: renames)
    }

    func testAServiceIsPublishedFoundByItsSRVChangedAndRemoved() async throws {
        let service = try publisher("Lab Printer")
        let registered = try await withDeadline(20, "publishing") { try await service.publish() }
        XCTAssertEqual(registered, "Lab Printer")
        let server = await service.serverAddress
        XCTAssertEqual(server?.port, UInt16(port), "the primary was found through _dns-update._udp's SRV")

        XCTAssertEqual(try dig("_http._tcp.home.arpa", "PTR"), [#"Lab\032Printer._http._tcp.home.arpa."#])
        XCTAssertEqual(try dig("_printer._sub._http._tcp.home.arpa", "PTR"), [#"Lab\032Printer._http._tcp.home.arpa."#])
        XCTAssertEqual(try dig("Lab Printer._http._tcp.home.arpa", "SRV"), ["0 0 8080 salut-test.home.arpa."])
        XCTAssertEqual(try dig("Lab Printer._http._tcp.home.arpa", "TXT"), [#""path=/""#])
        XCTAssertEqual(try dig("salut-test.home.arpa", "A"), ["198.18.0.1"])
        let contents = try zoneContents()
        XCTAssertEqual(
            contents.count, 5, "exactly the records written, nothing else:\n\(contents.joined(separator: "\n"))")

        try await withDeadline(20, "changing the TXT record") {
            try await service.updateText([Array("path=/v2".utf8), Array("x=1".utf8)])
        }
        XCTAssertEqual(try dig("Lab Printer._http._tcp.home.arpa", "TXT"), [#""path=/v2" "x=1""#])

        try await withDeadline(20, "removing") { try await service.stop() }
        XCTAssertEqual(try dig("_http._tcp.home.arpa", "PTR"), [])
        XCTAssertEqual(try dig("Lab Printer._http._tcp.home.arpa", "SRV"), [])
        XCTAssertEqual(
            try zoneContents(), ["salut-test.home.arpa. 120 IN A 198.18.0.1"],
            "nothing of the service is left; the host's address stays (other services of the host use it)")
    }

    func testATakenNameIsRenamedOrRefused() async throws {
        let first = try publisher("Shared Name")
        let second = try publisher("Shared Name")
        let third = try publisher("Shared Name", renames: false)
        try await withDeadline(20, "the first") { _ = try await first.publish() }
        let renamed = try await withDeadline(20, "the second") { try await second.publish() }
        XCTAssertEqual(renamed, "Shared Name (2)")
        XCTAssertEqual(
            Set(try dig("_http._tcp.home.arpa", "PTR")),
            [#"Shared\032Name._http._tcp.home.arpa."#, #"Shared\032Name\032\(2\)._http._tcp.home.arpa."#],
            "as dig writes them")
        do {
            _ = try await withDeadline(20, "the third") { try await third.publish() }
            XCTFail("a taken name with renaming off was published")
        } catch let error as DiscoveryError {
            XCTAssertEqual(error.code, .collision)
            XCTAssertEqual(error.subject, "Shared Name")
        }
        try await first.stop()
        XCTAssertEqual(
            try dig("_http._tcp.home.arpa", "PTR"), [#"Shared\032Name\032\(2\)._http._tcp.home.arpa."#],
            "removing one instance leaves the other's PTR")
        try await second.stop()
    }

    func testAWrongSecretAnUnknownKeyAndAnotherZoneAreClearErrors() async throws {
        let wrongSecret = try SalutTSIGKey(name: "salut-publisher", secret: Array("not the secret".utf8))
        await assertFails(try publisher("Bad Secret", key: wrongSecret), code: .signatureRejected, mentioning: "BADSIG")
        let unknown = try SalutTSIGKey(name: "nobody", secret: Array("whatever".utf8))
        await assertFails(try publisher("Bad Key", key: unknown), code: .signatureRejected, mentioning: "BADKEY")
        let elsewhere = try WideAreaPublisher(
            name: "X", type: "_http._tcp", domain: "example.arpa", port: 1, txt: [], host: "h",
            addresses: [], key: try key, server: nameServer)
        await assertFails(elsewhere, code: .notAuthorized, mentioning: "NOTAUTH")
        let notServed = try WideAreaPublisher(
            name: "X", type: "_http._tcp", domain: "example.arpa", port: 1, txt: [], host: "h",
            addresses: [], key: try key, nameServer: nameServer)
        await assertFails(
            notServed, code: .notAuthorized,
            mentioning:
                "it holds no zone for that name, or does not answer this host's queries; check the domain's spelling")
        XCTAssertEqual(try zoneContents(), [], "nothing was written")
    }

    func testServiceAdvertisementPublishesInAWideAreaDomain() async throws {
        let settings = WideAreaPublishing(
            key: try key, nameServer: nameServer, hostName: "ad-host",
            addresses: [SocketAddress.literal("198.18.0.7", port: 0)!, SocketAddress.literal("2001:db8::7", port: 0)!])
        let ad = try await withDeadline(20, "publishing") {
            try await ServiceAdvertisement.publish(
                name: "Kitchen Display", type: "_display._sub._demo._tcp", domain: "home.arpa",
                port: 9000, txtRecord: try TXTRecord(["v": "1"]), wideArea: settings)
        }
        XCTAssertEqual(ad.name, "Kitchen Display")
        XCTAssertEqual(ad.domain, "home.arpa")
        XCTAssertEqual(try dig("_demo._tcp.home.arpa", "PTR"), [#"Kitchen\032Display._demo._tcp.home.arpa."#])
        XCTAssertEqual(
            try dig("_display._sub._demo._tcp.home.arpa", "PTR"), [#"Kitchen\032Display._demo._tcp.home.arpa."#])
        XCTAssertEqual(try dig("Kitchen Display._demo._tcp.home.arpa", "SRV"), ["0 0 9000 ad-host.home.arpa."])
        XCTAssertEqual(try dig("Kitchen Display._demo._tcp.home.arpa", "TXT"), [#""v=1""#])
        XCTAssertEqual(try dig("ad-host.home.arpa", "A"), ["198.18.0.7"])
        XCTAssertEqual(try dig("ad-host.home.arpa", "AAAA"), ["2001:db8::7"])
        // Two changes asked for at once, without waiting: they reach the server in that order,
        // and the removal after them.
        try ad.updateTXTRecord(try TXTRecord(["v": "2"]))
        try ad.updateTXTRecord(try TXTRecord(["v": "3"]))
        try eventually(timeout: 10, interval: 0.05) {
            try dig("Kitchen Display._demo._tcp.home.arpa", "TXT") == [#""v=3""#]
        }
        XCTAssertEqual(
            try dig("Kitchen Display._demo._tcp.home.arpa", "TXT"), [#""v=3""#], "the last change wins, alone")
        await ad.withdraw()
        XCTAssertEqual(
            try zoneContents(),
            ["ad-host.home.arpa. 120 IN A 198.18.0.7", "ad-host.home.arpa. 120 IN AAAA 2001:db8::7"],
            "withdrawn: only the host's addresses are left")

        do {
            _ = try await ServiceAdvertisement.publish(
                name: "X", type: "_demo._tcp", domain: "local", port: 1, wideArea: settings)
            XCTFail("local with wideArea was accepted")
        } catch let error as DiscoveryError {
            XCTAssertEqual(error.code, .invalidDomain)
        }
    }

    func testNetsvcPublishesInAWideAreaDomainUntilStopped() throws {
        let publish = try Foreign([
            NetsvcTests.netsvc, "publish", "From netsvc", "_demo._tcp", "4242", "k=v", "--domain", "home.arpa",
            "--tsig-key", directory + "/salut-publisher.key", "--dns-server", "127.0.0.1:\(port)",
        ])
        XCTAssertTrue(publish.waitForOutput(containing: "published", seconds: 20), publish.output)
        XCTAssertEqual(try dig("From netsvc._demo._tcp.home.arpa", "TXT"), [#""k=v""#])
        XCTAssertEqual(try dig("From netsvc._demo._tcp.home.arpa", "SRV").first?.hasPrefix("0 0 4242 "), true)
        publish.process.terminate()
        XCTAssertTrue(publish.waitForExit(seconds: 15), "netsvc did not exit on SIGTERM")
        XCTAssertEqual(publish.process.terminationStatus, 0, publish.output)
        XCTAssertEqual(try dig("_demo._tcp.home.arpa", "PTR"), [], "SIGTERM withdrew the service from the zone")

        let badKey = directory + "/wrong.key"
        try #"key "salut-publisher" { algorithm hmac-sha256; secret "d3Jvbmcgc2VjcmV0"; };"#.write(
            toFile: badKey, atomically: true, encoding: .utf8)
        let refused = try Foreign([
            NetsvcTests.netsvc, "publish", "X", "_demo._tcp", "1", "--domain", "home.arpa",
            "--tsig-key", badKey, "--dns-server", "127.0.0.1:\(port)",
        ])
        XCTAssertTrue(refused.waitForExit(seconds: 20))
        XCTAssertEqual(refused.process.terminationStatus, 1)
        XCTAssertTrue(refused.output.contains("BADSIG"), refused.output)
        let usage = try Foreign([NetsvcTests.netsvc, "publish", "X", "_demo._tcp", "1", "--domain", "home.arpa"])
        XCTAssertTrue(usage.waitForExit(seconds: 20))
        XCTAssertEqual(usage.process.terminationStatus, 2)
        XCTAssertTrue(usage.output.contains("--tsig-key"), usage.output)
        // Usage errors: port 0 of a name server, and a zone under local (multicast, no server).
        for (arguments, text) in [
            (["--domain", "home.arpa", "--dns-server", "127.0.0.1:0"], "--dns-server 127.0.0.1:0"),
            (["--domain", "office.local"], "under local"),
        ] {
            let wrong = try Foreign(
                [
                    NetsvcTests.netsvc, "publish", "X", "_demo._tcp", "1", "--tsig-key",
                    directory + "/salut-publisher.key",
                ] + arguments)
            XCTAssertTrue(wrong.waitForExit(seconds: 20))
            XCTAssertEqual(wrong.process.terminationStatus, 2, wrong.output)
            XCTAssertTrue(wrong.output.contains(text), wrong.output)
        }
    }

    func testNetsvcSaysSoAndFailsWhenTheRemovalIsNotConfirmed() throws {
        // A key others can read is published with, and warned about.
        let exposed = directory + "/exposed.key"
        try FileManager.default.copyItem(atPath: directory + "/salut-publisher.key", toPath: exposed)
        XCTAssertEqual(chmod(exposed, 0o644), 0)
        let publish = try Foreign([
            NetsvcTests.netsvc, "publish", "Orphan", "_demo._tcp", "4242", "--domain", "home.arpa",
            "--tsig-key", exposed, "--dns-server", "127.0.0.1:\(port)",
        ])
        XCTAssertTrue(publish.waitForOutput(containing: "published", seconds: 20), publish.output)
        XCTAssertTrue(publish.output.contains("can be read by others (mode 644)"), publish.output)
        // The server goes away before the service is withdrawn: the removal cannot be confirmed.
        XCTAssertTrue(try Foreign([Self.script, "stop", directory]).waitForExit(seconds: 15))
        publish.process.terminate()
        XCTAssertTrue(publish.waitForExit(seconds: 40), "netsvc did not exit on SIGTERM")
        XCTAssertEqual(publish.process.terminationStatus, 1, publish.output)
        XCTAssertTrue(publish.output.contains("\"Orphan\" may still be listed in home.arpa"), publish.output)
    }

    func testNetsvcBrowsesAWideAreaDomainAndFollowsChanges() async throws {
        let first = try WideAreaPublisher(
            name: "Browse One", type: "_http._tcp", domain: "home.arpa", port: 8081,
            txt: [Array("k=1".utf8)], host: "one", addresses: [SocketAddress.literal("198.18.0.11", port: 0)!],
            key: try key, nameServer: nameServer, ttl: 1)
        try await withDeadline(20, "publishing") { _ = try await first.publish() }
        let once = try Foreign([
            NetsvcTests.netsvc, "browse", "_http._tcp", "--domain", "home.arpa", "--dns-server", "127.0.0.1:\(port)",
            "--resolve", "--terminate", "--json",
        ]).finish()
        XCTAssertTrue(once.contains(#""name":"Browse One""#), once)
        XCTAssertTrue(once.contains(#""port":8081"#), once)
        XCTAssertTrue(once.contains("198.18.0.11"), once)
        XCTAssertTrue(once.contains(#""txt":{"k":"1"}"#), "TXT as on the link: \(once)")
        XCTAssertTrue(once.contains(#""protocol":"unicast""#), once)

        let subtype = try WideAreaPublisher(
            name: "Browse Sub", type: "_http._tcp", subtypes: ["_printer"], domain: "home.arpa", port: 8083,
            txt: [], host: "one", addresses: [], key: try key, nameServer: nameServer, ttl: 1)
        try await withDeadline(20, "publishing") { _ = try await subtype.publish() }
        let bySubtype = try Foreign([
            NetsvcTests.netsvc, "browse", "_printer._sub._http._tcp", "--domain", "home.arpa",
            "--dns-server", "127.0.0.1:\(port)", "--resolve", "--terminate",
        ]).finish()
        XCTAssertTrue(
            bySubtype.contains("Browse Sub") && bySubtype.contains(":8083"),
            "a subtype lists its instances: \(bySubtype)")
        XCTAssertFalse(bySubtype.contains("Browse One"), bySubtype)
        try await subtype.stop()

        let follow = try Foreign([
            NetsvcTests.netsvc, "browse", "_http._tcp", "--domain", "home.arpa", "--dns-server", "127.0.0.1:\(port)",
        ])
        defer { follow.stop() }
        XCTAssertTrue(follow.waitForOutput(containing: "Browse One", seconds: 10), follow.output)
        let second = try WideAreaPublisher(
            name: "Browse Two", type: "_http._tcp", domain: "home.arpa", port: 8082, txt: [],
            host: "two", addresses: [], key: try key, nameServer: nameServer, ttl: 1)
        try await withDeadline(20, "publishing") { _ = try await second.publish() }
        XCTAssertTrue(
            follow.waitForOutput(containing: "Browse Two", seconds: 10),
            "a new service is seen at the next TTL: \(follow.output)")
        try await first.stop()
        XCTAssertTrue(
            follow.waitForOutput(containing: "- ", seconds: 10), "a removed service is reported: \(follow.output)")
        XCTAssertTrue(
            follow.output.split(separator: "\n").contains { $0.contains("Browse One") && $0.contains("-") },
            follow.output)
        try await second.stop()
    }

    func testServiceBrowserResolveAndTXTMonitorOverUnicastFollowChanges() async throws {
        let dns = WideAreaBrowsing(nameServer: nameServer)
        let first = try WideAreaPublisher(
            name: "Uni One", type: "_http._tcp", domain: "home.arpa", port: 8091,
            txt: [Array("k=1".utf8)], host: "uni", addresses: [SocketAddress.literal("198.18.0.21", port: 0)!],
            key: try key, nameServer: nameServer, ttl: 1)
        try await withDeadline(20, "publishing") { _ = try await first.publish() }
        let one = DiscoveredService(name: "Uni One", type: "_http._tcp", domain: "home.arpa")
        let resolved = try await withDeadline(20, "resolve") { try await one.resolve(wideArea: dns) }
        XCTAssertEqual(resolved.hostName, "uni.home.arpa")
        XCTAssertEqual(resolved.port, 8091)
        XCTAssertEqual(resolved.txtRecord.string(for: "k"), "1")
        XCTAssertEqual(resolved.addresses.map(\.host), ["198.18.0.21"])

        // The TXT record now, then its change (asked again at its TTL of 1 s).
        let texts = try await withDeadline(30, "TXT changes") {
            var values: [String?] = []
            for try await record in try one.txtRecordUpdates(wideArea: dns) {
                values.append(record.string(for: "k"))
                if values.count == 2 { break }
                try await first.updateText([Array("k=2".utf8)])
            }
            return values
        }
        XCTAssertEqual(texts, ["1", "2"])

        // What is there, then a service that comes and one that goes, at the next looks.
        let second = try WideAreaPublisher(
            name: "Uni Two", type: "_http._tcp", domain: "home.arpa", port: 8092, txt: [],
            host: "uni", addresses: [], key: try key, nameServer: nameServer, ttl: 1)
        let two = DiscoveredService(name: "Uni Two", type: "_http._tcp", domain: "home.arpa")
        let seen = try await withDeadline(40, "browse") {
            var seen: [(changes: [BrowseChange], services: Set<DiscoveredService>, complete: Bool)] = []
            for try await update in try ServiceBrowser(type: "_http._tcp", domain: "home.arpa", wideArea: dns) {
                seen.append((update.changes, update.services, update.isComplete))
                switch seen.count {
                case 1: _ = try await second.publish()
                case 2: try await first.stop()
                default: return seen
                }
            }
            return seen
        }
        XCTAssertEqual(seen.map(\.changes), [[.added(one)], [.added(two)], [.removed(one)]])
        XCTAssertEqual(seen.map(\.services), [[one], [one, two], [two]])
        XCTAssertEqual(seen.map(\.complete), [true, true, true])
        try await second.stop()

        // The link is not browsed this way; a silent server fails the first look.
        XCTAssertThrowsError(try ServiceBrowser(type: "_http._tcp", domain: "local", wideArea: dns)) { error in
            XCTAssertEqual((error as? DiscoveryError)?.code, .invalidDomain, "\(error)")
        }
        let silent = WideAreaBrowsing(nameServer: SocketAddress.literal("127.0.0.1", port: UInt16(freeLoopbackPort()))!)
        do {
            _ = try await withDeadline(40, "silent server") {
                for try await update in try ServiceBrowser(type: "_http._tcp", domain: "home.arpa", wideArea: silent) {
                    return update.services
                }
                return []
            }
            XCTFail("a silent server gave a list")
        } catch let error as DiscoveryError {
            XCTAssertEqual(error.code, .serverUnreachable, "\(error)")
        }
        do {
            _ = try await withDeadline(40, "silent resolve") { try await one.resolve(wideArea: silent, timeout: 2) }
            XCTFail("a silent server resolved")
        } catch let error as DiscoveryError {
            XCTAssertTrue([.timedOut, .serverUnreachable].contains(error.code), "\(error)")
        }
    }

    func testNetsvcMonitorFollowsAWideAreaTXTRecord() async throws {
        let service = try WideAreaPublisher(
            name: "Watched", type: "_http._tcp", domain: "home.arpa", port: 8093,
            txt: [Array("state=idle".utf8)], host: "w", addresses: [], key: try key,
            nameServer: nameServer, ttl: 1)
        try await withDeadline(20, "publishing") { _ = try await service.publish() }
        let monitor = try Foreign([
            NetsvcTests.netsvc, "monitor", "Watched", "_http._tcp", "--domain", "home.arpa",
            "--dns-server", "127.0.0.1:\(port)", "--json",
        ])
        defer { monitor.stop() }
        XCTAssertTrue(monitor.waitForOutput(containing: #""state":"idle""#, seconds: 15), monitor.output)
        try await service.updateText([Array("state=printing".utf8)])
        XCTAssertTrue(monitor.waitForOutput(containing: #""state":"printing""#, seconds: 15), monitor.output)
        try await service.stop()
        XCTAssertTrue(
            monitor.waitForOutput(containing: #""txt":{}"#, seconds: 15),
            "a removed record prints empty: \(monitor.output)")
        let local = try Foreign([NetsvcTests.netsvc, "monitor", "X", "_http._tcp", "--dns-server", "127.0.0.1"])
        XCTAssertTrue(local.waitForExit(seconds: 10))
        XCTAssertEqual(local.process.terminationStatus, 2, local.output)
        // A name server that never answers: the first look fails, and so does netsvc (1).
        let silent = try Foreign([
            NetsvcTests.netsvc, "monitor", "Watched", "_http._tcp", "--domain", "home.arpa",
            "--dns-server", "127.0.0.1:\(freeLoopbackPort())",
        ])
        XCTAssertTrue(silent.waitForExit(seconds: 30), "a silent server must not hang the monitor: \(silent.output)")
        XCTAssertEqual(silent.process.terminationStatus, 1, silent.output)
    }

    func testNetServicePublishesInAWideAreaDomainAsOnApple() throws {
        let service = NetService(domain: "home.arpa.", type: "_http._tcp.", name: "Apple Wide", port: 8096)
        XCTAssertTrue(service.setTXTRecord(NetService.data(fromTXTRecord: ["v": Data("1".utf8)])))
        service.wideAreaPublishing = WideAreaPublishing(
            key: try key, nameServer: nameServer, hostName: "apple-host",
            addresses: [SocketAddress.literal("198.18.0.31", port: 0)!])
        let recorder = ServiceRecorder()
        service.delegate = recorder
        let published = recorder.expect("didPublish", self)
        service.publish()
        wait(for: [published], timeout: 20)
        XCTAssertEqual(recorder.events.prefix(2), ["willPublish", "didPublish"])
        XCTAssertEqual(service.name, "Apple Wide")
        XCTAssertEqual(try dig("Apple Wide._http._tcp.home.arpa", "SRV"), ["0 0 8096 apple-host.home.arpa."])
        XCTAssertEqual(try dig("Apple Wide._http._tcp.home.arpa", "TXT"), [#""v=1""#])
        XCTAssertEqual(try dig("apple-host.home.arpa", "A"), ["198.18.0.31"])

        // A live TXT change reaches the zone.
        XCTAssertTrue(service.setTXTRecord(NetService.data(fromTXTRecord: ["v": Data("2".utf8)])))
        try eventually(timeout: 10, interval: 0) {
            RunLoop.current.run(until: Date().addingTimeInterval(0.05))  // the service's updates come on it
            return try dig("Apple Wide._http._tcp.home.arpa", "TXT") == [#""v=2""#]
        }
        XCTAssertEqual(try dig("Apple Wide._http._tcp.home.arpa", "TXT"), [#""v=2""#])

        // The same name again, with .noAutoRename: a collision, as on the link.
        let twin = NetService(domain: "home.arpa.", type: "_http._tcp.", name: "Apple Wide", port: 8097)
        twin.wideAreaPublishing = service.wideAreaPublishing
        let twinRecorder = ServiceRecorder()
        twin.delegate = twinRecorder
        let refused = twinRecorder.expect("didNotPublish", self)
        twin.publish(options: .noAutoRename)
        wait(for: [refused], timeout: 20)
        XCTAssertEqual(twinRecorder.errors, [NetService.ErrorCode.collisionError.rawValue])
        XCTAssertEqual(twin.lastError?.code, .collision)

        // stop() removes the records.
        let stopped = recorder.expect("didStop", self)
        service.stop()
        wait(for: [stopped], timeout: 10)
        try eventually(timeout: 10, interval: 0) {
            RunLoop.current.run(until: Date().addingTimeInterval(0.05))
            return try dig("Apple Wide._http._tcp.home.arpa", "SRV").isEmpty
        }
        XCTAssertEqual(try dig("Apple Wide._http._tcp.home.arpa", "SRV"), [], "stop() withdraws the records")
    }

    func testNetsvcChangesThePublishedTXTRecordOnSIGHUP() throws {
        let file = directory + "/status.txt"
        try "# the printer's state\nstate=idle\n".write(toFile: file, atomically: true, encoding: .utf8)
        let publish = try Foreign([
            NetsvcTests.netsvc, "publish", "Hup", "_demo._tcp", "4243", "v=1", "--txt-file", file,
            "--domain", "home.arpa", "--tsig-key", directory + "/salut-publisher.key",
            "--dns-server", "127.0.0.1:\(port)",
        ])
        defer { publish.stop() }
        XCTAssertTrue(publish.waitForOutput(containing: "published", seconds: 20), publish.output)
        XCTAssertEqual(try dig("Hup._demo._tcp.home.arpa", "TXT"), [#""v=1" "state=idle""#])
        try "state=printing\n".write(toFile: file, atomically: true, encoding: .utf8)
        XCTAssertEqual(kill(publish.process.processIdentifier, SIGHUP), 0)
        XCTAssertTrue(publish.waitForOutput(containing: "changed", seconds: 10), publish.output)
        try eventually(timeout: 10, interval: 0.05) {
            try dig("Hup._demo._tcp.home.arpa", "TXT") == [#""v=1" "state=printing""#]
        }
        XCTAssertEqual(try dig("Hup._demo._tcp.home.arpa", "TXT"), [#""v=1" "state=printing""#])
        // A bad line is named by its number; the record stays as it was.
        try "state=printing\n=no key\n".write(toFile: file, atomically: true, encoding: .utf8)
        XCTAssertEqual(kill(publish.process.processIdentifier, SIGHUP), 0)
        XCTAssertTrue(publish.waitForOutput(containing: "line 2", seconds: 10), publish.output)
        // A file that cannot be read keeps the record as it was, and says why.
        try FileManager.default.removeItem(atPath: file)
        XCTAssertEqual(kill(publish.process.processIdentifier, SIGHUP), 0)
        XCTAssertTrue(publish.waitForOutput(containing: "No such file", seconds: 10), publish.output)
        XCTAssertEqual(try dig("Hup._demo._tcp.home.arpa", "TXT"), [#""v=1" "state=printing""#])

        // Without --txt-file, SIGHUP (a closed terminal) withdraws the service like SIGTERM.
        let plain = try Foreign([
            NetsvcTests.netsvc, "publish", "Hung Up", "_demo._tcp", "4244", "--domain", "home.arpa",
            "--tsig-key", directory + "/salut-publisher.key", "--dns-server", "127.0.0.1:\(port)",
        ])
        XCTAssertTrue(plain.waitForOutput(containing: "published", seconds: 20), plain.output)
        XCTAssertEqual(
            try dig("Hung Up._demo._tcp.home.arpa", "SRV"),
            ["0 0 4244 " + WideAreaPublishing.localHostName().lowercased() + ".home.arpa."])
        XCTAssertEqual(kill(plain.process.processIdentifier, SIGHUP), 0)
        XCTAssertTrue(plain.waitForExit(seconds: 20), plain.output)
        XCTAssertEqual(plain.process.terminationStatus, 0, "a withdrawal, not a death by the signal: \(plain.output)")
        XCTAssertEqual(try dig("Hung Up._demo._tcp.home.arpa", "SRV"), [], "the records went with the hang-up")
    }

    func testTheRemovalAfterAnUnansweredRegistrationRemovesOnlyOurOwnRecords() async throws {
        let ours = try publisher("Kept Or Not")
        try await withDeadline(20, "publishing") { _ = try await ours.publish() }
        let signer = TSIG(key: try key)
        let server = nameServer
        @Sendable func send(_ message: DNSMessage) async throws -> UInt16 {
            let (bytes, mac) = signer.sign(message, at: UInt64(Date().timeIntervalSince1970))
            let (answer, _) = try await DNSExchange(server: server).exchange(bytes)
            return try signer.verify(answer: answer, requestMAC: mac, at: UInt64(Date().timeIntervalSince1970)).rcode
        }
        // Another service of the same name (another port): its conditional removal finds
        // someone else's SRV, and the server changes nothing.
        let other = try ServiceUpdates(
            name: "Kept Or Not", type: "_http._tcp", subtypes: ["_printer"], zone: "home.arpa",
            host: "salut-test", addresses: [], port: 9999, txt: [])
        let refused = try await withDeadline(20, "removal") { try await send(other.removalIfOurs(id: 1)) }
        XCTAssertEqual(DNSResponseCode.name(refused), "NXRRSET")
        XCTAssertEqual(try dig("Kept Or Not._http._tcp.home.arpa", "SRV"), ["0 0 8080 salut-test.home.arpa."])
        // The same service's: its records go, PTRs and all.
        let same = try ServiceUpdates(
            name: "Kept Or Not", type: "_http._tcp", subtypes: ["_printer"], zone: "home.arpa",
            host: "salut-test", addresses: [], port: 8080, txt: [])
        let removed = try await withDeadline(20, "removal") { try await send(same.removalIfOurs(id: 2)) }
        XCTAssertEqual(removed, DNSResponseCode.noError)
        XCTAssertEqual(try dig("Kept Or Not._http._tcp.home.arpa", "SRV"), [])
        XCTAssertEqual(try dig("_http._tcp.home.arpa", "PTR"), [])
        XCTAssertEqual(try dig("_printer._sub._http._tcp.home.arpa", "PTR"), [])
    }

    func testARegistrationWhoseAnswersAreLostLeavesNothingInTheZone() async throws {
        // A relay that passes every message on to BIND and never brings an answer back: BIND
        // applies the registration, and the publisher hears nothing.
        let relay = try Foreign([
            "python3", "-c",
            """
            import socket, sys
            inbound = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); inbound.bind(("127.0.0.1", 0))
            print(inbound.getsockname()[1], flush=True)
            upstream = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            while True:
                data, _ = inbound.recvfrom(65535); upstream.sendto(data, ("127.0.0.1", \(port)))
                if len(data) > 3 and (data[2] >> 3) & 15 == 5: print("update", data[0] * 256 + data[1], flush=True)
            """,
        ])
        defer { relay.stop() }
        XCTAssertTrue(relay.waitForOutput(containing: "\n", seconds: 10), relay.output)
        let relayPort = UInt16(relay.output.split(separator: "\n").first ?? "") ?? 0
        let service = try WideAreaPublisher(
            name: "Unanswered", type: "_http._tcp", domain: "home.arpa", port: 8181, txt: [],
            host: "lost", addresses: [], key: try key,
            server: SocketAddress.literal("127.0.0.1", port: relayPort)!)
        do {
            _ = try await withDeadline(60, "publishing") { try await service.publish() }
            XCTFail("published without an answer")
        } catch let error as DiscoveryError {
            XCTAssertEqual(error.code, .serverUnreachable, "\(error)")
        }
        // The registration reached BIND, and so did the conditional removal that followed it
        // (two updates, each sent again for want of an answer); nothing of it is left.
        let updates = Set(relay.output.split(separator: "\n").filter { $0.hasPrefix("update ") })
        XCTAssertEqual(updates.count, 2, relay.output)
        XCTAssertEqual(
            try dig("Unanswered._http._tcp.home.arpa", "SRV"), [], "an unanswered registration left its records")
        XCTAssertEqual(try dig("_http._tcp.home.arpa", "PTR").filter { $0.contains("Unanswered") }, [])
    }

    func testNoServerIsAClearError() async throws {
        let silent = SocketAddress.literal("127.0.0.1", port: UInt16(freeLoopbackPort()))!
        let service = try WideAreaPublisher(
            name: "X", type: "_http._tcp", domain: "home.arpa", port: 1, txt: [], host: "h",
            addresses: [], key: try key, server: silent)
        await assertFails(service, code: .serverUnreachable, mentioning: "127.0.0.1")
    }

    private func assertFails(
        _ service: @autoclosure () throws -> WideAreaPublisher, code: DiscoveryError.Code, mentioning text: String,
        file: StaticString = #filePath, line: UInt = #line
    ) async {
        do {
            let service = try service()
            _ = try await withDeadline(30, "publishing") { try await service.publish() }
            XCTFail("published", file: file, line: line)
        } catch let error as DiscoveryError {
            XCTAssertEqual(error.code, code, "\(error)", file: file, line: line)
            XCTAssertTrue("\(error)".contains(text), "\(error)", file: file, line: line)
        } catch {
            XCTFail("\(error)", file: file, line: line)
        }
    }
}
