// soak-bench: do connections give back what they took? Bounded in count: N connect / echo /
// close cycles one after another, then M connections open at once (each echoes once) and closed.
// Resident memory, virtual size, descriptors and threads are printed after a warm-up, after the
// cycles, while the M connections are open, and after they are closed, for Salut (socket
// streams to a StreamListener in the same process) and for the baseline measured in the same
// run: plain blocking C sockets against a plain accept loop.
//
//   swift build -c release --product soak-bench
//   .build/release/soak-bench --cycles 10000 --concurrent 1000
//
// It exits 1 when Salut's growth over the cycles, or over a second identical burst of
// concurrent connections, is not flat (more than the baseline's plus 2 MiB), or a descriptor stays.

import Dispatch
import Foundation
import Glibc
import SalutStreams

/// glibc's `malloc_trim` (in malloc.h, which the Glibc module does not bring in): gives the
/// allocator's free memory back, so that what is measured is what is still held.
@_silgen_name("malloc_trim") func mallocTrim(_ pad: Int) -> Int32

func option(_ name: String, _ fallback: Int) -> Int {
    guard let i = CommandLine.arguments.firstIndex(of: name), i + 1 < CommandLine.arguments.count,
        let value = Int(CommandLine.arguments[i + 1]), value > 0
    else { return fallback }
    return value
}

let cycles = option("--cycles", 10_000)
let concurrent = option("--concurrent", 1_000)

/// What the process holds at one moment.
struct Footprint: CustomStringConvertible {
    var residentKiB: Int
    var virtualKiB: Int
    var descriptors: Int
    var threads: Int

    static func now() -> Footprint {
        let status = (try? String(contentsOfFile: "/proc/self/status", encoding: .utf8)) ?? ""
        func field(_ name: String) -> Int {
            let line = status.split(separator: "\n").first { $0.hasPrefix(name + ":") } ?? ""
            return Int(line.split(whereSeparator: { $0 == " " || $0 == "\t" }).dropFirst().first ?? "0") ?? 0
        }
        let fds = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd").count) ?? -1
        return Footprint(
            residentKiB: field("VmRSS"), virtualKiB: field("VmSize"), descriptors: fds, threads: field("Threads"))
    }

    var description: String {
        String(
            format: "RSS %7.1f MiB  VSZ %8.1f MiB  fds %5d  threads %3d",
            Double(residentKiB) / 1024, Double(virtualKiB) / 1024, descriptors, threads)
    }
}

/// Lets the queues finish releasing what closed connections held, then measures.
func settledFootprint() -> Footprint {
    _ = mallocTrim(0)  // what the allocator keeps as free is not held by connections
    var last = Footprint.now()
    for _ in 0..<50 {
        usleep(20_000)
        _ = mallocTrim(0)
        let next = Footprint.now()
        if next.descriptors == last.descriptors && abs(next.residentKiB - last.residentKiB) < 64 { return next }
        last = next
    }
    return last
}

func raiseDescriptorLimit() {
    var limit = rlimit()
    guard getrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &limit) == 0 else { return }
    limit.rlim_cur = limit.rlim_max
    _ = setrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &limit)
}

// MARK: Salut

/// Echoes every byte back on every accepted connection, then closes when the peer does.
func salutEchoServer() throws -> StreamListener {
    let listener = try StreamListener(port: 0)
    listener.accept { connection in
        Task {
            do {
                try await connection.streams.open()
                for try await chunk in connection.input.chunks { try await connection.output.write(chunk) }
            } catch {}
            connection.output.close()
            connection.input.close()
        }
    }
    return listener
}

let message = Data((0..<64).map { UInt8($0) })

/// One client connection: open, send the message, read it back whole.
func salutClient(port: UInt16) async throws -> BoundStreamPair {
    let pair = SocketStreams.pair(toHost: "127.0.0.1", port: Int(port))
    try await pair.open()
    try await pair.output.write(message)
    var echoed = Data()
    for try await chunk in pair.input.chunks {
        echoed += chunk
        if echoed.count >= message.count { break }
    }
    precondition(echoed == message, "echo mismatch")
    return pair
}

