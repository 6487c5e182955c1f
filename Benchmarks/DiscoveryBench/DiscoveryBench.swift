// discovery-bench: Salut's discovery against Avahi's own tools, measured in one run against the
// same daemon. Prints a table and the figures docs/benchmarks.md records.
//
//   discovery-bench [--rounds N] [--services N] [--resolve N]
//
// 1. Latency: a browser is started, then `avahi-publish` announces a new service; we time
//    publish → found and publish → resolved, for Salut (ServiceBrowser + resolve) and for
//    `avahi-browse -r -p` watching the same kind of service. Median of N rounds.
// 2. Many services: a child process publishes N services; then a fresh Salut browser process
//    and a fresh `avahi-browse -p` each run until all N are listed: wall time, CPU time and
//    peak memory (GNU time).
// 3. Resolving many of one type: a child publishes N services (`--resolve`, 200); every one is
//    resolved at once, with one shared browser of the type (as Salut does) and, as the baseline
//    in the same run, with a browser of the type each (as it did before), three rounds
//    alternating: wall time, avahi-daemon's CPU (from /proc) and this process's.
import Foundation
import Salut
import SalutStreams

let arguments = CommandLine.arguments
func option(_ name: String, _ fallback: Int) -> Int {
    guard let i = arguments.firstIndex(of: name), i + 1 < arguments.count, let v = Int(arguments[i + 1]) else {
        return fallback
    }
    return v
}
let me = URL(fileURLWithPath: CommandLine.arguments[0]).path

func uniqueType(_ tag: String) -> String {
    "_\(tag)\(String(UInt32.random(in: 0..<UInt32.max), radix: 36))._tcp"
}

/// A child process whose stdout lines are stamped with the time they arrive.
final class Child: @unchecked Sendable {
    // @unchecked: `lines` and `partial` are touched only under `lock`; `process` is set up in init, then only
    // queried and stopped.
    let process = Process()
    private let lock = StateLock()
    private var lines: [(Date, String)] = []
    private var partial = ""

    init(_ argv: [String]) throws {
        // `env --default-signal` unblocks every signal: a child spawned from a libdispatch
        // thread would otherwise inherit that thread's blocked SIGTERM and SIGINT.
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["--default-signal"] + argv
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = FileHandle.nullDevice
        pipe.fileHandleForReading.readabilityHandler = { [weak self] handle in
            let data = handle.availableData
            guard let self, !data.isEmpty else { return }
            let now = Date()
            self.lock.withLock {
                self.partial += String(decoding: data, as: UTF8.self)
                while let nl = self.partial.firstIndex(of: "\n") {
                    self.lines.append((now, String(self.partial[..<nl])))
                    self.partial.removeSubrange(...nl)
                }
            }
        }
        try process.run()
    }

    func firstLine(where predicate: (String) -> Bool, timeout: TimeInterval) -> Date? {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            let hit = lock.withLock { lines.first { predicate($0.1) } }
            if let hit { return hit.0 }
            Thread.sleep(forTimeInterval: 0.0005)
        }
        return nil
    }

    func count(where predicate: (String) -> Bool) -> Int {
        lock.withLock { lines.filter { predicate($0.1) }.count }
    }

    var allLines: [String] { lock.withLock { lines.map(\.1) } }

    func stop() {
        if process.isRunning { process.terminate() }
        let deadline = Date().addingTimeInterval(5)
        while process.isRunning && Date() < deadline { Thread.sleep(forTimeInterval: 0.01) }
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
    }

    func wait(timeout: TimeInterval) -> Bool {
        let deadline = Date().addingTimeInterval(timeout)
        while process.isRunning && Date() < deadline { Thread.sleep(forTimeInterval: 0.01) }
        Thread.sleep(forTimeInterval: 0.05)
        return !process.isRunning
    }
}

