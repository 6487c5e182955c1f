import Foundation
import HelloPeersCore
import Salut
import SalutStreams
import XCTest

/// The library's products, used from another package's tests.
final class HelloPeersTests: XCTestCase {
    func testTXTRecordsAndErrorsAreUsableFromOutside() throws {
        let record = try TXTRecord(["v": "1"])
        XCTAssertEqual(record.string(for: "V"), "1")
        XCTAssertThrowsError(try ServiceAdvertisement.validate(name: "x", type: "no-underscore", port: 1)) { error in
            XCTAssertEqual((error as? DiscoveryError)?.code, .invalidServiceType)
        }
    }

    func testABoundPairCarriesTheGreeting() async throws {
        let pair = BoundStreamPair(bufferSize: 1024)
        pair.input.open()
        pair.output.open()
        try await pair.output.write(Greeting.message)
        pair.output.close()
        var received = Data()
        for try await chunk in pair.input.chunks { received.append(chunk) }
        XCTAssertEqual(received, Greeting.message)
    }

    /// The library tour's error example (docs/library-tour.md), compiled here so that it stays true (not run: it publishes).
    func readmeErrorExample() async {
        do {
            _ = try await DiscoveryContext.shared.daemonInfo(timeout: 3)  // no daemon: .daemonUnavailable now
            let ad = try await ServiceAdvertisement.publish(
                name: "Kitchen", type: "_demo._tcp", port: 7777,
                allowRename: false)
            print("published as", ad.name)
        } catch let error as DiscoveryError {
            switch error.code {
            case .collision: print("\(error.subject ?? "the name") is taken")
            case .daemonUnavailable: print("start avahi-daemon:", error.reason ?? "")
            default: print(error)
            }
        } catch {
            print(error)
        }
    }
}
