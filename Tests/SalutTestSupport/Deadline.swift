import Foundation

/// Runs `body`, failing with `DeadlineExceeded` if it takes longer than `seconds`.
public func withDeadline<T: Sendable>(_ seconds: Double, _ what: String = "operation",
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

public struct DeadlineExceeded: Error, CustomStringConvertible {
    public var what: String
    public var seconds: Double
    public init(what: String, seconds: Double) { self.what = what; self.seconds = seconds }
    public var description: String { "\(what) did not happen within \(seconds) s" }
}
