// streams-bench: Salut's bound stream pair against an OS pipe, in one run: one writer thread and
// one reader thread move the same bytes in the same chunk size through a 64 KiB buffer (the
// pipe's default capacity on Linux is also 64 KiB).
//
//   streams-bench [--mib N] [--chunk BYTES] [--rounds N]
import Foundation
import Glibc
import SalutStreams

let arguments = CommandLine.arguments
func option(_ name: String, _ fallback: Int) -> Int {
    guard let i = arguments.firstIndex(of: name), i + 1 < arguments.count, let v = Int(arguments[i + 1]) else {
        return fallback
    }
    return v
}

struct Box<T>: @unchecked Sendable {
    // @unchecked: each box is used by exactly one thread after hand-over.
    let value: T
}

/// Runs `writer` and `reader` on two threads; returns the seconds until both finish.
func race(writer: @escaping @Sendable () -> Void, reader: @escaping @Sendable () -> Int) -> (Double, Int) {
    let group = DispatchGroup()
    let received = UnsafeMutablePointer<Int>.allocate(capacity: 1)
    defer { received.deallocate() }
    let receivedBox = Box(value: received)
    let start = DispatchTime.now()
    group.enter()
    Thread {
        writer(); group.leave()
    }.start()
    group.enter()
    Thread {
        receivedBox.value.pointee = reader(); group.leave()
    }.start()
    group.wait()
    let seconds = Double(DispatchTime.now().uptimeNanoseconds - start.uptimeNanoseconds) / 1e9
    return (seconds, received.pointee)
}

func boundPair(total: Int, chunk: Int) -> (Double, Int) {
    let pair = BoundStreamPair(bufferSize: 64 * 1024)
    pair.input.open(); pair.output.open()
    let input = Box(value: pair.input), output = Box(value: pair.output)
    return race(
        writer: {
            let block = [UInt8](repeating: 0xA5, count: chunk)
            var sent = 0
            while sent < total {
                var offset = 0
                while offset < chunk {
                    let n = block.withUnsafeBufferPointer {
                        output.value.write($0.baseAddress! + offset, maxLength: chunk - offset)
                    }
                    precondition(n > 0)
                    offset += n
                }
                sent += chunk
            }
            output.value.close()
        },
        reader: {
            var buffer = [UInt8](repeating: 0, count: chunk)
            var got = 0
            while true {
                let n = buffer.withUnsafeMutableBufferPointer { input.value.read($0.baseAddress!, maxLength: chunk) }
                if n <= 0 { return got }
                got += n
            }
        })
}

func pipe(total: Int, chunk: Int) -> (Double, Int) {
    var fds: [Int32] = [0, 0]
    precondition(Glibc.pipe(&fds) == 0)
    let (readEnd, writeEnd) = (fds[0], fds[1])
    return race(
        writer: {
            let block = [UInt8](repeating: 0xA5, count: chunk)
            var sent = 0
            while sent < total {
                var offset = 0
                while offset < chunk {
                    let n = block.withUnsafeBufferPointer {
                        Glibc.write(writeEnd, $0.baseAddress! + offset, chunk - offset)
                    }
                    precondition(n > 0)
                    offset += n
                }
                sent += chunk
            }
            close(writeEnd)
        },
        reader: {
            var buffer = [UInt8](repeating: 0, count: chunk)
            var got = 0
            while true {
                let n = buffer.withUnsafeMutableBufferPointer { Glibc.read(readEnd, $0.baseAddress!, chunk) }
                if n <= 0 { close(readEnd); return got }
                got += n
            }
        })
}

// MARK: Loopback TCP

/// A sink on 127.0.0.1 that counts what it receives on one connection; returns its port and a
/// semaphore signalled (with the time) once `total` bytes have arrived.
func sink(total: Int) -> (port: Int, done: DispatchSemaphore, finished: UnsafeMutablePointer<UInt64>) {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    var addr = sockaddr_in()
    addr.sin_family = sa_family_t(AF_INET)
    addr.sin_addr.s_addr = inet_addr("127.0.0.1")
    _ = withUnsafePointer(to: &addr) {
        bind(fd, UnsafeRawPointer($0).assumingMemoryBound(to: sockaddr.self), socklen_t(MemoryLayout<sockaddr_in>.size))
    }
    listen(fd, 1)
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    _ = withUnsafeMutablePointer(to: &addr) {
        getsockname(fd, UnsafeMutableRawPointer($0).assumingMemoryBound(to: sockaddr.self), &length)
    }
    let done = DispatchSemaphore(value: 0)
    let finished = UnsafeMutablePointer<UInt64>.allocate(capacity: 1)
    let box = Box(value: finished)
    Thread {
        let client = accept(fd, nil, nil)
        var buffer = [UInt8](repeating: 0, count: 256 * 1024)
        var got = 0
        while got < total {
            let n = buffer.withUnsafeMutableBytes { read(client, $0.baseAddress!, $0.count) }
            if n <= 0 { break }
            got += n
        }
        box.value.pointee = DispatchTime.now().uptimeNanoseconds
        close(client); close(fd)
        done.signal()
    }.start()
    return (Int(UInt16(bigEndian: addr.sin_port)), done, finished)
}

