import Foundation
import SalutDiscovery
import SalutTestSupport
import XCTest

/// Connections to the daemon opened, used and closed on several queues at once.
///
/// Avahi asks for writability on its D-Bus socket and drops the wish after nearly every message,
/// and closes the socket as soon as it has freed the watch on it. Salut's poll adapter used to
/// watch that socket with libdispatch read and write sources, whose cancellation completes later:
/// libdispatch was left holding a descriptor number the kernel had already handed out again, and
/// when the new holder was watched with a dispatch source too (a test's child pipe, an app's
/// `FileHandle.readabilityHandler`), the process died in libdispatch ("source finalized twice").
/// A CI run died so. The adapter now watches on Salut's readiness loop, done with
/// a descriptor when `cancel()` returns. This test churns the adapter (every watch made, changed
/// and freed hundreds of times) and checks each connection answered and every descriptor came
/// back; the crash itself needs a second party using dispatch sources, which on this libdispatch
/// can crash on its own (swift-corelibs-libdispatch #949), so no test here can wait for it.
final class DaemonSocketChurnTests: XCTestCase {
    func testManyConnectionsComeAndGoOnSeveralQueuesAndGiveBackTheirDescriptors() async throws {
        let probe = DiscoveryContext(label: "probe")
        do { _ = try await probe.daemonInfo(timeout: 5) } catch { throw XCTSkip("no avahi-daemon answers: \(error)") }
        // One round first: libdispatch makes a timer descriptor of its own for each kind of
        // timer the first time one is asked for, and keeps it.
        _ = try await Self.round()
        // So does the wait at the end (its interval's sleep, its deadline's): asked for here
        // first, before counting.
        let warmUp = ContinuousClock.now
        try await eventually("the timers of the wait", interval: 0.01) {
            ContinuousClock.now - warmUp > .milliseconds(30)
        }
        let before = Self.openDescriptors()

        var answered = 0
        for _ in 0..<40 {
            answered += try await Self.round()
        }
        XCTAssertEqual(answered, 240, "every connection reached the daemon and said which it is")

        // A context's queue may still be freeing its client just after the last await.
        do {
            try await eventually("descriptors back to \(before) after 240 closed connections", interval: 0.05) {
                Self.openDescriptors() <= before
            }
        } catch {
            XCTFail("\(error): \(Self.openDescriptors()) open")
        }

    }

    /// Six connections made at once, each asked for the daemon's version and dropped; how many
    /// answered.
    private static func round() async throws -> Int {
        try await withThrowingTaskGroup(of: Int.self) { group in
            for index in 0..<6 {
                group.addTask {
                    let context = DiscoveryContext(label: "churn-\(index)")
                    let info = try await context.daemonInfo(timeout: 10)
                    return info.version.isEmpty ? 0 : 1
                }
            }
            return try await group.reduce(0, +)
        }
    }

    private static func openDescriptors() -> Int {
        ((try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? []).count
    }
}
