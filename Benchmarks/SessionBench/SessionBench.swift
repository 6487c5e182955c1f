// session-bench: many stream tasks in one PeerSession against one session per task, in one run.
// Each task connects to a local TLS echo listener, starts TLS, sends 1 KiB, reads it back and
// closes. Prints connections opened and wall time for both ways.
//
//   swift build -c release --product session-bench
//   .build/release/session-bench --tasks 200 --trust roots

import Foundation
import SalutSession
import SalutStreams

func option(_ name: String, _ fallback: String) -> String {
    guard let i = CommandLine.arguments.firstIndex(of: name), i + 1 < CommandLine.arguments.count else {
        return fallback
    }
    return CommandLine.arguments[i + 1]
}

func shell(_ command: String) -> String {
    let process = Process()
    let pipe = Pipe()
    process.executableURL = URL(fileURLWithPath: "/bin/sh")
    process.arguments = ["-c", command]
    process.standardOutput = pipe
    try! process.run()
    let output = pipe.fileHandleForReading.readDataToEndOfFile()
    process.waitUntilExit()
    precondition(process.terminationStatus == 0, "failed: \(command)")
    return String(decoding: output, as: UTF8.self)
}

final class Counter: @unchecked Sendable {
    // @unchecked: its only state, `value`, is a `Locked` box.
    private let value = Locked(0)
    func add() { value.withLock { $0 += 1 } }
    var current: Int { value.value }
}

let tasks = Int(option("--tasks", "200")) ?? 200
let trust = option("--trust", "roots")  // roots: a CA file to load; pin: a fingerprint
let directory = FileManager.default.temporaryDirectory.appendingPathComponent("session-bench-\(getpid())").path
_ = shell(
    "mkdir -p \(directory) && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 "
        + "-subj /CN=localhost -addext subjectAltName=IP:127.0.0.1 -keyout \(directory)/key.pem -out \(directory)/cert.pem 2>/dev/null"
)
// A realistic roots file: the system bundle plus our certificate.
_ = shell("cat /etc/ssl/certs/ca-certificates.crt \(directory)/cert.pem > \(directory)/roots.pem")
let pin = String(shell("openssl x509 -in \(directory)/cert.pem -outform der | openssl dgst -sha256 -r").prefix(64))
defer { _ = shell("rm -rf \(directory)") }

let accepted = Counter()
// Every task of a session-per-task round connects at once, all from 127.0.0.1: room for all of
// them setting up (the default, 64, cuts the oldest of one address to make room, as it would a
// flood).
let listener = try StreamListener(
    port: 0, tls: .server(certificateChainFile: "\(directory)/cert.pem", privateKeyFile: "\(directory)/key.pem"),
    limits: ConnectionLimits(maximumConnectionsSettingUp: tasks + 16))
listener.accept { connection in
    accepted.add()
    Task {
        try await connection.streams.open()
        for try await chunk in connection.input.chunks { try await connection.output.write(chunk) }
        connection.output.close()
    }
}
// (The listener runs TLS from the start; tasks connect and then start TLS, which a TLS server
// answers the same way.)

let configuration = { () -> PeerSessionConfiguration in
    var configuration = PeerSessionConfiguration.ephemeral
    configuration.trustPolicy = trust == "pin" ? .pinned([pin]) : .roots(file: "\(directory)/roots.pem")
    configuration.maximumConnectionsPerHost = 16
    return configuration
}()
let payload = Data(repeating: 0x42, count: 1024)

func run(_ task: PeerStreamTask) async throws {
    task.resume()
    try await task.secureConnection()
    try await task.write(payload, timeout: 30)
    task.closeWrite()
    var got = 0
    while true {
        let (chunk, atEnd) = try await task.readData(ofMinLength: 1, maxLength: 4096, timeout: 30)
        got += chunk.count
        if atEnd { break }
    }
    precondition(got == payload.count, "lost bytes")
}

func measure(_ label: String, makeTask: @escaping @Sendable () -> PeerStreamTask) async throws -> (Double, Int) {
    let before = accepted.current
    let start = Date()
    try await withThrowingTaskGroup(of: Void.self) { group in
        for _ in 0..<tasks { group.addTask { try await run(makeTask()) } }
        try await group.waitForAll()
    }
    return (Date().timeIntervalSince(start), accepted.current - before)
}

let port = Int(listener.port)
let shared = PeerSession(configuration: configuration)
let (oneTime, oneConnections) = try await measure("one session") {
    shared.streamTask(withHostName: "127.0.0.1", port: port)
}
let (perTime, perConnections) = try await measure("session per task") {
    PeerSession(configuration: configuration).streamTask(withHostName: "127.0.0.1", port: port)
}
print(
    "session-bench: \(tasks) TLS stream tasks (1 KiB echoed each), trust \(trust == "pin" ? "pinned key" : "roots file (system bundle + 1)")"
)
print(String(format: "  one session, %d tasks        %6.3f s  %4d connections opened", tasks, oneTime, oneConnections))
print(String(format: "  one session per task         %6.3f s  %4d connections opened", perTime, perConnections))
print(String(format: "  ratio per-task/one-session   %.2f", perTime / oneTime))
listener.stop()
