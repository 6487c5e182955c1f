import Foundation
import Salut
import XCTest

@testable import PeerTransferCore

/// The sender's side of the conversation, without a network: what it offers, counts, sends
/// and reports at each step, and how it names the way a send ended.
final class SenderConversationStateMachineTests: XCTestCase {
    typealias Machine = Sender.ConversationStateMachine

    /// Three files and a folder.
    let entries = [
        ManifestEntry(path: "a.bin", kind: .file, size: 1000, mode: 0o644, modified: 0),
        ManifestEntry(path: "b.bin", kind: .file, size: 500, mode: 0o644, modified: 0),
        ManifestEntry(path: "folder", kind: .directory, size: 0, mode: 0o755, modified: 0),
        ManifestEntry(path: "folder/c.bin", kind: .file, size: 300, mode: 0o644, modified: 0),
    ]

    let hello = Hello(protocolVersion: TransferLimits.protocolVersion, device: "r", name: "Receiver")

    /// The machine once the receiver answered `answer`, what it asked the shell to prepare.
    func answered(_ answer: Answer) -> (Machine, Answer?) {
        var machine = Machine(offering: entries)
        guard case .offer = machine.receivedHello(hello) else { return (machine, nil) }
        guard case .prepare(let prepare) = machine.receivedAnswer(answer) else { return (machine, nil) }
        return (machine, prepare)
    }

    func testAReceiverOfAnotherVersionIsOfferedNothing() {
        var machine = Machine(offering: entries)
        let action = machine.receivedHello(Hello(protocolVersion: 99, device: "r", name: "Receiver"))
        guard case .fail(let error as PeerTransferError) = action else { return XCTFail("\(action)") }
        XCTAssertEqual(error.wireCode, "protocol")
        XCTAssertTrue(error.message.contains("speaks protocol 99"), error.message)
        XCTAssertFalse(machine.hasAnswer)
    }

    /// An answer that accepts an entry never offered (past the end, negative) or one entry
    /// twice is a broken protocol: nothing is prepared or sent.
    func testAnAnswerAcceptingWhatWasNotOfferedOrTwiceIsAProtocolViolation() {
        let cases: [([Int], String)] = [
            ([0, 99], "accepted entry 99, but 4 were offered"), ([-1], "accepted entry -1"),
            ([0, 2, 0], "accepted entry 0 twice"),
        ]
        for (indexes, words) in cases {
            var machine = Machine(offering: entries)
            _ = machine.receivedHello(hello)
            let action = machine.receivedAnswer(Answer(accepted: indexes.map { Answer.Entry(index: $0) }))
            guard case .fail(let error as PeerTransferError) = action else { return XCTFail("\(indexes): \(action)") }
            XCTAssertEqual(error.wireCode, "protocol", "\(indexes)")
            XCTAssertTrue(error.message.contains(words), error.message)
        }
    }

    /// A partly declined, partly resumed offer: the answer is counted before anything is sent,
    /// and the report names what was declined and by whom.
    func testTheAnswerIsCountedBeforeSendingAndTheReportNamesWhatWasDeclined() throws {
        let answer = Answer(
            accepted: [Answer.Entry(index: 0), Answer.Entry(index: 2), Answer.Entry(index: 3)],
            reason: "no room for b", cause: "declined-hook")
        var (machine, prepare) = answered(answer)
        XCTAssertEqual(prepare?.accepted.map(\.index), [0, 2, 3])
        XCTAssertTrue(machine.hasAnswer, "from the answer on, silence is not \"no answer\"")
        // a.bin resumes after 400 bytes; folder/c.bin is there whole already.
        let action = machine.prepared([
            Machine.Prepared(index: 0, offset: 400, alreadyThere: false),
            Machine.Prepared(index: 3, offset: 0, alreadyThere: true),
        ])
        guard case .send(let tally) = action else { return XCTFail("\(action)") }
        XCTAssertEqual(tally.accepted, [0, 2, 3])
        XCTAssertEqual(tally.acceptedFiles, 2)
        XCTAssertEqual(tally.declined, ["b.bin"])
        XCTAssertEqual(tally.alreadyThere, 1)
        XCTAssertEqual(tally.bytesToSend, 600)
        XCTAssertEqual(tally.bytesSkipped, 700)
        XCTAssertEqual(tally.reason, "no room for b")
        guard case .finish = machine.sentAll() else { return XCTFail("the end is said once all went out") }
        let end = machine.summarized(verified: 2, failed: [], bytesSent: 600)
        guard case .report(let report) = end else { return XCTFail("\(end)") }
        XCTAssertEqual(report.verified, 2)
        XCTAssertEqual(report.declined, ["b.bin"])
        XCTAssertEqual([report.bytesSent, report.bytesSkipped], [600, 700])
        XCTAssertEqual(report.declineError("x").wireCode, "declined-hook", "declined by the hook, as it said")
    }

