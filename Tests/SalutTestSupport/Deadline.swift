import Foundation
import SalutStreams

/// Runs `body`, failing with `DeadlineExceeded` if it takes longer than `seconds`. Returns at
/// the deadline even when `body` ignores cancellation (it is cancelled and left behind), so a
/// hang becomes a test failure, never a stuck test run.
public func withDeadline<T: Sendable>(
    _ seconds: Double, _ what: String = "operation",
    _ body: @escaping @Sendable () async throws -> T
) async throws -> T {
    let outcome = FirstOutcome<T>()
    return try await withCheckedThrowingContinuation { continuation in
        outcome.set(continuation)
        let work = Task {
            do { outcome.finish(.success(try await body())) } catch { outcome.finish(.failure(error)) }
        }
        Task {
            try? await Task.sleep(nanoseconds: UInt64(seconds * 1e9))
            if outcome.finish(.failure(DeadlineExceeded(what: what, seconds: seconds))) { work.cancel() }
        }
    }
}

public struct DeadlineExceeded: Error, CustomStringConvertible {
    public var what: String
    public var seconds: Double
    public init(what: String, seconds: Double) { self.what = what; self.seconds = seconds }
    public var description: String { "\(what) did not happen within \(seconds) s" }
}

/// Checks `condition` every `interval` until it holds or `timeout` seconds have passed: the one
/// way tests here wait for something another process or thread makes true.
/// - Returns: true when it held in time; false at the deadline (the caller asserts, saying what
///   it waited for).
@discardableResult
public func eventually(timeout: Double, interval: Double = 0.05, _ condition: () throws -> Bool) rethrows -> Bool {
    let deadline = Date().addingTimeInterval(timeout)
    while true {
        if try condition() { return true }
        guard Date() < deadline else { return false }
        Thread.sleep(forTimeInterval: interval)
    }
}

/// Takes a reading every `interval` until `settled(reading, previous)` holds (`previous`: the
/// reading before, nil for the first) or `timeout` seconds have passed: what a process holds once
/// it stops changing. Returns the last reading, settled or not (the caller asserts on it).
public func settledReading<Reading>(
    timeout: Double, interval: Double, _ read: () throws -> Reading, settled: (Reading, Reading?) -> Bool
) rethrows -> Reading {
    var previous: Reading?
    var latest: Reading?
    try eventually(timeout: timeout, interval: interval) {
        let reading = try read()
        defer { (previous, latest) = (reading, reading) }
        return settled(reading, previous)
    }
    return latest!  // eventually checks at least once
}

/// Checks `condition` every `interval` until it holds, from async code (the condition may
/// itself wait, as a resolution does); throws ``DeadlineExceeded`` naming `what` once `timeout`
/// seconds have passed, or what `condition` throws.
public func eventually(
    _ what: String, timeout: Double = 10, interval: Double = 0.01,
    _ condition: @escaping @Sendable () async throws -> Bool
) async throws {
    try await withDeadline(timeout, what) {
        while try await !condition() { try await Task.sleep(nanoseconds: UInt64(interval * 1e9)) }
    }
}
