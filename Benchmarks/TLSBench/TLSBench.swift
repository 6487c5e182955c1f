// tls-bench: TLS throughput through Salut's socket streams against a plain blocking OpenSSL
// SSL_write loop, both sending the same bytes to the same OpenSSL sink on loopback, in one run.
//
//   swift build -c release --product tls-bench
//   .build/release/tls-bench --mib 512 --chunk 16384 --rounds 5

import COpenSSL
import Dispatch
import Foundation
import Glibc
import SalutStreams

func option(_ name: String, _ fallback: Int) -> Int {
    guard let i = CommandLine.arguments.firstIndex(of: name), i + 1 < CommandLine.arguments.count,
        let value = Int(CommandLine.arguments[i + 1])
    else { return fallback }
    return value
}

/// Runs a shell command; stops the benchmark if it fails.
func shell(_ command: String) {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: "/bin/sh")
    process.arguments = ["-c", command]
    try! process.run()
    process.waitUntilExit()
    precondition(process.terminationStatus == 0, "failed: \(command)")
}

final class Stamp: @unchecked Sendable {
    // @unchecked: written by the sink thread before `done.signal()`, read after `done.wait()`.
    var finished: UInt64 = 0
    var received = 0
    let done = DispatchSemaphore(value: 0)
}

/// An OpenSSL server on 127.0.0.1 (blocking, one thread) that reads `total` bytes from one
/// connection and notes when the last one arrived.
func sink(context: OpaquePointer, total: Int) -> (port: Int, stamp: Stamp) {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    var addr = sockaddr_in()
    addr.sin_family = sa_family_t(AF_INET)
    addr.sin_addr.s_addr = inet_addr("127.0.0.1")
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    _ = withUnsafePointer(to: &addr) { bind(fd, UnsafeRawPointer($0).assumingMemoryBound(to: sockaddr.self), length) }
    precondition(listen(fd, 1) == 0)
    _ = withUnsafeMutablePointer(to: &addr) {
        getsockname(fd, UnsafeMutableRawPointer($0).assumingMemoryBound(to: sockaddr.self), &length)
    }
    let stamp = Stamp()
    let shared = UncheckedPointer(context)
    Thread {
        let client = accept(fd, nil, nil)
        let ssl = SSL_new(shared.pointer)!
        SSL_set_fd(ssl, client)
        precondition(SSL_accept(ssl) == 1, "sink handshake failed")
        var buffer = [UInt8](repeating: 0, count: 256 * 1024)
        while stamp.received < total {
            let n = SSL_read(ssl, &buffer, Int32(buffer.count))
            if n <= 0 { break }
            stamp.received += Int(n)
        }
        stamp.finished = DispatchTime.now().uptimeNanoseconds
        SSL_free(ssl)
        close(client); close(fd)
        stamp.done.signal()
    }.start()
    return (Int(UInt16(bigEndian: addr.sin_port)), stamp)
}

struct UncheckedPointer: @unchecked Sendable {
    // @unchecked: an SSL_CTX, fully configured before it is shared.
    let pointer: OpaquePointer
    init(_ pointer: OpaquePointer) { self.pointer = pointer }
}

func salut(context: OpaquePointer, pin: String, total: Int, chunk: Int) -> Double {
    let (port, stamp) = sink(context: context, total: total)
    let pair = SocketStreams.pair(toHost: "127.0.0.1", port: port, tls: TLSConfiguration(pinnedSHA256: [pin]))
    let block = [UInt8](repeating: 0x5A, count: chunk)
    // Both sides are timed from an established TLS connection: the copy, not the set-up.
    let opened = DispatchSemaphore(value: 0)
    Task {
        do { try await pair.open() } catch { fatalError("TLS connect failed: \(error)") }
        opened.signal()
    }
    opened.wait()
    let start = DispatchTime.now().uptimeNanoseconds
    var sent = 0
    while sent < total {
        let n = block.withUnsafeBufferPointer {
            pair.output.write($0.baseAddress!, maxLength: min(chunk, total - sent))
        }
        precondition(n > 0, "write failed: \(String(describing: pair.output.streamError))")
        sent += n
    }
    stamp.done.wait()
    precondition(stamp.received == total, "the sink got \(stamp.received) of \(total) bytes")
    pair.output.close()
    return Double(stamp.finished - start) / 1e9
}