func close(_ pair: BoundStreamPair) {
    pair.output.close()
    pair.input.close()
}

// MARK: Baseline: plain blocking sockets

/// A blocking accept loop that echoes on a thread per connection (the simplest C server).
func plainEchoServer() -> (fd: Int32, port: UInt16) {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    precondition(fd >= 0)
    var on: Int32 = 1
    precondition(setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, socklen_t(MemoryLayout<Int32>.size)) == 0)
    var addr = sockaddr_in()
    addr.sin_family = sa_family_t(AF_INET)
    addr.sin_addr.s_addr = inet_addr("127.0.0.1")
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    let bound = withUnsafeMutablePointer(to: &addr) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
            bind(fd, $0, length) == 0 && getsockname(fd, $0, &length) == 0
        }
    }
    precondition(bound && listen(fd, 4096) == 0)
    let port = UInt16(bigEndian: addr.sin_port)
    Thread.detachNewThread {
        while true {
            let client = accept(fd, nil, nil)
            if client < 0 { if errno == EINTR { continue } else { return } }
            Thread.detachNewThread {
                var buffer = [UInt8](repeating: 0, count: 4096)
                while true {
                    let n = recv(client, &buffer, buffer.count, 0)
                    if n <= 0 { break }
                    var sent = 0
                    while sent < n {
                        let m = buffer.withUnsafeBytes {
                            send(client, $0.baseAddress! + sent, n - sent, Int32(MSG_NOSIGNAL))
                        }
                        if m <= 0 { break }
                        sent += m
                    }
                }
                Glibc.close(client)
            }
        }
    }
    return (fd, port)
}

func plainClient(port: UInt16) -> Int32 {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    precondition(fd >= 0)
    var addr = sockaddr_in()
    addr.sin_family = sa_family_t(AF_INET)
    addr.sin_port = port.bigEndian
    addr.sin_addr.s_addr = inet_addr("127.0.0.1")
    let connected = withUnsafePointer(to: &addr) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
            connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
        }
    }
    precondition(connected == 0, "connect: \(String(cString: strerror(errno)))")
    let bytes = [UInt8](message)
    precondition(send(fd, bytes, bytes.count, Int32(MSG_NOSIGNAL)) == bytes.count)
    var got = 0
    var buffer = [UInt8](repeating: 0, count: 64)
    while got < 64 {
        let n = recv(fd, &buffer, 64 - got, 0)
        precondition(n > 0, "no echo")
        got += n
    }
    return fd
}

/// Waits until the plain server's threads have seen their clients go (descriptor count back).
func plainSettled(baseline: Int) -> Footprint {
    for _ in 0..<250 {
        let now = Footprint.now()
        if now.descriptors <= baseline { return settledFootprint() }
        usleep(20_000)
    }
    return settledFootprint()
}

// MARK: Run

struct Series {
    var name: String
    var start = Footprint.now()
    var afterCycles = Footprint.now()
    var open = Footprint.now()
    var afterClose = Footprint.now()
    /// After a second round of the same concurrent connections: what stays must not grow again.
    var afterSecondClose = Footprint.now()
}

raiseDescriptorLimit()
print("soak-bench: \(cycles) connect/echo/close cycles, then \(concurrent) connections at once (loopback)")

// Baseline first, then Salut (each after its own warm-up of 100 cycles).
var plain = Series(name: "plain C sockets")
let plainServer = plainEchoServer()
for _ in 0..<100 { Glibc.close(plainClient(port: plainServer.port)) }
plain.start = plainSettled(baseline: Footprint.now().descriptors - 1)
for _ in 0..<cycles { Glibc.close(plainClient(port: plainServer.port)) }
plain.afterCycles = plainSettled(baseline: plain.start.descriptors)
var plainOpen: [Int32] = []
for _ in 0..<concurrent { plainOpen.append(plainClient(port: plainServer.port)) }
plain.open = Footprint.now()
plainOpen.forEach { _ = Glibc.close($0) }
plain.afterClose = plainSettled(baseline: plain.start.descriptors)
plainOpen = (0..<concurrent).map { _ in plainClient(port: plainServer.port) }
plainOpen.forEach { _ = Glibc.close($0) }
plain.afterSecondClose = plainSettled(baseline: plain.start.descriptors)
Glibc.close(plainServer.fd)