func median(_ values: [Double]) -> Double {
    let sorted = values.sorted()
    return sorted.isEmpty ? .nan : sorted[sorted.count / 2]
}

func ms(_ seconds: Double) -> String { String(format: "%.1f ms", seconds * 1000) }

// MARK: Latency

func salutLatency() async throws -> (found: Double, resolved: Double) {
    let type = uniqueType("lat")
    let start = Locked<Date?>(nil)
    let browse = Task { () -> (Double, Double) in
        for try await update in try ServiceBrowser(type: type) {
            for case .added(let service) in update.changes {
                let found = Date()
                _ = try await service.resolve(timeout: 5, settle: 0.001)
                let resolved = Date()
                let t0 = start.value!
                return (found.timeIntervalSince(t0), resolved.timeIntervalSince(t0))
            }
        }
        return (.nan, .nan)
    }
    try await Task.sleep(nanoseconds: 300_000_000)  // the browser is up and its cache query done
    start.exchange(Date())
    let publisher = try Child(["avahi-publish", "-s", "Latency Probe", type, "1"])
    defer { publisher.stop() }
    return try await browse.value
}

func avahiLatency() throws -> (found: Double, resolved: Double) {
    let type = uniqueType("lat")
    let browser = try Child(["avahi-browse", "-r", "-p", type])
    defer { browser.stop() }
    Thread.sleep(forTimeInterval: 0.3)
    let t0 = Date()
    let publisher = try Child(["avahi-publish", "-s", "Latency Probe", type, "1"])
    defer { publisher.stop() }
    let found = browser.firstLine(where: { $0.hasPrefix("+;") }, timeout: 10)
    let resolved = browser.firstLine(where: { $0.hasPrefix("=;") }, timeout: 10)
    return (found.map { $0.timeIntervalSince(t0) } ?? .nan, resolved.map { $0.timeIntervalSince(t0) } ?? .nan)
}

// MARK: Many services

/// Child mode: publish N services of a type, print "ready", wait for SIGTERM.
func publishMany(_ count: Int, _ type: String) async throws {
    var ads: [ServiceAdvertisement] = []
    try await withThrowingTaskGroup(of: ServiceAdvertisement.self) { group in
        for i in 0..<count {
            group.addTask {
                try await ServiceAdvertisement.publish(name: "svc-\(i)", type: type, port: 1000 + i, timeout: 60)
            }
        }
        for try await ad in group { ads.append(ad) }
    }
    FileHandle.standardOutput.write(Data("ready \(ads.count)\n".utf8))
    while true { try await Task.sleep(nanoseconds: 1_000_000_000) }
}

/// Child mode: browse until N services are known; print the elapsed time.
func browseCount(_ count: Int, _ type: String) async throws {
    let start = Date()
    for try await update in try ServiceBrowser(type: type) where update.services.count >= count {
        FileHandle.standardOutput.write(
            Data(String(format: "all %d in %.3f s\n", update.services.count, Date().timeIntervalSince(start)).utf8))
        return
    }
}

struct Usage { var wall: Double; var cpu: Double; var maxKiB: Int }

