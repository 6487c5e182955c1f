import Foundation
import XCTest

/// A host of the lan-lab (`Scripts/lan-lab up N`), for tests that cross a (virtual) network.
///
/// Lab tests run only when `SALUT_LAB=1` (set by `Scripts/test` after it brings the lab up);
/// elsewhere they are skipped with that reason.
struct LabHost {
    let name: String

    static let packageRoot = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    static func requireLab() throws {
        guard ProcessInfo.processInfo.environment["SALUT_LAB"] == "1" else {
            throw XCTSkip("lan-lab tests run from Scripts/test, which brings the lab up (SALUT_LAB=1)")
        }
    }

    /// Starts `arguments` inside this host; stdout and stderr are collected in the returned job.
    func start(_ arguments: [String]) throws -> LabJob {
        let process = Process()
        // `env --default-signal` unblocks every signal, so that `stop()`'s SIGTERM reaches the
        // command (a child of a libdispatch thread inherits its blocked signals).
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["--default-signal", Self.packageRoot.appendingPathComponent("Scripts/lan-lab").path, "exec", name] + arguments
        let job = LabJob(process: process)
        try process.run()
        return job
    }

    /// Runs `arguments` inside this host to completion (killed after `timeout` seconds) and
    /// returns its standard output.
    func run(_ arguments: [String], timeout: TimeInterval = 20) throws -> String {
        let job = try start(arguments)
        guard job.wait(timeout: timeout) else {
            job.stop()
            throw LabError.timedOut(arguments.joined(separator: " "))
        }
        return job.output
    }
}

enum LabError: Error { case timedOut(String) }

/// A process running in a lab host.
final class LabJob: @unchecked Sendable {
    // @unchecked: `buffer` is guarded by `lock`; `process` is only started and stopped.
    let process: Process
    private let lock = NSLock()
    private var buffer = Data()
    private let done = DispatchSemaphore(value: 0)

    init(process: Process) {
        self.process = process
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = pipe
        pipe.fileHandleForReading.readabilityHandler = { [weak self] handle in
            let chunk = handle.availableData
            guard let self, !chunk.isEmpty else { return }
            self.lock.lock(); self.buffer.append(chunk); self.lock.unlock()
        }
        process.terminationHandler = { [done] _ in done.signal() }
    }

    var output: String {
        lock.lock(); defer { lock.unlock() }
        return String(decoding: buffer, as: UTF8.self)
    }

    /// Waits for the process to exit; false when it is still running after `timeout` seconds.
    func wait(timeout: TimeInterval) -> Bool {
        guard done.wait(timeout: .now() + timeout) == .success else { return false }
        done.signal()
        // Let the pipe's last bytes arrive.
        Thread.sleep(forTimeInterval: 0.05)
        return true
    }

    /// Waits until the output contains `text`; false after `timeout` seconds.
    func waitForOutput(containing text: String, timeout: TimeInterval) -> Bool {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            if output.contains(text) { return true }
            Thread.sleep(forTimeInterval: 0.02)
        }
        return output.contains(text)
    }

    func stop() {
        if process.isRunning { process.terminate() }
        _ = wait(timeout: 5)
    }
}
