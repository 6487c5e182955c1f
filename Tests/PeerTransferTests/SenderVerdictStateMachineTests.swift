import Foundation
import XCTest

@testable import PeerTransferCore

/// How a sender checks the receiver's verdicts, without a network: a verdict is believed only
/// where it can be true, and a summary is no proof for files it leaves out.
final class SenderVerdictStateMachineTests: XCTestCase {
    typealias Machine = Sender.VerdictStateMachine

    /// Two files and a folder, all accepted but the second file.
    let entries = [
        ManifestEntry(path: "a.txt", kind: .file, size: 10, mode: 0o644, modified: 0),
        ManifestEntry(path: "b.txt", kind: .file, size: 10, mode: 0o644, modified: 0),
        ManifestEntry(path: "folder", kind: .directory, size: 0, mode: 0o755, modified: 0),
        ManifestEntry(path: "c.txt", kind: .file, size: 10, mode: 0o644, modified: 0),
    ]

    func machine() -> Machine { Machine(entries: entries, accepted: [0, 2, 3]) }

    func result(_ index: Int, verified: Bool = true, error: String? = nil) -> Frame {
        Frame.message(
            .fileResult,
            FileResult(index: index, verified: verified, storedAs: verified ? "stored \(index)" : nil, error: error))
    }

    let summary = Frame.message(.summary, Summary(verified: 2, failed: 0))

    func violation(_ action: Machine.Action, file: StaticString = #filePath, line: UInt = #line) -> String {
        guard case .fail(let error) = action, error.wireCode == "protocol" else {
            XCTFail("expected a protocol violation, got \(action)", file: file, line: line)
            return ""
        }
        return error.message
    }

    func testVerdictsOnFilesWhoseEndWasSentAreReportedAndTheSummaryEnds() {
        var machine = machine()
        machine.fileEnding(0, withdrawn: false)
        XCTAssertEqual(machine.received(result(0)), .verified(index: 0, path: "a.txt", storedAs: "stored 0"))
        machine.fileEnding(3, withdrawn: false)
        XCTAssertEqual(
            machine.received(result(3, verified: false, error: "disk \u{1b}[2Jfull")),
            .failed(index: 3, path: "c.txt", reason: "disk \\x1b[2Jfull"), "the peer's words are escaped")
        XCTAssertEqual(machine.received(summary), .summarized(verified: 1, failed: ["c.txt: disk \\x1b[2Jfull"]))
    }

    func testAVerdictBeforeTheFilesEndIsALie() {
        var machine = machine()
        XCTAssertTrue(violation(machine.received(result(0))).contains("whose end was not sent yet"))
    }

    func testAVerdictOnAFileNotAcceptedOrOnAFolderIsALie() {
        for index in [1, 2, 9] {
            var machine = machine()
            machine.fileEnding(index, withdrawn: false)
            XCTAssertTrue(
                violation(machine.received(result(index))).contains("which is not an accepted file"), "entry \(index)")
        }
    }

    func testAWithdrawnFileCannotBeVerifiedButMayFail() {
        var lying = machine()
        lying.fileEnding(0, withdrawn: true)
        XCTAssertTrue(violation(lying.received(result(0))).contains("though this sender withdrew it"))

        var honest = machine()
        honest.fileEnding(0, withdrawn: true)
        XCTAssertEqual(
            honest.received(result(0, verified: false, error: "withdrawn")),
            .failed(index: 0, path: "a.txt", reason: "withdrawn"))
    }

    func testASecondVerdictOnOneFileIsALie() {
        var machine = machine()
        machine.fileEnding(0, withdrawn: false)
        _ = machine.received(result(0))
        XCTAssertTrue(violation(machine.received(result(0, verified: false))).contains("a second result for entry 0"))
    }

    func testEachAcceptedFileTheSummaryLeavesOutCountsAsOneFailedFile() {
        var machine = machine()
        machine.fileEnding(0, withdrawn: false)
        _ = machine.received(result(0))
        XCTAssertEqual(
            machine.received(summary),
            .summarized(verified: 1, failed: ["c.txt: the receiver ended without saying it was verified"]))
        var silent = self.machine()
        XCTAssertEqual(
            silent.received(summary),
            .summarized(
                verified: 0,
                failed: [
                    "a.txt: the receiver ended without saying it was verified",
                    "c.txt: the receiver ended without saying it was verified",
                ]))
    }

    /// An answer to the offer said after it, or a sender's own `cancelled`, is a broken
    /// protocol: not a decline, not a cancellation by this end's user.
    func testAnAnswerToTheOfferSaidAfterItIsAProtocolViolationNotADecline() {
        for code in ["declined", "declined-hook", "declined-policy", "no-answer", "cannot-ask", "trust", "cancelled"] {
            var machine = machine()
            let late = Frame.message(.failure, Failure(code: code, message: "changed my mind"))
            XCTAssertTrue(violation(machine.received(late)).contains("accepted the offer, then sent"), code)
        }
    }

    func testTheReceiversFailureIsItsOwnErrorAndAnEndBeforeTheSummaryIsAnError() {
        var failing = machine()
        let failure = Frame.message(.failure, Failure(code: "space", message: "full"))
        guard case .fail(let error) = failing.received(failure) else { return XCTFail("not a failure") }
        XCTAssertEqual(error.wireCode, "space")
        XCTAssertEqual(error.message, "the receiver says: full")

        var closing = machine()
        guard case .fail(let ended) = closing.connectionEnded() else { return XCTFail("not a failure") }
        XCTAssertTrue(ended.message.contains("closed the connection before its summary"), ended.message)
    }

    func testAnyOtherMessageOrAMalformedOneIsAProtocolViolation() {
        var unexpected = machine()
        XCTAssertTrue(
            violation(unexpected.received(Frame.message(.answer, Answer(accepted: [])))).contains("unexpected answer"))
        var malformed = machine()
        XCTAssertTrue(
            violation(malformed.received(Frame(kind: .fileResult, payload: Data("{".utf8)))).contains("malformed"))
    }
}
