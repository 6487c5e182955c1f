import Foundation
import Glibc
import SalutTestSupport
import XCTest

/// Hostile LAN peers (Tests/Hostile/hostile.py, Python's `socket` and `ssl`) against
/// `netsvc publish --listen --exec cat`, with and without TLS. Each test asserts what a user
/// of the service would see: good clients are served within a bound while the hostile peers
/// do their worst, and netsvc's descriptors, children, threads and memory come back to where
/// they were once the hostile peers are gone (or cut by the service's limits).
final class HostilePeerTests: XCTestCase {
    let netsvc = NetsvcTests.netsvc
    static let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("Hostile/hostile.py").path
    /// Seconds a good client may take while hostile peers are at work.
    let servedWithin = 5.0

    var certificate: TestCertificate?

    /// A running `netsvc publish --listen --exec cat` and what it uses.
    struct Server {
        let process: Foreign
        let port: Int
        var pid: pid_t { process.process.processIdentifier }
    }

    /// What netsvc holds at a moment.
    struct Usage: CustomStringConvertible {
        var descriptors: Int
        var threads: Int
        var children: Int
        var residentKiB: Int
        var description: String {
            "\(descriptors) descriptors, \(threads) threads, \(children) children, \(residentKiB) KiB resident"
        }
    }

    override func tearDown() {
        certificate = nil
    }

    // MARK: Scenarios

    func testGarbageBytesArePlainTrafficOrAFailedHandshakeAndCostNothingAfter() throws {
        for tls in [false, true] {
            try withServer(tls: tls) { server, baseline in
                let flood = try hostile("garbage", server, count: 50)
                XCTAssertTrue(flood.waitForExit(seconds: 60), flood.output)
                try assertGoodClientsServed(server, tls: tls)
                try assertComesBack(server, to: baseline, "after 50 garbage peers, TLS \(tls)")
            }
        }
    }

    func testClientHelloThenSilenceHoldsNoOneUpAndIsCut() throws {
        try withServer(tls: true) { server, baseline in
            let silent = try hostile("hello-silence", server, count: 100, hold: 30)
            try assertGoodClientsServed(server, tls: true)
            // The handshake bound (1 s here) cuts them while the peer still holds its sockets.
            try assertComesBack(server, to: baseline, "100 ClientHello-then-silence peers, still connected")
            silent.closeInput()
        }
    }

    func testBareConnectThenSilenceHoldsNoOneUp() throws {
        for tls in [false, true] {
            try withServer(tls: tls) { server, baseline in
                let silent = try hostile("silent", server, count: 100, hold: 30)
                try assertGoodClientsServed(server, tls: tls)
                try assertComesBack(server, to: baseline, "100 silent peers, still connected, TLS \(tls)")
                silent.closeInput()
            }
        }
    }

    func testFiveHundredIdleConnectionsWhileGoodClientsAreServed() throws {
        for tls in [false, true] {
            try withServer(tls: tls) { server, baseline in
                let idle = try hostile("silent", server, count: 500, hold: 60)
                try assertGoodClientsServed(server, tls: tls, count: 10)
                idle.closeInput()
                XCTAssertTrue(idle.waitForExit(seconds: 30))
                try assertComesBack(server, to: baseline, "after 500 idle peers, TLS \(tls)")
            }
        }
    }

    func testAClientThatNeverReadsIsCutByTheIdleBound() throws {
        try withServer(tls: false) { server, baseline in
            let stuck = try hostile("never-read", server, count: 20, hold: 60)
            try assertGoodClientsServed(server, tls: false)
            // Its children block writing; nothing moves; the idle bound (3 s) cuts them.
            try assertComesBack(server, to: baseline, "20 peers that never read, still connected")
            stuck.closeInput()
        }
    }

    func testResetsMidTransferLeaveNothingBehind() throws {
        for tls in [false, true] {
            try withServer(tls: tls) { server, baseline in
                let resets = try hostile("reset-mid", server, count: 30)
                XCTAssertTrue(resets.waitForExit(seconds: 60), resets.output)
                try assertGoodClientsServed(server, tls: tls)
                try assertComesBack(server, to: baseline, "after 30 resets mid-transfer, TLS \(tls)")
            }
        }
    }

