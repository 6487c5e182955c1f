import Foundation
import SalutDiscovery
import SalutTestSupport
import XCTest

/// A service type unique to one test, so tests never see each other's services.
func uniqueType(_ tag: String = "t") -> String {
    let suffix = String(UInt32.random(in: 0..<UInt32.max), radix: 36)
    return "_\(tag)\(suffix)".prefix(15 + 1) + "._tcp"
}

/// Browses `type` until `predicate` holds for the known set; returns that set.
func browse(
    _ type: String, until predicate: @escaping @Sendable (Set<DiscoveredService>) -> Bool,
    seconds: Double = 10, context: DiscoveryContext = .shared
) async throws -> Set<DiscoveredService> {
    try await withDeadline(seconds, "browse \(type)") {
        for try await update in try ServiceBrowser(type: type, context: context) where predicate(update.services) {
            return update.services
        }
        throw DeadlineExceeded(what: "browse ended", seconds: seconds)
    }
}