/// Runs argv under GNU time; returns wall, user+sys CPU and peak RSS, plus its stdout lines.
func timed(
    _ argv: [String], until predicate: ((Child) -> Bool)? = nil, timeout: TimeInterval
) throws -> (Usage, [String]) {
    let report = FileManager.default.temporaryDirectory.appendingPathComponent("bench-time-\(UUID().uuidString)").path
    let child = try Child(["/usr/bin/time", "-o", report, "-f", "%e %U %S %M"] + argv)
    let deadline = Date().addingTimeInterval(timeout)
    if let predicate {
        while !predicate(child) && Date() < deadline { Thread.sleep(forTimeInterval: 0.001) }
        // avahi-browse without -t never exits by itself: stop it (the child of GNU time, which
        // then writes its report) once it has listed everything.
        let pkill = try Child(["pkill", "-TERM", "-P", "\(child.process.processIdentifier)"])
        _ = pkill.wait(timeout: 5)
    }
    _ = child.wait(timeout: max(1, deadline.timeIntervalSinceNow))
    // GNU time writes its report as it exits; give the file a moment to fill.
    let readBy = Date().addingTimeInterval(2)
    while ((try? String(contentsOfFile: report, encoding: .utf8)) ?? "").split(separator: " ").count < 4
        && Date() < readBy
    {
        Thread.sleep(forTimeInterval: 0.01)
    }
    let fields =
        ((try? String(contentsOfFile: report, encoding: .utf8)) ?? "")
        .split(whereSeparator: \.isNewline).last.map { $0.split(separator: " ").compactMap { Double($0) } } ?? []
    try? FileManager.default.removeItem(atPath: report)
    guard fields.count == 4 else { return (Usage(wall: .nan, cpu: .nan, maxKiB: 0), child.allLines) }
    return (Usage(wall: fields[0], cpu: fields[1] + fields[2], maxKiB: Int(fields[3])), child.allLines)
}

// MARK: Resolving many of one type

/// The CPU seconds (user + system) avahi-daemon has used so far, from /proc; nil when it is not
/// found.
func daemonCPU() -> Double? {
    guard let pids = try? String(contentsOfFile: "/run/avahi-daemon/pid", encoding: .utf8),
        let pid = Int(pids.trimmingCharacters(in: .whitespacesAndNewlines)),
        let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
        let close = stat.lastIndex(of: ")")
    else { return nil }
    // Fields after the command: state is 3rd overall; utime and stime are 14th and 15th.
    let fields = stat[stat.index(after: close)...].split(separator: " ")
    guard fields.count > 13, let user = Double(fields[11]), let system = Double(fields[12]) else { return nil }
    return (user + system) / Double(sysconf(Int32(_SC_CLK_TCK)))
}

