import Foundation
import SalutDiscovery
import XCTest

/// Runs `body`, failing with `DeadlineExceeded` if it takes longer than `seconds`.
func withDeadline<T: Sendable>(_ seconds: Double, _ what: String = "operation",
                               _ body: @escaping @Sendable () async throws -> T) async throws -> T {
    try await withThrowingTaskGroup(of: T.self) { group in
        group.addTask { try await body() }
        group.addTask {
            try await Task.sleep(nanoseconds: UInt64(seconds * 1e9))
            throw DeadlineExceeded(what: what, seconds: seconds)
        }
        let result = try await group.next()!
        group.cancelAll()
        return result
    }
}

struct DeadlineExceeded: Error, CustomStringConvertible {
    var what: String
    var seconds: Double
    var description: String { "\(what) did not happen within \(seconds) s" }
}

/// A service type unique to one test, so tests never see each other's services.
func uniqueType(_ tag: String = "t") -> String {
    let suffix = String(UInt32.random(in: 0..<UInt32.max), radix: 36)
    return "_\(tag)\(suffix)".prefix(15 + 1) + "._tcp"
}

/// Browses `type` until `predicate` holds for the known set; returns that set.
func browse(_ type: String, until predicate: @escaping @Sendable (Set<DiscoveredService>) -> Bool,
            seconds: Double = 10, context: DiscoveryContext = .shared) async throws -> Set<DiscoveredService> {
    try await withDeadline(seconds, "browse \(type)") {
        for try await update in try ServiceBrowser(type: type, context: context) where predicate(update.services) {
            return update.services
        }
        throw DeadlineExceeded(what: "browse ended", seconds: seconds)
    }
}

/// A foreign process (avahi-publish, avahi-browse), with its output collected.
final class Foreign: @unchecked Sendable {
    // @unchecked: `buffer` is guarded by `lock`.
    let process = Process()
    private let lock = NSLock()
    private var buffer = Data()

    init(_ arguments: [String]) throws {
        // `env --default-signal` unblocks every signal: a child spawned from a libdispatch
        // thread would otherwise inherit its blocked SIGTERM and ignore `terminate()`.
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["--default-signal"] + arguments
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = pipe
        pipe.fileHandleForReading.readabilityHandler = { [weak self] handle in
            let chunk = handle.availableData
            guard let self, !chunk.isEmpty else { return }
            self.lock.lock(); self.buffer.append(chunk); self.lock.unlock()
        }
        try process.run()
    }

    var output: String {
        lock.lock(); defer { lock.unlock() }
        return String(decoding: buffer, as: UTF8.self)
    }

    func waitForOutput(containing text: String, seconds: Double) -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            if output.contains(text) { return true }
            Thread.sleep(forTimeInterval: 0.02)
        }
        return false
    }

    /// Waits for exit (up to `seconds`) and returns the output.
    func finish(seconds: Double = 20) -> String {
        let deadline = Date().addingTimeInterval(seconds)
        while process.isRunning && Date() < deadline { Thread.sleep(forTimeInterval: 0.02) }
        if process.isRunning { process.terminate() }
        Thread.sleep(forTimeInterval: 0.05)
        return output
    }

    /// Terminates the process and waits (at most 5 s, then SIGKILL) for it to go. Polls rather
    /// than calling `waitUntilExit`, which spins the caller's run loop and can stall off the
    /// main thread.
    func stop() {
        guard process.isRunning else { return }
        process.terminate()
        let deadline = Date().addingTimeInterval(5)
        while process.isRunning && Date() < deadline { Thread.sleep(forTimeInterval: 0.01) }
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
    }

    deinit { stop() }
}
