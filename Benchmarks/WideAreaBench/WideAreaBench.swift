// wide-area-bench: registering and browsing services in a unicast DNS zone, Salut against
// BIND's own tools, in one run against one private BIND 9 (Scripts/dns-server) on loopback.
//
//   wide-area-bench [--services N] [--rounds R]
//
// For N services (default 1,000): Salut registers each with its own signed update
// (WideAreaPublisher: PTR, SRV, TXT, A, on condition the name is free), then lists the type and
// resolves every instance (UnicastBrowser: PTR, then SRV, TXT, A each); the baseline sends the
// same updates from one `nsupdate -k` process (one `send` per service, the same records and
// prerequisite) and makes the same queries from one `dig -f` process. Then one service's time
// from "publish" to "visible to a query" for each. Medians of R rounds (default 3), each round
// on a fresh zone; the order of the two sides turns each round.
import Foundation
import Glibc
import SalutDiscovery
import SalutStreams
import SalutTools

func option(_ name: String, _ fallback: Int) -> Int {
    guard let index = CommandLine.arguments.firstIndex(of: name), index + 1 < CommandLine.arguments.count,
        let value = Int(CommandLine.arguments[index + 1]), value > 0
    else { return fallback }
    return value
}

if CommandLine.arguments.contains("--help") {
    print("usage: wide-area-bench [--services N] [--rounds R]   (needs bind9: Scripts/bootstrap)")
    exit(0)
}
let services = option("--services", 1000)
let rounds = option("--rounds", 3)
let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
    .deletingLastPathComponent()
let script = root.appendingPathComponent("Scripts/dns-server").path
let port = 5399

/// Runs `command` through /bin/sh (SalutTools' spawner and waitpid), its input and output through
/// files: a daemon it starts (named) keeps what it inherits, so neither a pipe nor Foundation's
/// `Process` (which waited for ever here under top-level await) can tell when it is done.
@discardableResult
func shell(_ command: String, input: String? = nil) -> (status: Int32, output: String) {
    let scratch = NSTemporaryDirectory() + "wide-area-bench-\(UUID().uuidString)"
    defer {
        try? FileManager.default.removeItem(atPath: scratch + ".in");
        try? FileManager.default.removeItem(atPath: scratch + ".out")
    }
    var redirect = " >'\(scratch).out' 2>&1"
    redirect += input == nil ? " </dev/null" : " <'\(scratch).in'"
    if let input { try? input.write(toFile: scratch + ".in", atomically: true, encoding: .utf8) }
    let pid: pid_t
    do {
        pid = try Spawner.spawn(["/bin/sh", "-c", "{ \(command) ; }" + redirect], Spawner.Options())
    } catch {
        return (127, "\(error)")
    }
    var status: Int32 = 0
    while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
    let output = (try? String(contentsOfFile: scratch + ".out", encoding: .utf8)) ?? ""
    return ((status >> 8) & 0xFF, output)
}

func now() -> Double { Double(DispatchTime.now().uptimeNanoseconds) / 1e9 }
func median(_ values: [Double]) -> Double { values.sorted()[values.count / 2] }

/// A fresh zone: the server stopped, its folder emptied, started again.
func freshZone(_ directory: String) {
    shell("'\(script)' stop '\(directory)'")
    shell("rm -rf '\(directory)'")
    let started = shell("'\(script)' start '\(directory)' 127.0.0.1 \(port)")
    guard started.status == 0 else { fatalError("dns-server did not start: \(started.output)") }
}

let server = SocketAddress.literal("127.0.0.1", port: UInt16(port))!
let address = SocketAddress.literal("198.18.0.1", port: 0)!

/// Salut: N publishers, one update each; then a browse and N resolutions.
func salut(_ directory: String, type: String) async throws -> (register: Double, browse: Double) {
    let key = try SalutTSIGKey(contentsOfFile: directory + "/salut-publisher.key")
    var publishers: [WideAreaPublisher] = []
    let start = now()
    for index in 0..<services {
        let publisher = try WideAreaPublisher(
            name: "Service \(index)", type: type, domain: "home.arpa", port: UInt16(10_000 + index % 50_000),
            txt: [Array("i=\(index)".utf8)], host: "bench", addresses: [address], key: key,
            server: server)
        try await publisher.publish()
        publishers.append(publisher)
    }
    let registered = now() - start
    let browser = try UnicastBrowser(type: type, domain: "home.arpa", nameServer: server)
    let browseStart = now()
    let (names, _) = try await browser.instances()
    precondition(names.count == services, "Salut listed \(names.count) of \(services)")
    for name in names { _ = try await browser.resolve(name.text) }
    return (registered, now() - browseStart)
}

