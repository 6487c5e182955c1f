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
    /// within 15 s, on a link that still loses 10 % each way, and keeps the one that stays.
    func testWithdrawnServicesWhoseGoodbyesAreLostLeaveBrowseVerifyWithinFifteenSeconds() throws {
        try LabHost.requireLab()
        let h1 = LabHost(name: "h1"), h2 = LabHost(name: "h2")
        defer { try? setLoss(h1, 0) }
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
        try setLoss(h1, 10)
        let watch = try h2.start([Self.netsvc, "browse", type, "--verify", "--json"])
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
            XCTAssertEqual(
                removal["reason"] as? String, "stopped answering; avahi-daemon may still list it", "\(removal)")
        }
        let cache = try h2.run(["avahi-browse", "-pt", type])
        XCTAssertTrue(cache.contains("Leaves"), "the goodbyes were lost: h2's daemon still lists them: \(cache)")
        let last = events(watch.output).last { $0["name"] as? String == "Stays" }
        XCTAssertEqual(last?["event"] as? String, "add", "the service that stays is listed: \(watch.output)")
    }

    /// A send across a link losing 5 % each way completes byte-exact while one address holds 64
    /// idle TCP connections and 50 TLS ClientHellos that never go on (opening each again when
    /// it is cut) against the receiver; after it, the receiver is back to its descriptors and
    /// threads.
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
        let before = (descriptors: Self.count("/proc/\(pid)/fd"), threads: Self.count("/proc/\(pid)/task"))
        let identity = try h1.run([Self.peerxfer, "identity", "--config", folder + "/h1", "--json"], timeout: 30)
        let key = identity.components(separatedBy: "\"key\":\"").dropFirst().first.map { String($0.prefix(64)) } ?? ""
        XCTAssertEqual(key.count, 64, identity)

        try setLoss(h1, 5)
        let attack = try h2.start([
            "python3", "-c", Self.flood, "198.18.0.1", String(port ?? 0), "64", "50", "90",
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
        print("lab loss: 8 MiB under 5 % loss and the flood: \(done)")

        attack.stop()
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

    private static func count(_ folder: String) -> Int {
        (try? FileManager.default.contentsOfDirectory(atPath: folder).count) ?? -1
    }

    /// Holds IDLE plain TCP connections and HELLOS that sent a TLS ClientHello and nothing
    /// more, against HOST:PORT, opening each again when the receiver cuts it, for SECONDS.
    private static let flood = """
        import socket, ssl, sys, time, select
        host, port, idle, hellos, seconds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        def idle_one():
            return socket.create_connection((host, port), timeout=5)
        def hello_one():
            raw = socket.create_connection((host, port), timeout=5)
            tls = context.wrap_socket(raw, do_handshake_on_connect=False)
            tls.setblocking(False)
            try:
                tls.do_handshake()
            except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
                pass
            return tls
        held = {}
        def open_one(kind):
            try:
                s = idle_one() if kind == 'idle' else hello_one()
                held[s] = kind
            except OSError:
                pass
        for _ in range(idle): open_one('idle')
        for _ in range(hellos): open_one('hello')
        print('holding', len(held), flush=True)
        reopened = 0
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            ready, _, _ = select.select(list(held), [], [], 0.5)
            for s in ready:
                try:
                    data = s.recv(4096)
                except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
                    continue
                except OSError:
                    data = b''
                if not data:
                    kind = held.pop(s)
                    s.close()
                    open_one(kind)
                    reopened += 1
            missing = idle + hellos - len(held)
            for _ in range(missing): open_one('idle')
        print('reopened', reopened, flush=True)
        """
}
