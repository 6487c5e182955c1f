import Foundation
import Salut
import SalutStreams
import SalutTestSupport
import XCTest

/// Discovery beyond one link: two subnets joined by a router that forwards no multicast
/// (`Scripts/lan-lab up-routed`), a real BIND 9 on the router serving `home.arpa`. A service
/// published from subnet A by signed DNS updates is found, resolved and connected to from
/// subnet B, where mDNS cannot reach.
final class LabWideAreaTests: XCTestCase {
    static let netsvc = BuiltProduct.path("netsvc")
    /// The TSIG key of the lab's DNS server: `lan-lab up-routed` records its folder.
    static var key: String {
        let state = ProcessInfo.processInfo.environment["SALUT_LAB_DIR"] ?? "/run/salut-lab"
        let folder =
            (try? String(contentsOfFile: state + "/dns-dir", encoding: .utf8))?.trimmingCharacters(
                in: .whitespacesAndNewlines) ?? ""
        return folder + "/salut-publisher.key"
    }

    override func setUpWithError() throws {
        guard ProcessInfo.processInfo.environment["SALUT_ROUTED_LAB"] == "1" else {
            throw XCTSkip(
                "routed-lab tests run from Scripts/test, which brings up the two-subnet lab (SALUT_ROUTED_LAB=1)")
        }
    }

    private let a1 = LabHost(name: "a1"), b1 = LabHost(name: "b1")

    /// The zone's records other than those it starts with, seen from subnet B through a zone
    /// transfer from the router.
    private func zoneFromB() throws -> [String] {
        let out = try b1.run(["dig", "+noall", "+answer", "+time=2", "@198.18.2.1", "home.arpa", "AXFR"])
        return out.split(separator: "\n").map {
            $0.split(whereSeparator: { $0 == " " || $0 == "\t" }).joined(separator: " ")
        }
        .filter {
            !$0.isEmpty && !$0.contains(" SOA ") && !$0.contains(" NS ") && !$0.hasPrefix("ns.home.arpa.")
                && !$0.contains("._dns-sd._udp.") && !$0.hasPrefix("_dns-update.")
        }
        .sorted()
    }