    /// A write that fails while the files go out yields to the receiver's reason, when it gave
    /// one; without one, the failed write is the error.
    func testAFailedWriteYieldsToTheReceiversReason() {
        let all = Answer(accepted: entries.indices.map { Answer.Entry(index: $0) })
        var (machine, _) = answered(all)
        _ = machine.prepared([])
        let broken = SocketStreamError.connectionRefused("receiver")
        let action = machine.sendingFailed(broken, receiverSaid: .noSpace("the disk filled up"))
        guard case .fail(let error as PeerTransferError) = action else { return XCTFail("\(action)") }
        XCTAssertEqual(error.wireCode, "space")

        var (finishing, _) = answered(all)
        _ = finishing.prepared([])
        _ = finishing.sentAll()
        let alone = finishing.sendingFailed(broken, receiverSaid: nil)
        guard case .fail(let failure) = alone else { return XCTFail("\(alone)") }
        XCTAssertTrue(failure is SocketStreamError, "\(failure)")
    }

    /// Silence is named for what it was: before the answer, nobody said yes or no (exit 7);
    /// after it, the transfer failed, with what the watchdog saw.
    func testSilenceBeforeTheAnswerIsNoAnswerAndAfterItAFailedTransfer() {
        let cut = SocketStreamError.connectionRefused("receiver")
        var machine = Machine(offering: entries)
        _ = machine.receivedHello(hello)
        let silent = machine.failure(
            of: cut, expired: "no progress from the receiver for 150 seconds", answerBound: .seconds(150),
            name: "Desk\u{1b}[2J")
        guard let silent = silent as? PeerTransferError else { return XCTFail("\(silent)") }
        XCTAssertEqual(silent.exitCode, 7)
        XCTAssertEqual(silent.outcome, "no-answer")
        XCTAssertTrue(silent.message.contains("did not answer the offer within"), silent.message)
        XCTAssertFalse(silent.message.contains("\u{1b}"), "a peer's name is escaped: \(silent.message)")

        _ = machine.receivedAnswer(Answer(accepted: []))
        let stalled = machine.failure(
            of: cut, expired: "no progress from the receiver for 60 seconds", answerBound: .seconds(150), name: "Desk")
        guard let stalled = stalled as? PeerTransferError else { return XCTFail("\(stalled)") }
        XCTAssertEqual(stalled.exitCode, 1)
        XCTAssertTrue(
            stalled.message.contains("the connection to \"Desk\" failed: no progress from the receiver"),
            stalled.message)

        // Ended after the answer (a failed write): still not "no answer".
        _ = machine.prepared([])
        _ = machine.sendingFailed(cut, receiverSaid: nil)
        let ended = machine.failure(
            of: cut, expired: "no progress from the receiver for 60 seconds", answerBound: .seconds(150), name: "Desk")
        XCTAssertEqual((ended as? PeerTransferError)?.exitCode, 1, "\(ended)")

        let said = machine.failure(
            of: PeerTransferError.declined("no"), expired: nil, answerBound: .seconds(1), name: "D")
        XCTAssertEqual((said as? PeerTransferError)?.wireCode, "declined", "what the receiver said stands as it is")
    }
}