/// This process's CPU seconds so far.
func ownCPU() -> Double {
    var usage = rusage()
    getrusage(RUSAGE_SELF.rawValue, &usage)
    return Double(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec)
        + Double(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6
}

/// Resolves every one of `count` services of `type` at once, in a context of its own; with
/// `browserEach`, each resolution also runs a browser of the type of its own (what a resolution
/// cost before resolutions shared one). Wall time until all resolved, avahi-daemon's CPU and
/// this process's.
func resolveAll(
    _ count: Int, _ type: String, browserEach: Bool
) async throws -> (wall: Double, daemon: Double, own: Double) {
    let context = DiscoveryContext(label: "bench-resolve")
    let daemonBefore = daemonCPU() ?? .nan, ownBefore = ownCPU()
    let start = Date()
    try await withThrowingTaskGroup(of: Void.self) { group in
        var browsers: [Task<Void, Never>] = []
        for index in 0..<count {
            if browserEach {
                browsers.append(
                    Task {
                        guard let browser = try? ServiceBrowser(type: type, context: context) else { return }
                        do { for try await _ in browser {} } catch {}
                    })
            }
            group.addTask {
                _ = try await DiscoveredService(name: "svc-\(index)", type: type).resolve(
                    timeout: 60, settle: 0.001, context: context)
            }
        }
        try await group.waitForAll()
        browsers.forEach { $0.cancel() }
    }
    let wall = Date().timeIntervalSince(start)
    return (wall, (daemonCPU() ?? .nan) - daemonBefore, ownCPU() - ownBefore)
}

// MARK: Main

@main
struct DiscoveryBench {
    static func main() async throws {
        if arguments.count >= 4, arguments[1] == "publish-many" {
            return try await publishMany(Int(arguments[2])!, arguments[3])
        }
        if arguments.count >= 4, arguments[1] == "browse-count" {
            return try await browseCount(Int(arguments[2])!, arguments[3])
        }
        let rounds = option("--rounds", 7)
        let services = option("--services", 1000)
        let resolving = option("--resolve", 200)
        let info = try await DiscoveryContext.shared.daemonInfo()
        print("discovery-bench: \(info.version), \(rounds) latency rounds, \(services) services")

        var ours: [(Double, Double)] = [], theirs: [(Double, Double)] = []
        for _ in 0..<rounds {
            ours.append(try await salutLatency())
            theirs.append(try avahiLatency())
        }
        print("")
        print("publish → found / resolved (median of \(rounds)):")
        print(
            "  Salut ServiceBrowser + resolve   found \(ms(median(ours.map(\.0))))   resolved \(ms(median(ours.map(\.1))))"
        )
        print(
            "  avahi-browse -r -p               found \(ms(median(theirs.map(\.0))))   resolved \(ms(median(theirs.map(\.1))))"
        )
        print(
            String(
                format: "  difference (Salut − avahi-browse)  found %+.1f ms   resolved %+.1f ms",
                (median(ours.map(\.0)) - median(theirs.map(\.0))) * 1000,
                (median(ours.map(\.1)) - median(theirs.map(\.1))) * 1000))

        let type = uniqueType("many")
        let publisher = try Child([me, "publish-many", "\(services)", type])
        defer { publisher.stop() }
        guard publisher.firstLine(where: { $0.hasPrefix("ready") }, timeout: 120) != nil else {
            print("publishing \(services) services did not finish in 120 s"); exit(1)
        }
        let (salut, salutOut) = try timed([me, "browse-count", "\(services)", type], timeout: 120)
        let (avahi, _) = try timed(
            ["avahi-browse", "-p", type], until: { $0.count(where: { $0.hasPrefix("+;") }) >= services }, timeout: 120)
        print("")
        print("browse \(services) published services until all are listed:")
        print(
            "  Salut browser process   \(salutOut.last ?? "?")   wall \(String(format: "%.2f", salut.wall)) s   cpu \(String(format: "%.2f", salut.cpu)) s   peak RSS \(salut.maxKiB) KiB"
        )
        print(
            "  avahi-browse -p         wall \(String(format: "%.2f", avahi.wall)) s   cpu \(String(format: "%.2f", avahi.cpu)) s   peak RSS \(avahi.maxKiB) KiB"
        )

        // Resolving many services of one type at once (a gateway mirroring a crowded link).
        let crowd = uniqueType("res")
        let crowdPublisher = try Child([me, "publish-many", "\(resolving)", crowd])
        defer { crowdPublisher.stop() }
        guard crowdPublisher.firstLine(where: { $0.hasPrefix("ready") }, timeout: 120) != nil else {
            print("publishing \(resolving) services did not finish in 120 s"); exit(1)
        }
        print("")
        print("resolve \(resolving) services of one type at once (each round printed, alternating):")
        var shared: [(wall: Double, daemon: Double, own: Double)] = []
        var each: [(wall: Double, daemon: Double, own: Double)] = []
        for round in 1...3 {
            let baseline = try await resolveAll(resolving, crowd, browserEach: true)
            each.append(baseline)
            print(
                String(
                    format:
                        "  round %d  a browser each (as before)   wall %.2f s   avahi-daemon cpu %.2f s   own cpu %.2f s",
                    round, baseline.wall, baseline.daemon, baseline.own))
            let now = try await resolveAll(resolving, crowd, browserEach: false)
            shared.append(now)
            print(
                String(
                    format:
                        "  round %d  one shared browser         wall %.2f s   avahi-daemon cpu %.2f s   own cpu %.2f s",
                    round, now.wall, now.daemon, now.own))
        }
        print(
            String(
                format: "  median ratio (a browser each / shared): wall %.1f×, avahi-daemon cpu %.1f×",
                median(each.map(\.wall)) / median(shared.map(\.wall)),
                median(each.map(\.daemon)) / median(shared.map(\.daemon))))
    }
}