/// The baseline: one nsupdate process with one signed update per service, then one dig process
/// with the same queries as the browse.
func baseline(_ directory: String, type: String) -> (register: Double, browse: Double) {
    var updates = "server 127.0.0.1 \(port)\nzone home.arpa\n"
    for index in 0..<services {
        let instance = #"Service\032\#(index).\#(type).home.arpa."#
        updates += "prereq nxdomain \(instance)\n"
        updates += "update add \(type).home.arpa. 120 PTR \(instance)\n"
        updates += "update add \(instance) 120 SRV 0 0 \(10_000 + index % 50_000) bench.home.arpa.\n"
        updates += "update add \(instance) 120 TXT \"i=\(index)\"\n"
        updates += "update add bench.home.arpa. 120 A 198.18.0.1\n"
        updates += "send\n"
    }
    let start = now()
    let sent = shell("nsupdate -k '\(directory)/salut-publisher.key'", input: updates)
    let registered = now() - start
    precondition(sent.status == 0, "nsupdate failed: \(sent.output.prefix(500))")
    var queries = "\(type).home.arpa PTR\n"
    for index in 0..<services {
        let instance = #"Service\032\#(index).\#(type).home.arpa"#
        queries += "\(instance) SRV\n\(instance) TXT\nbench.home.arpa A\nbench.home.arpa AAAA\n"
    }
    let file = directory + "/queries.txt"
    try? queries.write(toFile: file, atomically: true, encoding: .utf8)
    let browseStart = now()
    let answers = shell("dig +noall +answer +tries=1 -p \(port) @127.0.0.1 -f '\(file)' | grep -cw PTR")
    let browsed = now() - browseStart
    precondition(
        Int(answers.output.trimmingCharacters(in: .whitespacesAndNewlines)) == services, "dig listed \(answers.output)")
    return (registered, browsed)
}

/// One service: from starting to publish until a query sees it.
func visibleSalut(_ directory: String) async throws -> Double {
    let key = try SalutTSIGKey(contentsOfFile: directory + "/salut-publisher.key")
    let start = now()
    let publisher = try WideAreaPublisher(
        name: "Visible", type: "_visible._tcp", domain: "home.arpa", port: 9, txt: [],
        host: "bench", addresses: [address], key: key, nameServer: server)
    try await publisher.publish()
    let browser = try UnicastBrowser(type: "_visible._tcp", domain: "home.arpa", nameServer: server)
    while try await browser.instances().names.isEmpty {}
    let elapsed = now() - start
    try await publisher.stop()
    return elapsed
}

func visibleBaseline(_ directory: String) -> Double {
    let start = now()
    shell(
        "nsupdate -k '\(directory)/salut-publisher.key'",
        input: """
            server 127.0.0.1 \(port)
            zone home.arpa
            update add _visiblens._tcp.home.arpa. 120 PTR Visible._visiblens._tcp.home.arpa.
            update add Visible._visiblens._tcp.home.arpa. 120 SRV 0 0 9 bench.home.arpa.
            send

            """)
    while shell("dig +short -p \(port) @127.0.0.1 _visiblens._tcp.home.arpa PTR").output.isEmpty {}
    return now() - start
}

let directory = NSTemporaryDirectory() + "salut-wide-area-bench"
print("wide-area-bench: \(services) services, \(rounds) rounds, BIND on 127.0.0.1:\(port)")
var salutRegister: [Double] = [], salutBrowse: [Double] = [], toolsRegister: [Double] = [], toolsBrowse: [Double] = []
var salutVisible: [Double] = [], toolsVisible: [Double] = []
for round in 0..<rounds {
    let sides = round % 2 == 0 ? ["salut", "tools"] : ["tools", "salut"]
    for side in sides {
        freshZone(directory)
        if side == "salut" {
            let (register, browse) = try await salut(directory, type: "_bench._tcp")
            salutRegister.append(register); salutBrowse.append(browse)
            salutVisible.append(try await visibleSalut(directory))
        } else {
            let (register, browse) = baseline(directory, type: "_bench._tcp")
            toolsRegister.append(register); toolsBrowse.append(browse)
            toolsVisible.append(visibleBaseline(directory))
        }
    }
}
shell("'\(script)' stop '\(directory)'")
print(
    String(
        format: "register %d     Salut %7.2f s   nsupdate %7.2f s   ratio %.2f", services,
        median(salutRegister), median(toolsRegister), median(toolsRegister) / median(salutRegister)))
print(
    String(
        format: "browse+resolve  Salut %7.2f s   dig      %7.2f s   ratio %.2f",
        median(salutBrowse), median(toolsBrowse), median(toolsBrowse) / median(salutBrowse)))
print(
    String(
        format: "publish→visible Salut %7.1f ms  nsupdate+dig %5.1f ms", median(salutVisible) * 1000,
        median(toolsVisible) * 1000))
