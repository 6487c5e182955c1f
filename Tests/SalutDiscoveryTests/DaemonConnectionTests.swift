import CAvahi
import SalutDiscovery
import XCTest

/// The first real test: talk to the avahi-daemon over the system bus.
final class DaemonConnectionTests: XCTestCase {
    /// Straight through CAvahi, no Salut code in between: proves the shim links and the daemon
    /// from `Scripts/avahi-sandbox` (or the machine's own) answers.
    func testClientLibraryReachesTheDaemon() throws {
        guard let poll = avahi_simple_poll_new() else { return XCTFail("avahi_simple_poll_new failed") }
        defer { avahi_simple_poll_free(poll) }
        var error: Int32 = 0
        guard
            let client = avahi_client_new(avahi_simple_poll_get(poll), AvahiClientFlags(rawValue: 0), nil, nil, &error)
        else {
            let reason = String(cString: avahi_strerror(error))
            return XCTFail(
                "No avahi-daemon answers on the D-Bus system bus (\(reason)). "
                    + "Start one with 'Scripts/avahi-sandbox start'.")
        }
        defer { avahi_client_free(client) }
        let version = String(cString: avahi_client_get_version_string(client))
        let host = String(cString: avahi_client_get_host_name(client))
        XCTAssertTrue(version.hasPrefix("avahi "), "unexpected version string \(version)")
        XCTAssertFalse(host.isEmpty)
    }

    /// Through Salut's own dispatch-driven connection.
    func testContextReportsDaemonInfo() async throws {
        let context = DiscoveryContext(label: "test")
        let info: DaemonInfo
        do {
            info = try await context.daemonInfo(timeout: 5)
        } catch {
            return XCTFail("No avahi-daemon answers: \(error). Start one with 'Scripts/avahi-sandbox start'.")
        }
        XCTAssertTrue(info.version.hasPrefix("avahi "), info.version)
        XCTAssertEqual(info.hostNameFQDN, "\(info.hostName).\(info.domainName)")
        XCTAssertEqual(context.state, .running)
    }
}
