import Foundation
@testable import SalutDiscovery
import SalutStreams
import SalutTestSupport
import XCTest

/// Resolutions of services of one type share one browser of the type in avahi-daemon: with one
/// each, resolving N services of a type cost the daemon N × N browse events (a link flooded with
/// names of one type kept it busy).
final class SharedResolutionTests: XCTestCase {
    func testResolutionsOfOneTypeShareOneBrowserAndFreeItWhenDone() async throws {
        let type = uniqueType("sr")
        let context = DiscoveryContext(label: "shared-resolution-test")
        var ads: [ServiceAdvertisement] = []
        for index in 0..<6 {
            ads.append(try await ServiceAdvertisement.publish(name: "Shared \(index)", type: type, port: 4000 + index))
        }
        defer { ads.forEach { $0.cancel() } }

        let resolving = Task {
            try await withThrowingTaskGroup(of: ResolvedService.self) { group in
                for index in 0..<6 {
                    group.addTask {
                        try await DiscoveredService(name: "Shared \(index)", type: type).resolve(
                            timeout: 10, context: context)
                    }
                }
                return try await group.reduce(into: []) { $0.append($1) }
            }
        }
        // While they run, one browser serves them all.
        try await eventually("one shared browser while resolving", interval: 0.005) {
            await Self.sharedBrowsers(in: context) == 1
        }
        let resolved = try await resolving.value
        XCTAssertEqual(
            Set(resolved.map(\.port)), Set((0..<6).map { UInt16(4000 + $0) }), "each service resolved to its own port")
        XCTAssertTrue(resolved.allSatisfy { !$0.addresses.isEmpty }, "\(resolved)")
        // Once every resolution has ended, the browser is freed.
        try await eventually("the shared browser freed") { await Self.sharedBrowsers(in: context) == 0 }
    }

    func testAResolutionStartedAfterAnotherHearsOfItsInstanceAtOnce() async throws {
        let type = uniqueType("sr")
        let context = DiscoveryContext(label: "shared-resolution-late")
        let first = try await ServiceAdvertisement.publish(name: "Early", type: type, port: 4100)
        defer { first.cancel() }
        let second = try await ServiceAdvertisement.publish(name: "Late", type: type, port: 4101)
        defer { second.cancel() }
        // A long-lived resolution of the first keeps the shared browser (and what it saw).
        let stream = try DiscoveredService(name: "Early", type: type).resolutions(context: context)
        var iterator = stream.makeAsyncIterator()
        let early = await iterator.next()
        XCTAssertEqual(early?.port, 4100)
        // The second, started now, learns where "Late" is from what the browser already saw.
        let late = try await DiscoveredService(name: "Late", type: type).resolve(timeout: 10, context: context)
        XCTAssertEqual(late.port, 4101)
        let browsers = await Self.sharedBrowsers(in: context)
        XCTAssertEqual(browsers, 1)
    }

    /// A type more crowded than the shared browser remembers: names it dropped while nobody
    /// watched them still resolve (by a resolver on any interface), while another resolution
    /// of the type keeps the browser.
    func testNamesTheSharedBrowserDidNotRememberStillResolve() async throws {
        let type = uniqueType("sr")
        let context = DiscoveryContext(label: "shared-resolution-crowd")
        await withCheckedContinuation { continuation in
            context.queue.async {
                context.rememberedInstanceNames = 2
                continuation.resume()
            }
        }
        var ads: [ServiceAdvertisement] = []
        for index in 0..<6 {
            ads.append(try await ServiceAdvertisement.publish(name: "Crowd \(index)", type: type, port: 4200 + index))
        }
        defer { ads.forEach { $0.cancel() } }
        let first = try DiscoveredService(name: "Crowd 0", type: type).resolutions(context: context)
        var iterator = first.makeAsyncIterator()
        let zero = await iterator.next()
        XCTAssertEqual(zero?.port, 4200)
        // The browser hears of all six and remembers two besides the watched one.
        try await eventually("names dropped by the shared browser") { await Self.dropsNames(in: context) }
        for index in 1..<6 {
            let resolved = try await DiscoveredService(name: "Crowd \(index)", type: type).resolve(
                timeout: 10, context: context)
            XCTAssertEqual(resolved.port, UInt16(4200 + index))
            XCTAssertFalse(resolved.addresses.isEmpty)
        }
    }

    /// Whether the context's shared browser went past its memory (read on its queue).
    private static func dropsNames(in context: DiscoveryContext) async -> Bool {
        await withCheckedContinuation { continuation in
            context.queue.async {
                continuation.resume(returning: context.instancePaths.values.contains { $0.mayMissNames })
            }
        }
    }

    /// How many shared type browsers the context holds (read on its queue).
    private static func sharedBrowsers(in context: DiscoveryContext) async -> Int {
        await withCheckedContinuation { continuation in
            context.queue.async { continuation.resume(returning: context.instancePaths.count) }
        }
    }
}