    func testAServiceOnSubnetAIsFoundResolvedAndConnectedFromSubnetB() throws {
        // A type of its own each run: avahi-daemon keeps wide-area answers (the type's PTR set
        // included) for their TTL, so a second run would see the first one's list.
        let type = "_wa\(UUID().uuidString.prefix(6).lowercased())._tcp"
        let name = "Across Subnets"
        let escaped = name.replacingOccurrences(of: " ", with: "\\032")
        let publisher = try a1.start([
            Self.netsvc, "publish", name, type, "0", "--listen",
            "--exec", "echo hello-from-a1; cat", "k=v", "--domain", "home.arpa", "--tsig-key", Self.key,
        ])
        defer { publisher.stop() }
        XCTAssertTrue(publisher.waitForOutput(containing: "(listening)", seconds: 20), publisher.output)

        // Salut's own unicast browse from subnet B, resolved.
        let unicast = try b1.run([
            Self.netsvc, "browse", type, "--domain", "home.arpa", "--dns-server", "198.18.2.1",
            "--resolve", "--terminate", "--json",
        ])
        XCTAssertTrue(unicast.contains("\"name\":\"\(name)\""), unicast)
        XCTAssertTrue(unicast.contains("198.18.1.10"), "subnet A's address: \(unicast)")
        XCTAssertTrue(unicast.contains(#""txt":{"k":"v"}"#), unicast)

        // avahi-daemon's wide-area browse on subnet B finds it through the same server.
        let avahi = try b1.run(["avahi-browse", "-d", "home.arpa", "-r", "-t", "-p", type])
        XCTAssertTrue(avahi.contains("=;n/a;n/a;\(escaped);\(type);home.arpa;"), avahi)
        XCTAssertTrue(avahi.contains("198.18.1.10"), avahi)

        // Salut's ServiceBrowser through that same avahi-daemon path.
        let viaAvahi = try b1.run(
            [Self.netsvc, "browse", type, "--domain", "home.arpa", "--resolve", "--terminate"], timeout: 30)
        XCTAssertTrue(viaAvahi.contains(name) && viaAvahi.contains("198.18.1.10"), viaAvahi)

        // mDNS does not cross the router: on B's own link the service is not there.
        let link = try b1.run([Self.netsvc, "browse", type, "--terminate"])
        XCTAssertFalse(link.contains(name), "multicast crossed the router: \(link)")

        // Connected to by name from subnet B, through the wide-area domain.
        let connected = try b1.run(
            ["/bin/sh", "-c", "echo hi-from-b1 | \(Self.netsvc) connect '\(name)' \(type) --domain home.arpa"],
            timeout: 30)
        XCTAssertTrue(connected.contains("hello-from-a1") && connected.contains("hi-from-b1"), connected)

        // BIND holds exactly what was written: PTR, SRV, TXT and the host's address.
        let records = try zoneFromB()
        XCTAssertEqual(records.count, 4, records.joined(separator: "\n"))
        XCTAssertTrue(
            records.contains { $0.hasPrefix("\(type).home.arpa.") && $0.contains(" PTR ") },
            records.joined(separator: "\n"))
        XCTAssertTrue(records.contains { $0.contains(" A 198.18.1.10") }, records.joined(separator: "\n"))

        // Stopped on A, gone for B.
        publisher.stop()
        XCTAssertTrue(publisher.waitForExit(seconds: 15))
        let after = try b1.run([
            Self.netsvc, "browse", type, "--domain", "home.arpa", "--dns-server", "198.18.2.1", "--terminate",
        ])
        XCTAssertFalse(after.contains(name), after)
        let left = try zoneFromB()
        XCTAssertTrue(left.allSatisfy { $0.contains(" IN A ") }, "only the host's address is left: \(left)")
    }

    func testAWrongKeyFromSubnetAIsRefusedAndWritesNothing() throws {
        let wrong = NSTemporaryDirectory() + "salut-wrong-\(UUID().uuidString.prefix(6)).key"
        try #"key "salut-publisher" { algorithm hmac-sha256; secret "d3Jvbmcgc2VjcmV0"; };"#.write(
            toFile: wrong, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(atPath: wrong) }
        let job = try a1.start([
            Self.netsvc, "publish", "Refused", "_salutwa._tcp", "9", "--domain", "home.arpa", "--tsig-key", wrong,
        ])
        XCTAssertTrue(job.waitForExit(seconds: 30), job.output)
        XCTAssertEqual(job.process.terminationStatus, 1)
        XCTAssertTrue(job.output.contains("BADSIG"), job.output)
        let zone = try zoneFromB()
        XCTAssertFalse(zone.contains { $0.contains("Refused") }, "nothing of the refused service was written: \(zone)")
    }

    func testATXTChangeAndTheRemovalOnSubnetAReachSubnetB() throws {
        let type = "_wt\(UUID().uuidString.prefix(6).lowercased())._tcp"
        let folder = NSTemporaryDirectory() + "salut-lab-txt-\(UUID().uuidString.prefix(6))"
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let file = folder + "/status.txt"
        try "state=idle\n".write(toFile: file, atomically: true, encoding: .utf8)
        let publisher = try a1.start([
            Self.netsvc, "publish", "Status Board", type, "7070", "--txt-file", file,
            "--domain", "home.arpa", "--tsig-key", Self.key,
        ])
        defer { publisher.stop() }
        XCTAssertTrue(publisher.waitForOutput(containing: "published", seconds: 20), publisher.output)

        // B looks by unicast DNS: the record's TTL (120 s) is longer than this test, so B asks
        // again until the change shows rather than waiting for a monitor's next look.
        let first = try b1.run([
            Self.netsvc, "browse", type, "--domain", "home.arpa", "--dns-server", "198.18.2.1",
            "--resolve", "--terminate", "--json",
        ])
        XCTAssertTrue(first.contains(#""txt":{"state":"idle"}"#), first)
        try "state=printing\n".write(toFile: file, atomically: true, encoding: .utf8)
        XCTAssertEqual(kill(publisher.process.processIdentifier, SIGHUP), 0)
        XCTAssertTrue(publisher.waitForOutput(containing: "changed", seconds: 10), publisher.output)
        var seen = ""
        try eventually(timeout: 15, interval: 0) {
            seen = try b1.run([
                Self.netsvc, "browse", type, "--domain", "home.arpa", "--dns-server", "198.18.2.1",
                "--resolve", "--terminate", "--json",
            ])
            return seen.contains(#""state":"printing""#)
        }
        XCTAssertTrue(seen.contains(#""txt":{"state":"printing"}"#), "the change reached subnet B: \(seen)")

        // Withdrawn on A: gone for B, and the zone keeps only the host's address.
        publisher.stop()
        XCTAssertTrue(publisher.waitForExit(seconds: 15))
        let after = try b1.run([
            Self.netsvc, "browse", type, "--domain", "home.arpa", "--dns-server", "198.18.2.1", "--terminate", "--json",
        ])
        XCTAssertFalse(after.contains("Status Board"), after)
        XCTAssertTrue(try zoneFromB().allSatisfy { $0.contains(" IN A ") }, "only the host's address is left")
    }

    func testPeerxferSendsAcrossTheSubnetsByBothPaths() throws {
        let peerxfer = BuiltProduct.path("peerxfer")
        let folder = NSTemporaryDirectory() + "salut-lab-px-\(UUID().uuidString.prefix(6))"
        try FileManager.default.createDirectory(atPath: folder + "/out", withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: folder) }
        var data = Data(count: 3 << 20)
        data.withUnsafeMutableBytes { raw in
            for i in 0..<raw.count { raw[i] = UInt8(truncatingIfNeeded: i &* 7 &+ i >> 11) }
        }
        try data.write(to: URL(fileURLWithPath: folder + "/out/report.bin"))
        try Data("via avahi\n".utf8).write(to: URL(fileURLWithPath: folder + "/out/note.txt"))
        let name = "Inbox \(UUID().uuidString.prefix(4))"
        let receiver = try a1.start([
            peerxfer, "serve", "--name", name, "--inbox", folder + "/inbox", "--config", folder + "/a1",
            "--accept", "all", "--domain", "home.arpa", "--tsig-key", Self.key,
        ])
        defer { receiver.stop() }
        XCTAssertTrue(receiver.waitForOutput(containing: "serving", seconds: 30), receiver.output)

        // From B by unicast DNS to the router's server: found, key checked, sent, verified.
        let identity = try a1.run([peerxfer, "identity", "--config", folder + "/a1", "--json"], timeout: 30)
        let key = identity.components(separatedBy: "\"key\":\"").dropFirst().first.map { String($0.prefix(64)) } ?? ""
        XCTAssertEqual(key.count, 64, identity)
        let unicast = try b1.run(
            [
                peerxfer, "send", folder + "/out/report.bin", "--to", name, "--domain", "home.arpa",
                "--dns-server", "198.18.2.1", "--config", folder + "/b1", "--json", "--wait", "15",
                "--expect-key", key,
            ], timeout: 60)
        XCTAssertTrue(unicast.contains("\"event\":\"done\"") && unicast.contains("\"verified\":1"), unicast)
        XCTAssertEqual(FileManager.default.contents(atPath: folder + "/inbox/report.bin"), data)
        // And through B's avahi-daemon, set up to browse home.arpa wide-area.
        let avahi = try b1.run(
            [
                peerxfer, "send", folder + "/out/note.txt", "--to", name, "--domain", "home.arpa",
                "--config", folder + "/b1", "--json", "--wait", "30",
            ], timeout: 60)
        XCTAssertTrue(avahi.contains("\"verified\":1"), avahi)
        XCTAssertEqual(FileManager.default.contents(atPath: folder + "/inbox/note.txt"), Data("via avahi\n".utf8))
        // On B's own link, mDNS finds no such receiver: it is only in the zone.
        let link = try b1.run(
            [peerxfer, "send", folder + "/out/note.txt", "--to", name, "--config", folder + "/b1", "--wait", "2"],
            timeout: 30)
        XCTAssertTrue(
            link.contains("answered on the link within 2 seconds; it is paired in home.arpa: add --domain home.arpa"),
            link)
    }

    func testAPeerSessionStreamTaskOnSubnetBReachesAServiceOnSubnetAByName() throws {
        let type = "_ws\(UUID().uuidString.prefix(6).lowercased())._tcp"
        let publisher = try a1.start([
            Self.netsvc, "publish", "Session Across", type, "0", "--listen",
            "--exec", "echo hello-from-a1; cat", "--domain", "home.arpa", "--tsig-key", Self.key,
        ])
        defer { publisher.stop() }
        XCTAssertTrue(publisher.waitForOutput(containing: "(listening)", seconds: 20), publisher.output)
        // The session runs on b1: this very test binary, run there for the half below.
        let tests = BuiltProduct.testBundle
        let inner = try b1.run(
            [
                "env", "SALUT_LAB_INNER=b1", "SALUT_LAB_TYPE=\(type)", tests,
                "LabTests.LabWideAreaTests/testStreamTaskByNameFromInsideB1",
            ], timeout: 90)
        XCTAssertTrue(inner.contains("stream task reached: hello-from-a1"), inner)
        XCTAssertTrue(inner.contains("Executed 1 test, with 0 failures"), inner)
        // Apple's NetServiceBrowser on b1 lists the domain, finds the service in it and resolves it.
        let apple = try b1.run(
            [
                "env", "SALUT_LAB_INNER=b1", "SALUT_LAB_TYPE=\(type)", tests,
                "LabTests.LabWideAreaTests/testNetServiceBrowserFromInsideB1",
            ], timeout: 90)
        XCTAssertTrue(apple.contains("NetServiceBrowser found: Session Across"), apple)
        XCTAssertTrue(apple.contains("Executed 1 test, with 0 failures"), apple)
        // And netsvc lists the domain the network announces (b._dns-sd._udp in the zone).
        XCTAssertTrue(try b1.run([Self.netsvc, "domains"]).split(separator: "\n").contains("home.arpa"))
    }

    /// Run inside b1 by the test above: Apple's `NetServiceBrowser` lists `home.arpa` among the
    /// browsable domains, finds the service in it, and `NetService` resolves it to subnet A.
    func testNetServiceBrowserFromInsideB1() throws {
        let environment = ProcessInfo.processInfo.environment
        guard environment["SALUT_LAB_INNER"] == "b1", let type = environment["SALUT_LAB_TYPE"] else {
            throw XCTSkip(
                "runs inside b1, started by testAPeerSessionStreamTaskOnSubnetBReachesAServiceOnSubnetAByName")
        }
        let loop = RunLoopThread()
        defer { loop.stop() }
        let heard = BrowserHeard()
        let domains = NetServiceBrowser()
        domains.delegate = heard
        domains.schedule(in: loop.runLoop, forMode: .default)
        domains.searchForBrowsableDomains()
        XCTAssertTrue(heard.wait { $0.domains.contains("home.arpa.") }, "domains: \(heard.snapshot.domains)")
        domains.stop()

        let browser = NetServiceBrowser()
        browser.delegate = heard
        browser.schedule(in: loop.runLoop, forMode: .default)
        browser.searchForServices(ofType: type + ".", inDomain: "home.arpa.")
        XCTAssertTrue(
            heard.wait { $0.services.contains { $0.name == "Session Across" } },
            "services: \(heard.snapshot.services.map(\.name))")
        browser.stop()
        let found = try XCTUnwrap(heard.snapshot.services.first { $0.name == "Session Across" })
        XCTAssertEqual(found.domain, "home.arpa.")
        let resolver = ResolveHeard()
        found.delegate = resolver
        found.schedule(in: loop.runLoop, forMode: .default)
        found.resolve(withTimeout: 15)
        XCTAssertTrue(resolver.wait(), "not resolved")
        let addresses = (found.addresses ?? []).compactMap(SocketAddress.init).map(\.host)
        XCTAssertTrue(addresses.contains("198.18.1.10"), "\(addresses)")
        print("NetServiceBrowser found: \(found.name) at \(addresses.joined(separator: ","))")
        found.stop()
    }

    /// The half of the test above that runs inside b1 (skipped anywhere else): a PeerSession
    /// stream task to the service by name in home.arpa, resolved through b1's avahi-daemon's
    /// wide-area path, across the router.
    func testStreamTaskByNameFromInsideB1() async throws {
        let environment = ProcessInfo.processInfo.environment
        guard environment["SALUT_LAB_INNER"] == "b1", let type = environment["SALUT_LAB_TYPE"] else {
            throw XCTSkip(
                "runs inside b1, started by testAPeerSessionStreamTaskOnSubnetBReachesAServiceOnSubnetAByName")
        }
        let session = PeerSession(configuration: .ephemeral)
        defer { session.invalidateAndCancel() }
        let task = session.streamTask(with: DiscoveredService(name: "Session Across", type: type, domain: "home.arpa"))
        task.resume()
        let (greeting, _) = try await task.readData(ofMinLength: 14, maxLength: 14, timeout: 30)
        try await task.write(Data("echo me\n".utf8), timeout: 10)
        let (echo, _) = try await task.readData(ofMinLength: 8, maxLength: 8, timeout: 10)
        XCTAssertEqual(echo, Data("echo me\n".utf8))
        print("stream task reached: \(String(decoding: greeting.prefix(13), as: UTF8.self))")
        task.cancel()
    }
}

/// What a NetServiceBrowser's delegate heard (from the browser's run loop thread).
private final class BrowserHeard: NSObject, NetServiceBrowserDelegate, @unchecked Sendable {
    // @unchecked: its only state, `heard`, is a `Locked` box.
    struct Snapshot { var domains: [String] = []; var services: [NetService] = [] }
    private let heard = Locked(Snapshot())
    var snapshot: Snapshot { heard.value }

    func netServiceBrowser(_ browser: NetServiceBrowser, didFindDomain domainString: String, moreComing: Bool) {
        heard.withLock { $0.domains.append(domainString) }
    }
    func netServiceBrowser(_ browser: NetServiceBrowser, didFind service: NetService, moreComing: Bool) {
        heard.withLock { $0.services.append(service) }
    }

    /// Waits (at most 30 s) until `predicate` holds for what was heard.
    func wait(until predicate: (Snapshot) -> Bool) -> Bool {
        eventually(timeout: 30, interval: 0.02) { predicate(snapshot) }
    }
}

/// Whether a NetService resolved (from its run loop thread).
private final class ResolveHeard: NSObject, NetServiceDelegate, @unchecked Sendable {
    // @unchecked: `resolved` is a semaphore.
    private let resolved = DispatchSemaphore(value: 0)
    func netServiceDidResolveAddress(_ sender: NetService) { resolved.signal() }
    func wait() -> Bool { resolved.wait(timeout: .now() + 30) == .success }
}