    func testSIGKILLedClientsLeaveNothingBehind() throws {
        try withServer(tls: false) { server, baseline in
            let victims = try hostile("never-read", server, count: 20, hold: 60)
            kill(victims.process.processIdentifier, SIGKILL)
            XCTAssertTrue(victims.waitForExit(seconds: 10))
            try assertGoodClientsServed(server, tls: false)
            try assertComesBack(server, to: baseline, "after 20 SIGKILLed clients")
        }
    }

    func testTwoThousandConnectCloseCyclesLeaveNothingBehind() throws {
        for tls in [false, true] {
            try withServer(tls: tls) { server, baseline in
                let cycles = try hostile("cycles", server, count: 2000)
                XCTAssertTrue(cycles.waitForExit(seconds: 120), cycles.output)
                // Back to its baseline first: right after the flood, up to --max-connections
                // connections may still be ending (their children exiting), and a newcomer
                // beyond those is refused by design (a flood cannot start children without
                // bound); the CI rehearsal once saw a good client refused then.
                try assertComesBack(server, to: baseline, "after 2,000 connect/close cycles, TLS \(tls)")
                try assertGoodClientsServed(server, tls: tls)
                // More rounds grow nothing: what the first kept was the heap's high water (which
                // moves by several MiB either way from round to round). A leak of 4 KiB a
                // connection would add 16 MiB over the next 4,000.
                let afterFirst = try settledUsage(server)
                for _ in 0..<2 {
                    let again = try hostile("cycles", server, count: 2000)
                    XCTAssertTrue(again.waitForExit(seconds: 120), again.output)
                }
                try assertComesBack(server, to: afterFirst, "after 4,000 more, TLS \(tls)", memoryAllowance: 16 * 1024)
            }
        }
    }

    func testAConnectCloseFloodCannotStartMoreChildrenThanTwiceTheLimit() throws {
        // Children that ignore SIGTERM take the 2 s grace to end once evicted, so evicted
        // connections pile up unless they count against the limit until they have left.
        let server = try startServer([
            netsvc, "publish", "Flood", uniqueType("f"), "0", "--listen", "--json",
            "--max-connections", "2", "--exec", "trap '' TERM; while :; do sleep 1; done",
        ])
        let process = server.process
        defer { process.stop() }
        let flood = try hostile("cycles", server, count: 40)
        XCTAssertTrue(flood.waitForExit(seconds: 60), flood.output)
        // Every connection was admitted or refused by now; those admitted have their child
        // (or are starting it): two served, at most two ending.
        let deadline = Date().addingTimeInterval(1)
        var most = 0
        repeat {
            most = max(most, children(of: server.pid))
            Thread.sleep(forTimeInterval: 0.02)
        } while Date() < deadline
        XCTAssertLessThanOrEqual(most, 4, "children after 40 connect/close peers at --max-connections 2")
        XCTAssertTrue(
            process.waitForOutput(containing: "refused", seconds: 10), "newcomers beyond the ending ones are refused")
    }

    // MARK: Running the service

    /// Starts the service with short bounds (1 s handshake / first byte, 3 s idle), serves one
    /// good client to warm it up, measures it, runs `body`, and stops it.
    private func withServer(tls: Bool, _ body: (Server, Usage) throws -> Void) throws {
        var arguments = [
            netsvc, "publish", "Hostile", uniqueType("h"), "0", "--listen", "--exec", "cat", "--json",
            "--handshake-timeout", "1", "--idle-timeout", "3",
        ]
        if tls {
            let made = try certificate ?? TestCertificate.make()
            certificate = made
            arguments += ["--tls-cert", made.certificateFile, "--tls-key", made.keyFile]
        }
        let server = try startServer(arguments)
        let process = server.process
        defer { process.stop() }
        try assertGoodClientsServed(server, tls: tls, count: 3)
        let baseline = try settledUsage(server)
        try body(server, baseline)
        XCTAssertTrue(
            process.process.isRunning,
            "netsvc died: \(process.output.split(separator: "\n").filter { !$0.hasPrefix("{") }.prefix(40).joined(separator: "\n"))"
        )
    }

    /// Starts `netsvc publish … --listen --json` with `arguments` and returns once it listens
    /// (stopped by the caller).
    private func startServer(_ arguments: [String]) throws -> Server {
        let process = try Foreign(arguments)
        guard process.waitForOutput(containing: "\"listening\":true", seconds: 10),
            let line = process.output.split(separator: "\n").first(where: { $0.contains("\"published\"") }),
            let object = try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any],
            let port = object["port"] as? Int
        else {
            process.stop()
            throw DeadlineExceeded(what: "netsvc publish --listen: \(process.output)", seconds: 10)
        }
        return Server(process: process, port: port)
    }