/// Opens a socket pair and waits until the connection is made.
func openAndWait(_ pair: BoundStreamPair) {
    let opened = DispatchSemaphore(value: 0)
    Task {
        do { try await pair.open() } catch { fatalError("connect failed: \(error)") }
        opened.signal()
    }
    opened.wait()
}

func tcpThroughSalut(total: Int, chunk: Int) -> Double {
    let (port, done, finished) = sink(total: total)
    defer { finished.deallocate() }
    let pair = SocketStreams.pair(toHost: "127.0.0.1", port: port)
    openAndWait(pair)  // both sides are timed from a made connection: the copy, not the set-up
    let block = [UInt8](repeating: 0x5A, count: chunk)
    let start = DispatchTime.now().uptimeNanoseconds
    var sent = 0
    while sent < total {
        let n = block.withUnsafeBufferPointer {
            pair.output.write($0.baseAddress!, maxLength: min(chunk, total - sent))
        }
        precondition(n > 0, "write failed: \(String(describing: pair.output.streamError))")
        sent += n
    }
    done.wait()
    pair.output.close()
    return Double(finished.pointee - start) / 1e9
}

func tcpRaw(total: Int, chunk: Int) -> Double {
    let (port, done, finished) = sink(total: total)
    defer { finished.deallocate() }
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    var addr = sockaddr_in()
    addr.sin_family = sa_family_t(AF_INET)
    addr.sin_port = UInt16(port).bigEndian
    addr.sin_addr.s_addr = inet_addr("127.0.0.1")
    _ = withUnsafePointer(to: &addr) {
        connect(
            fd, UnsafeRawPointer($0).assumingMemoryBound(to: sockaddr.self), socklen_t(MemoryLayout<sockaddr_in>.size))
    }
    // The same socket option Salut sets on every connection, so that the ratio measures Salut's
    // own cost, not Nagle's algorithm (which costs a blocking sender on loopback too).
    var on: Int32 = 1
    precondition(setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &on, socklen_t(MemoryLayout<Int32>.size)) == 0)
    let block = [UInt8](repeating: 0x5A, count: chunk)
    let start = DispatchTime.now().uptimeNanoseconds
    var sent = 0
    while sent < total {
        let n = block.withUnsafeBufferPointer {
            send(fd, $0.baseAddress!, min(chunk, total - sent), Int32(MSG_NOSIGNAL))
        }
        precondition(n > 0)
        sent += n
    }
    done.wait()
    close(fd)
    return Double(finished.pointee - start) / 1e9
}

let mib = option("--mib", 1024)
let chunk = option("--chunk", 16 * 1024)
let rounds = option("--rounds", 3)
let total = mib << 20
print("streams-bench: \(mib) MiB, \(chunk)-byte chunks, 64 KiB buffer, best of \(rounds)")
var ours: [Double] = [], theirs: [Double] = []
for _ in 0..<rounds {
    let (a, gotA) = boundPair(total: total, chunk: chunk)
    precondition(gotA == total, "bound pair lost bytes")
    let (b, gotB) = pipe(total: total, chunk: chunk)
    precondition(gotB == total, "pipe lost bytes")
    ours.append(a); theirs.append(b)
}
let best = (ours.min()!, theirs.min()!)
let rate = { (s: Double) in Double(total) / s / 1_048_576 }
print(String(format: "  bound stream pair  %7.0f MiB/s  (%.3f s)", rate(best.0), best.0))
print(String(format: "  OS pipe            %7.0f MiB/s  (%.3f s)", rate(best.1), best.1))
print(String(format: "  ratio bound/pipe   %.2f", best.1 / best.0))

