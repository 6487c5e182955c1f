import Foundation
import SalutDiscovery
import SalutStreams
import SalutTestSupport
import XCTest

/// The daemon is killed and started again while a publication and a browser are live: the
/// browser reports the service removed, and within 5 s of the daemon's return the service is
/// published again and found again, with no call from the user.
final class DaemonRestartTests: XCTestCase {
    static let root = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    private static func restartDaemon() throws {
        let process = Process()
        process.executableURL = Self.root.appendingPathComponent("Scripts/avahi-sandbox")
        process.arguments = ["restart-daemon"]
        try process.run()
        eventually(timeout: 30, interval: 0.05) { !process.isRunning }
        XCTAssertFalse(process.isRunning)
        XCTAssertEqual(process.terminationStatus, 0, "avahi-sandbox restart-daemon failed")
    }

    func testPublicationAndBrowserSurviveADaemonRestart() async throws {
        guard ProcessInfo.processInfo.environment["SALUT_SANDBOX_RESTARTABLE"] == "1" else {
            throw XCTSkip(
                "needs the sandbox's own avahi-daemon (Scripts/test sets SALUT_SANDBOX_RESTARTABLE=1); never restarts a machine's daemon"
            )
        }
        let context = DiscoveryContext(label: "restart")
        let type = uniqueType("r")
        let ad = try await ServiceAdvertisement.publish(name: "Phoenix", type: type, port: 4000, context: context)
        let states = Locked<[ConnectionState]>([])
        let stateTask = Task {
            for await state in context.states { states.withLock { $0.append(state) } }
        }
        defer { stateTask.cancel() }

        let phoenix = DiscoveredService(name: "Phoenix", type: type)
        let timeline = try await withDeadline(40, "restart cycle") { () -> [String] in
            var timeline: [String] = []
            var restarted: Date?
            for try await update in try ServiceBrowser(type: type, context: context) {
                for change in update.changes {
                    switch change {
                    case .added(phoenix): timeline.append("added")
                    case .removed(phoenix): timeline.append("removed")
                    default: break
                    }
                }
                if timeline == ["added"] {
                    try Self.restartDaemon()
                    restarted = Date()
                }
                if timeline == ["added", "removed", "added"], let restarted {
                    let back = Date().timeIntervalSince(restarted)
                    XCTAssertLessThan(back, 5, "found again \(back) s after the daemon came back")
                    return timeline
                }
            }
            return timeline
        }
        XCTAssertEqual(timeline, ["added", "removed", "added"])
        XCTAssertEqual(ad.name, "Phoenix")
        let seen = states.value
        XCTAssertTrue(seen.contains(.connecting), "the state stream reports the lost daemon: \(seen)")
        XCTAssertEqual(seen.last, .running)
        // And it resolves again through the new daemon.
        let resolved = try await phoenix.resolve(context: context)
        XCTAssertEqual(resolved.port, 4000)
    }

    /// `netsvc publish` and `netsvc browse` keep running across a daemon restart: the browser
    /// prints the removal, then the service again once the publisher has re-registered it.
    func testNetsvcPublishAndBrowseCarryOnAcrossARestart() throws {
        guard ProcessInfo.processInfo.environment["SALUT_SANDBOX_RESTARTABLE"] == "1" else {
            throw XCTSkip("needs the sandbox's own avahi-daemon (Scripts/test sets SALUT_SANDBOX_RESTARTABLE=1)")
        }
        let type = uniqueType("n")
        let publisher = try Foreign([NetsvcTests.netsvc, "publish", "Stayer", type, "4100"])
        defer { publisher.stop() }
        XCTAssertTrue(publisher.waitForOutput(containing: "published", seconds: 10), publisher.output)
        let browser = try Foreign([NetsvcTests.netsvc, "browse", type])
        defer { browser.stop() }
        XCTAssertTrue(browser.waitForOutput(containing: "+ Stayer", seconds: 10), browser.output)
        try Self.restartDaemon()
        XCTAssertTrue(browser.waitForOutput(containing: "- Stayer", seconds: 20), browser.output)
        eventually(timeout: 20, interval: 0.05) { browser.output.components(separatedBy: "+ Stayer").count >= 3 }
        XCTAssertEqual(
            browser.output.components(separatedBy: "+ Stayer").count, 3,
            "seen again after the restart: \(browser.output)")
        XCTAssertTrue(publisher.process.isRunning, "the publisher carried on")
        XCTAssertTrue(browser.process.isRunning, "the browser carried on")
    }
}
