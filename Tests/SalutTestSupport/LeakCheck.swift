import Foundation
import Glibc
import XCTest

/// The base of the streams and session test cases: under AddressSanitizer, it runs the leak
/// check when the last test has finished, while XCTest still holds its own objects.
///
/// LeakSanitizer's usual check at exit would also report swift-corelibs-xctest's test-case graph
/// (its test cases and runs hold each other and are never freed), and everything a test case
/// holds. Checked here instead, what XCTest holds is still reachable, and whatever Salut lost is
/// reported. The check runs once; later checks (the one at exit) do nothing.
open class SalutTestCase: XCTestCase {
    override open class func setUp() {
        super.setUp()
        LeakCheckAtEnd.install()
    }
}

/// Observes the test run and calls LeakSanitizer's check when the bundle is done (only in a
/// build with AddressSanitizer, where the function exists).
final class LeakCheckAtEnd: NSObject, XCTestObservation {
    private static let installed: Bool = {
        XCTestObservationCenter.shared.addTestObserver(LeakCheckAtEnd())
        return true
    }()

    static func install() { _ = installed }

    func testBundleDidFinish(_ testBundle: Bundle) {
        // RTLD_DEFAULT is the null handle on glibc: look the function up in the whole process.
        guard let symbol = dlsym(nil, "__lsan_do_leak_check") else { return }
        let check = unsafeBitCast(symbol, to: (@convention(c) () -> Void).self)
        check()
    }
}
