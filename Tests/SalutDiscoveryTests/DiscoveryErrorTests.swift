import SalutDiscovery
import XCTest

/// `DiscoveryError` as a user's code meets it: made with the old case spellings, compared by
/// code, read for what it is about, printed.
final class DiscoveryErrorTests: XCTestCase {
    func testTheCodeSubjectAndReasonSayWhatTheMessageSays() {
        let error = DiscoveryError.invalidServiceType("_x", reason: "must end in ._tcp or ._udp")
        XCTAssertEqual(error.code, .invalidServiceType)
        XCTAssertEqual(error.subject, "_x")
        XCTAssertEqual(error.reason, "must end in ._tcp or ._udp")
        XCTAssertEqual(error.description, "invalid service type \"_x\": must end in ._tcp or ._udp")
        XCTAssertNil(error.avahiErrorNumber)

        let taken = DiscoveryError.collision(name: "Printer")
        XCTAssertEqual(taken.code, .collision)
        XCTAssertEqual(taken.subject, "Printer")
        XCTAssertEqual(DiscoveryError.invalidPort(70000).subject, "70000")
        XCTAssertEqual(DiscoveryError.invalidPort(70000).port, 70000)
        XCTAssertNil(taken.port)

        let avahi = DiscoveryError.avahi(code: -26, message: "Not permitted")
        XCTAssertEqual(avahi.code, .avahi)
        XCTAssertEqual(avahi.avahiErrorNumber, -26)
        XCTAssertEqual(avahi.description, "Not permitted (Avahi error -26)")
    }

    func testEqualityComparesWhatTheErrorIsAboutAndCodesCompareByKind() {
        XCTAssertEqual(DiscoveryError.timedOut, .timedOut)
        XCTAssertNotEqual(DiscoveryError.collision(name: "a"), .collision(name: "b"))
        XCTAssertEqual(DiscoveryError.collision(name: "a").code, DiscoveryError.collision(name: "b").code)
        XCTAssertNotEqual(DiscoveryError.timedOut.code, DiscoveryError.notFound.code)
        XCTAssertEqual(DiscoveryError.Code.unknownInterface.description, "unknownInterface")
    }

    func testAppleCodesFollowTheKind() {
        XCTAssertEqual(DiscoveryError.collision(name: "a").netServiceErrorCode, .collisionError)
        XCTAssertEqual(DiscoveryError.invalidDomain("x").netServiceErrorCode, .badArgumentError)
        XCTAssertEqual(DiscoveryError.listenFailed("in use").netServiceErrorCode, .unknownError)
        XCTAssertEqual(
            DiscoveryError.daemonUnavailable("no bus").netServiceErrorCode, .missingRequiredConfigurationError)
    }

    func testCatchAndSwitchByKind() {
        func fail(with error: DiscoveryError) throws { throw error }
        var caught: [String] = []
        do { try fail(with: .collision(name: "Kitchen")) } catch let error as DiscoveryError
            where error.code == .collision
        {
            caught.append(error.subject ?? "?")
        } catch { caught.append("other") }
        XCTAssertEqual(caught, ["Kitchen"])

        let error = DiscoveryError.notFound
        switch error {
        case .timedOut: XCTFail("not timed out")
        case .notFound: break
        default: XCTFail("\(error)")
        }
        switch error.code {
        case .collision, .timedOut: XCTFail("\(error)")
        case .notFound: break
        default: XCTFail("\(error)")
        }
    }
}