    /// Runs a hostile mode; for the modes that hold connections, returns once they are held.
    private func hostile(_ mode: String, _ server: Server, count: Int, hold: Double? = nil) throws -> Foreign {
        var arguments = ["python3", Self.script, mode, String(server.port), "--count", String(count)]
        if let hold { arguments += ["--hold", String(hold)] }
        let process = try Foreign(arguments)
        if hold != nil, !process.waitForOutput(containing: "ready", seconds: 60) {
            throw DeadlineExceeded(what: "hostile \(mode): \(process.output)", seconds: 60)
        }
        return process
    }

    /// Good clients, one after another, each must get its line echoed within `servedWithin`.
    private func assertGoodClientsServed(
        _ server: Server, tls: Bool, count: Int = 5,
        file: StaticString = #filePath, line: UInt = #line
    ) throws {
        var arguments = [
            "python3", Self.script, "good", String(server.port), "--count", String(count),
            "--timeout", String(servedWithin),
        ]
        if tls, let certificate { arguments += ["--tls", "--cafile", certificate.certificateFile] }
        let client = try Foreign(arguments)
        let output = client.finish(seconds: Double(count) * servedWithin + 10)
        XCTAssertEqual(
            client.process.terminationStatus, 0, "good clients not all served: \(output)", file: file, line: line)
    }

    // MARK: Measuring

    /// The usage once it has stopped changing (two readings 200 ms apart agree).
    private func settledUsage(_ server: Server) throws -> Usage {
        try settledReading(timeout: 10, interval: 0.2, { try usage(server.pid) }) { now, last in
            guard let last else { return false }
            return now.descriptors == last.descriptors && now.children == last.children && now.threads == last.threads
        }
    }

    /// Waits (up to 20 s) until descriptors and children are back to the baseline, threads no
    /// more than the baseline's plus a few pool threads, and resident memory within
    /// `memoryAllowance` KiB (the heap keeps some of its high water).
    private func assertComesBack(
        _ server: Server, to baseline: Usage, _ what: String, memoryAllowance: Int = 24 * 1024,
        file: StaticString = #filePath, line: UInt = #line
    ) throws {
        var now = try usage(server.pid)
        try eventually(timeout: 20, interval: 0.1) {
            now = try usage(server.pid)
            return now.descriptors <= baseline.descriptors && now.children == 0
                && now.threads <= baseline.threads + 4 && now.residentKiB - baseline.residentKiB <= memoryAllowance
        }
        print("HostilePeerTests: \(what): before \(baseline); after \(now)")
        XCTAssertLessThanOrEqual(now.descriptors, baseline.descriptors, "descriptors, \(what)", file: file, line: line)
        XCTAssertEqual(now.children, 0, "children, \(what)", file: file, line: line)
        XCTAssertLessThanOrEqual(now.threads, baseline.threads + 4, "threads, \(what)", file: file, line: line)
        XCTAssertLessThanOrEqual(
            now.residentKiB - baseline.residentKiB, memoryAllowance, "memory (KiB), \(what)", file: file, line: line)
    }

    private func usage(_ pid: pid_t) throws -> Usage {
        let descriptors = try FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/fd").count
        let status = try String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8)
        func field(_ name: String) -> Int {
            status.split(separator: "\n").first { $0.hasPrefix(name + ":") }
                .flatMap { Int($0.split(whereSeparator: { $0 == " " || $0 == "\t" })[1]) } ?? -1
        }
        return Usage(
            descriptors: descriptors, threads: field("Threads"), children: children(of: pid),
            residentKiB: field("VmRSS"))
    }

    /// Processes whose parent is `pid` (its `--exec` children, shells and commands alike).
    private func children(of pid: pid_t) -> Int {
        let entries = (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []
        return entries.lazy.compactMap(Int32.init).filter { candidate in
            guard let stat = try? String(contentsOfFile: "/proc/\(candidate)/stat", encoding: .utf8),
                let close = stat.lastIndex(of: ")")
            else { return false }
            // After "pid (comm) ": state, then the parent's pid.
            let fields = stat[stat.index(after: close)...].split(separator: " ")
            return fields.count > 1 && Int32(fields[1]) == pid
        }.count
    }
}
