// connections-bench: memory per connection when one auto-listening service (published through
// the avahi-daemon, `ServiceAdvertisement.listen`) holds many concurrent connections open, each
// having exchanged a small message. Without a daemon it says so and uses the bare listener.
//
//   swift build -c release --product connections-bench
//   .build/release/connections-bench --connections 1000
//
// Baseline, measured in the same run: the same number of accepted connections held as plain
// file descriptors by a POSIX accept loop (what the kernel and the process need at the least).

import Dispatch
import Foundation
import Glibc
import SalutDiscovery
import SalutStreams

func option(_ name: String, _ fallback: Int) -> Int {
    guard let i = CommandLine.arguments.firstIndex(of: name), i + 1 < CommandLine.arguments.count,
        let value = Int(CommandLine.arguments[i + 1])
    else { return fallback }
    return value
}

/// Resident set size in KiB, from /proc/self/status.
func residentKiB() -> Int {
    let status = (try? String(contentsOfFile: "/proc/self/status", encoding: .utf8)) ?? ""
    let line = status.split(separator: "\n").first { $0.hasPrefix("VmRSS:") } ?? ""
    return Int(line.split(separator: " ").dropFirst().first ?? "0") ?? 0
}

/// Connects `count` blocking client sockets to 127.0.0.1:`port`; each sends "ping" and waits
/// for `answer` bytes back (0: none).
func clients(_ count: Int, port: UInt16, answer: Int) -> [Int32] {
    var fds: [Int32] = []
    for _ in 0..<count {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_port = port.bigEndian
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        let connected = withUnsafePointer(to: &addr) {
            connect(
                fd, UnsafeRawPointer($0).assumingMemoryBound(to: sockaddr.self),
                socklen_t(MemoryLayout<sockaddr_in>.size))
        }
        precondition(connected == 0, "connect failed: \(String(cString: strerror(errno)))")
        precondition(send(fd, "ping", 4, 0) == 4)
        if answer > 0 {
            var buffer = [UInt8](repeating: 0, count: answer)
            var got = 0
            while got < answer {
                let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress!, answer - got, 0) }
                precondition(n > 0, "no answer")
                got += n
            }
        }
        fds.append(fd)
    }
    return fds
}

final class Holder: @unchecked Sendable {
    // @unchecked: every stored var is touched only under `lock`.
    private let lock = StateLock()
    private var items: [AcceptedConnection] = []
    private var fds: [Int32] = []
    func add(_ item: AcceptedConnection) { lock.withLock { items.append(item) } }
    func add(_ fd: Int32) { lock.withLock { fds.append(fd) } }
}

let count = option("--connections", 1000)
// Each connection costs this process two descriptors (client and accepted end).
var limit = rlimit()
getrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &limit)
limit.rlim_cur = min(limit.rlim_max, rlim_t(4 * count + 256))
precondition(setrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &limit) == 0, "cannot raise the descriptor limit")

// Baseline: a POSIX listener that accepts and answers "pong", holding the descriptors.
let rawListener = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
var rawAddress = sockaddr_in()
rawAddress.sin_family = sa_family_t(AF_INET)
rawAddress.sin_addr.s_addr = inet_addr("127.0.0.1")
var rawLength = socklen_t(MemoryLayout<sockaddr_in>.size)
_ = withUnsafePointer(to: &rawAddress) {
    bind(rawListener, UnsafeRawPointer($0).assumingMemoryBound(to: sockaddr.self), rawLength)
}
listen(rawListener, 1024)
_ = withUnsafeMutablePointer(to: &rawAddress) {
    getsockname(rawListener, UnsafeMutableRawPointer($0).assumingMemoryBound(to: sockaddr.self), &rawLength)
}
let rawHeld = Holder()
let rawFD = rawListener
Thread {
    for _ in 0..<count {
        let fd = accept(rawFD, nil, nil)
        var buffer = [UInt8](repeating: 0, count: 4)
        _ = recv(fd, &buffer, 4, 0)
        _ = send(fd, "pong", 4, 0)
        rawHeld.add(fd)
    }
}.start()
let rawBefore = residentKiB()
let rawClients = clients(count, port: UInt16(bigEndian: rawAddress.sin_port), answer: 4)
let rawAfter = residentKiB()

// Salut: one auto-listening service; each accepted pair is opened, reads "ping", answers "pong"
// and stays open.
let advertisement = try? await ServiceAdvertisement.listen(
    name: "connections-bench \(getpid())", type: "_salutbench._tcp", timeout: 5)
if advertisement == nil { print("  (no avahi-daemon answered: measuring the bare StreamListener)") }
let listener = try advertisement?.listener ?? StreamListener(port: 0)
let held = Holder()
listener.accept { connection in
    held.add(connection)
    Task {
        try await connection.streams.open()
        var got = 0
        for try await chunk in connection.input.chunks(ofSize: 4) {
            got += chunk.count
            if got >= 4 { break }
        }
        try await connection.output.write(Data("pong".utf8))
    }
}
let before = residentKiB()
let start = Date()
let salutClients = clients(count, port: listener.port, answer: 4)
let elapsed = Date().timeIntervalSince(start)
let after = residentKiB()

print("connections-bench: \(count) concurrent loopback connections, each answered once and held open")
print(
    String(
        format: "  Salut auto-listening service        %6d KiB  (%.2f KiB per connection, %.2f s to serve all)",
        after - before, Double(after - before) / Double(count), elapsed))
print(
    String(
        format: "  POSIX accept, descriptors only       %6d KiB  (%.2f KiB per connection)",
        rawAfter - rawBefore, Double(rawAfter - rawBefore) / Double(count)))
print("  (both figures include the client sockets of the same process, which cost no user memory)")
for fd in salutClients + rawClients { close(fd) }
listener.stop()
await advertisement?.withdraw()