/// Salut's run: warm-up, cycles, concurrent connections (off the main thread, which waits).
func salutSeries(port: UInt16) async throws -> Series {
    var series = Series(name: "Salut socket streams")
    for _ in 0..<100 { close(try await salutClient(port: port)) }
    series.start = settledFootprint()
    for _ in 0..<cycles { close(try await salutClient(port: port)) }
    series.afterCycles = settledFootprint()
    var open: [BoundStreamPair] = []
    for _ in 0..<concurrent { open.append(try await salutClient(port: port)) }
    series.open = settledFootprint()
    open.forEach(close)
    open = []
    series.afterClose = settledFootprint()
    for _ in 0..<concurrent { open.append(try await salutClient(port: port)) }
    open.forEach(close)
    open = []
    series.afterSecondClose = settledFootprint()
    return series
}

let listener = try salutEchoServer()
let port = listener.port
let done = DispatchSemaphore(value: 0)
let outcome = Locked<Result<Series, any Error>?>(nil)
Task.detached {
    do {
        let series = try await salutSeries(port: port)
        outcome.withLock { $0 = .success(series) }
    } catch {
        outcome.withLock { $0 = .failure(error) }
    }
    done.signal()
}
done.wait()
let salut: Series
switch outcome.value {
case .success(let series)?: salut = series
case .failure(let error)?:
    print("soak-bench: Salut run failed: \(error)")
    exit(2)
case nil:
    exit(2)
}
listener.stop()

for series in [plain, salut] {
    print("\n\(series.name)")
    print("  after warm-up        \(series.start)")
    print("  after \(cycles) cycles  \(series.afterCycles)")
    print("  \(concurrent) open at once  \(series.open)")
    print("  after closing them   \(series.afterClose)")
    print("  same again, closed   \(series.afterSecondClose)")
}

func growth(_ s: Series) -> (cycles: Int, retained: Int, again: Int, perConnection: Double) {
    (
        s.afterCycles.residentKiB - s.start.residentKiB,
        s.afterClose.residentKiB - s.start.residentKiB,
        s.afterSecondClose.residentKiB - s.afterClose.residentKiB,
        Double(s.open.residentKiB - s.afterCycles.residentKiB) / Double(concurrent)
    )
}
let (plainGrowth, salutGrowth) = (growth(plain), growth(salut))
print("")
print(
    String(
        format: "RSS growth over the cycles:        plain %+6d KiB   Salut %+6d KiB", plainGrowth.cycles,
        salutGrowth.cycles))
print(
    String(
        format: "RSS kept after the %d closed:   plain %+6d KiB   Salut %+6d KiB", concurrent, plainGrowth.retained,
        salutGrowth.retained))
print(
    String(
        format: "RSS growth from a second round:    plain %+6d KiB   Salut %+6d KiB", plainGrowth.again,
        salutGrowth.again))
print(
    String(
        format: "memory per open connection:        plain %6.1f KiB   Salut %6.1f KiB (client and server ends)",
        plainGrowth.perConnection, salutGrowth.perConnection))
print(
    String(
        format: "descriptors kept:                  plain %+6d       Salut %+6d",
        plain.afterClose.descriptors - plain.start.descriptors, salut.afterClose.descriptors - salut.start.descriptors))

// Flat: the cycles grow no more than the baseline's plus 2 MiB; the first burst of concurrent
// connections may leave allocator arenas and idle worker threads behind (the baseline keeps some
// too), but a second, identical burst must not add to them; no descriptor is kept.
let allowance = 2048
let flat =
    salutGrowth.cycles <= max(plainGrowth.cycles, 0) + allowance
    && salutGrowth.again <= max(plainGrowth.again, 0) + allowance
    && salut.afterSecondClose.descriptors <= salut.start.descriptors
print(flat ? "flat: yes" : "flat: NO")
exit(flat ? 0 : 1)
