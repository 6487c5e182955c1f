import Glibc
import SalutStreams
import SalutTestSupport
import XCTest

/// `SocketStreamError`, `TLSError` and `StreamFailure` as a user's code meets them.
final class StreamErrorTests: SalutTestCase {
    func testATLSFailureIsReadThroughItsCodeAndCarriesTheFingerprint() {
        let error = SocketStreamError.tls(.pinMismatch(presented: "ab12"))
        XCTAssertEqual(error.code, .tls)
        XCTAssertEqual(error.tlsError?.code, .pinMismatch)
        XCTAssertEqual(error.tlsError?.presentedFingerprint, "ab12")
        XCTAssertEqual(error.description, "TLS peer certificate (SHA-256 ab12) matches no pinned fingerprint")
        XCTAssertNil(SocketStreamError.cancelled.tlsError)

        let load = TLSError.cannotLoad(file: "/k.pem", reason: "no such readable file")
        XCTAssertEqual(load.file, "/k.pem")
        XCTAssertEqual(load.reason, "no such readable file")
        XCTAssertNil(load.presentedFingerprint)
    }

    func testSystemErrorsKeepTheCallAndErrno() {
        let error = SocketStreamError.system(call: "bind", errno: EADDRINUSE, message: "Address already in use")
        XCTAssertEqual(error.code, .system)
        XCTAssertEqual(error.systemCall, "bind")
        XCTAssertEqual(error.errorNumber, EADDRINUSE)
        XCTAssertEqual(error.reason, "Address already in use")
        XCTAssertEqual(error.description, "bind failed: Address already in use (errno \(EADDRINUSE))")
    }

    func testTargetsAreTheSubjectAndKindsCompareWithoutThem() {
        let refused = SocketStreamError.connectionRefused("127.0.0.1:9")
        XCTAssertEqual(refused.subject, "127.0.0.1:9")
        XCTAssertEqual(refused.code, SocketStreamError.connectionRefused("[::1]:9").code)
        XCTAssertNotEqual(refused, .connectionRefused("[::1]:9"))
        XCTAssertEqual(SocketStreamError.nameNotFound("x.invalid", detail: "no addresses").reason, "no addresses")
        XCTAssertEqual(StreamFailure.readerClosed, .readerClosed)
        XCTAssertNotEqual(StreamFailure.readerClosed, .notOpen)
    }

    func testBoundPairFailuresHaveACodeToo() {
        XCTAssertEqual(StreamFailure.notOpen.code, .notOpen)
        XCTAssertEqual(StreamFailure.Code.readerClosed.description, "readerClosed")
        XCTAssertEqual(StreamFailure.readerClosed.description, "the reading end of the stream pair was closed")
    }
}