var salutTCP: [Double] = [], rawTCP: [Double] = []
// Alternate which goes first in each round, so that neither always runs on a warmer machine.
for round in 0..<rounds {
    if round % 2 == 0 {
        salutTCP.append(tcpThroughSalut(total: total, chunk: chunk))
        rawTCP.append(tcpRaw(total: total, chunk: chunk))
    } else {
        rawTCP.append(tcpRaw(total: total, chunk: chunk))
        salutTCP.append(tcpThroughSalut(total: total, chunk: chunk))
    }
}
let tcpBest = (salutTCP.min()!, rawTCP.min()!)
print(
    "loopback TCP, \(mib) MiB in \(chunk)-byte writes to a POSIX sink, timed from a made connection, best of \(rounds):"
)
print(String(format: "  Salut OutputStream to host  %7.0f MiB/s  (%.3f s)", rate(tcpBest.0), tcpBest.0))
print(String(format: "  plain POSIX send loop       %7.0f MiB/s  (%.3f s)", rate(tcpBest.1), tcpBest.1))
print(String(format: "  ratio Salut/raw             %.2f", tcpBest.1 / tcpBest.0))

// Connection set-up, which the throughput figures above leave out: median of 50 connects to a
// listening socket, Salut (open() until the streams are open) against a blocking connect().
func setupListener() -> (fd: Int32, port: UInt16) {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    var addr = sockaddr_in()
    addr.sin_family = sa_family_t(AF_INET)
    addr.sin_addr.s_addr = inet_addr("127.0.0.1")
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    _ = withUnsafePointer(to: &addr) { bind(fd, UnsafeRawPointer($0).assumingMemoryBound(to: sockaddr.self), length) }
    listen(fd, 128)
    _ = withUnsafeMutablePointer(to: &addr) {
        getsockname(fd, UnsafeMutableRawPointer($0).assumingMemoryBound(to: sockaddr.self), &length)
    }
    return (fd, UInt16(bigEndian: addr.sin_port))
}

func median(_ values: [Double]) -> Double { values.sorted()[values.count / 2] }

let (setupFD, setupPort) = setupListener()
var salutSetup: [Double] = [], salutBlockingSetup: [Double] = [], rawSetup: [Double] = []
let one: [UInt8] = [0x2A]
for _ in 0..<200 {
    // Async: `try await pair.open()` until it returns (a task and a semaphore around it).
    var begin = DispatchTime.now().uptimeNanoseconds
    let pair = SocketStreams.pair(toHost: "127.0.0.1", port: Int(setupPort))
    openAndWait(pair)
    salutSetup.append(Double(DispatchTime.now().uptimeNanoseconds - begin) / 1e3)
    pair.input.close(); pair.output.close()
    close(accept(setupFD, nil, nil))

    // Blocking, the Apple way: open both streams, then the first write (1 byte) waits for the
    // connection and sends.
    begin = DispatchTime.now().uptimeNanoseconds
    let blocking = SocketStreams.pair(toHost: "127.0.0.1", port: Int(setupPort))
    blocking.input.open(); blocking.output.open()
    precondition(
        blocking.output.write(one, maxLength: 1) == 1,
        "first write failed: \(String(describing: blocking.output.streamError))")
    salutBlockingSetup.append(Double(DispatchTime.now().uptimeNanoseconds - begin) / 1e3)
    blocking.input.close(); blocking.output.close()
    close(accept(setupFD, nil, nil))

    // Baseline: socket(), blocking connect(), send() of the same byte.
    begin = DispatchTime.now().uptimeNanoseconds
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    var addr = sockaddr_in()
    addr.sin_family = sa_family_t(AF_INET)
    addr.sin_port = setupPort.bigEndian
    addr.sin_addr.s_addr = inet_addr("127.0.0.1")
    _ = withUnsafePointer(to: &addr) {
        connect(
            fd, UnsafeRawPointer($0).assumingMemoryBound(to: sockaddr.self), socklen_t(MemoryLayout<sockaddr_in>.size))
    }
    precondition(send(fd, one, 1, Int32(MSG_NOSIGNAL)) == 1)
    rawSetup.append(Double(DispatchTime.now().uptimeNanoseconds - begin) / 1e3)
    close(fd)
    close(accept(setupFD, nil, nil))
}
close(setupFD)
print("connection set-up to 127.0.0.1 until the first byte is sent, median of 200:")
print(String(format: "  Salut open(), first blocking write  %7.1f µs", median(salutBlockingSetup)))
print(String(format: "  Salut try await open()             %7.1f µs", median(salutSetup)))
print(String(format: "  socket(), connect(), send()        %7.1f µs", median(rawSetup)))
print(String(format: "  ratio Salut blocking / raw         %.2f", median(salutBlockingSetup) / median(rawSetup)))