func plainOpenSSL(context: OpaquePointer, total: Int, chunk: Int) -> Double {
    let (port, stamp) = sink(context: context, total: total)
    let client = SSL_CTX_new(TLS_client_method())!
    defer { SSL_CTX_free(client) }
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    var addr = sockaddr_in()
    addr.sin_family = sa_family_t(AF_INET)
    addr.sin_port = UInt16(port).bigEndian
    addr.sin_addr.s_addr = inet_addr("127.0.0.1")
    let block = [UInt8](repeating: 0x5A, count: chunk)
    _ = withUnsafePointer(to: &addr) {
        connect(
            fd, UnsafeRawPointer($0).assumingMemoryBound(to: sockaddr.self), socklen_t(MemoryLayout<sockaddr_in>.size))
    }
    // The socket option Salut sets on every connection, so that the ratio measures Salut's own
    // cost rather than Nagle's algorithm.
    var on: Int32 = 1
    precondition(setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &on, socklen_t(MemoryLayout<Int32>.size)) == 0)
    let ssl = SSL_new(client)!
    SSL_set_fd(ssl, fd)
    precondition(SSL_connect(ssl) == 1, "client handshake failed")
    let start = DispatchTime.now().uptimeNanoseconds
    var sent = 0
    while sent < total {
        let n = block.withUnsafeBufferPointer { SSL_write(ssl, $0.baseAddress!, Int32(min(chunk, total - sent))) }
        precondition(n > 0)
        sent += Int(n)
    }
    stamp.done.wait()
    precondition(stamp.received == total)
    SSL_free(ssl)
    close(fd)
    return Double(stamp.finished - start) / 1e9
}

let mib = option("--mib", 512)
let chunk = option("--chunk", 16 * 1024)
let rounds = option("--rounds", 5)
let total = mib << 20

let directory = FileManager.default.temporaryDirectory.appendingPathComponent("tls-bench-\(getpid())").path
shell(
    "mkdir -p \(directory) && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 "
        + "-subj /CN=localhost -keyout \(directory)/key.pem -out \(directory)/cert.pem 2>/dev/null")
defer { shell("rm -rf \(directory)") }
let server = SSL_CTX_new(TLS_server_method())!
precondition(SSL_CTX_use_certificate_chain_file(server, "\(directory)/cert.pem") == 1)
precondition(SSL_CTX_use_PrivateKey_file(server, "\(directory)/key.pem", SSL_FILETYPE_PEM) == 1)
let fingerprint = { () -> String in
    let pipe = Pipe()
    let process = Process()
    process.executableURL = URL(fileURLWithPath: "/bin/sh")
    process.arguments = ["-c", "openssl x509 -in \(directory)/cert.pem -outform der | openssl dgst -sha256 -r"]
    process.standardOutput = pipe
    try! process.run()
    process.waitUntilExit()
    return String(String(decoding: pipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self).prefix(64))
}()

print(
    "tls-bench: \(mib) MiB over TLS 1.3 on loopback in \(chunk)-byte writes to an OpenSSL sink, timed from an established connection, best of \(rounds)"
)
var ours: [Double] = [], theirs: [Double] = []
// Alternate which goes first in each round, so that neither always runs on a warmer machine.
for round in 0..<rounds {
    if round % 2 == 0 {
        ours.append(salut(context: server, pin: fingerprint, total: total, chunk: chunk))
        theirs.append(plainOpenSSL(context: server, total: total, chunk: chunk))
    } else {
        theirs.append(plainOpenSSL(context: server, total: total, chunk: chunk))
        ours.append(salut(context: server, pin: fingerprint, total: total, chunk: chunk))
    }
}
let best = (ours.min()!, theirs.min()!)
let rate = { (s: Double) in Double(total) / s / 1_048_576 }
print(String(format: "  Salut TLS OutputStream   %7.0f MiB/s  (%.3f s)", rate(best.0), best.0))
print(String(format: "  plain OpenSSL SSL_write  %7.0f MiB/s  (%.3f s)", rate(best.1), best.1))
print(String(format: "  ratio Salut/OpenSSL      %.2f", best.1 / best.0))
SSL_CTX_free(server)
