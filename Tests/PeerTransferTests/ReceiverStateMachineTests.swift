import Foundation
import XCTest
@testable import PeerTransferCore

/// The receiver's protocol logic, event by event, without a socket or a disk.
final class ReceiverStateMachineTests: XCTestCase {
    private let chunk = TransferLimits.chunkSize
    private let digest = String(repeating: "b", count: 64)

    private func machineAtDecision(_ entries: [ManifestEntry]) -> Receiver.StateMachine {
        var machine = Receiver.StateMachine(hello: Hello(protocolVersion: 2, device: "r", name: "R"))
        XCTAssertEqual(
            machine.received(.message(.hello, Hello(protocolVersion: 2, device: "s", name: "S"))), [.takeSlot])
        XCTAssertEqual(
            machine.slot(refused: nil), [.reply(.message(.hello, Hello(protocolVersion: 2, device: "r", name: "R")))])
        let manifest = Manifest(chunkSize: chunk, entries: entries)
        let actions = machine.received(.message(.manifest, manifest))
        guard case .decide(let decided, let paths)? = actions.first else {
            XCTFail("no decision asked: \(actions)"); return machine
        }
        XCTAssertEqual(decided, manifest)
        XCTAssertEqual(paths.map(\.description), entries.map(\.path))
        return machine
    }

    private func file(_ path: String, _ size: Int) -> ManifestEntry {
        ManifestEntry(path: path, kind: .file, size: UInt64(size), mode: 0o644, modified: 0)
    }

    private func chunkFrame(_ index: UInt32, _ offset: Int, _ count: Int) -> Frame {
        ChunkFrame(index: index, offset: UInt64(offset), data: Data(repeating: 1, count: count)).frame
    }

    private func endFrame(_ index: UInt32, _ sha256: String? = nil) -> Frame {
        FileEnd(index: index, sha256: sha256 ?? digest).frame
    }

    private func isFailure(
        _ actions: [Receiver.StateMachine.Action], containing text: String,
        file: StaticString = #filePath, line: UInt = #line
    ) {
        guard actions.count == 1, case .fail(let error, tellPeer: true) = actions[0] else {
            return XCTFail("expected one failure, got \(actions)", file: file, line: line)
        }
        XCTAssertTrue(error.message.contains(text), "\(error.message) lacks \(text)", file: file, line: line)
    }

    func testAWholeTransferInOrder() {
        let size = chunk + 10
        var machine = machineAtDecision([
            ManifestEntry(path: "d", kind: .directory, size: 0, mode: 0o755, modified: 0),
            file("d/a", size), file("d/empty", 0),
        ])
        let answer = Answer(accepted: [.init(index: 0), .init(index: 1), .init(index: 2)], reason: nil)
        XCTAssertEqual(machine.decided(answer), [.reply(.message(.answer, answer)), .makeDirectory(index: 0)])
        let first = machine.received(chunkFrame(1, 0, chunk))
        XCTAssertEqual(first.count, 2)
        XCTAssertEqual(first.first, .openFile(index: 1, offset: 0))
        // The last byte alone does not finish a file: its end, with the sender's digest, does.
        XCTAssertEqual(machine.received(chunkFrame(1, chunk, 10)).count, 1)
        XCTAssertEqual(machine.received(endFrame(1)), [.finishFile(index: 1, sha256: digest)])
        let result = FileResult(index: 1, verified: true, storedAs: "d/a", error: nil)
        XCTAssertEqual(machine.fileFinished(result), [.reply(.message(.fileResult, result))])
        // An empty file has no chunks, only its end.
        XCTAssertEqual(
            machine.received(endFrame(2)), [.openFile(index: 2, offset: 0), .finishFile(index: 2, sha256: digest)])
        let empty = FileResult(index: 2, verified: true, storedAs: "d/empty", error: nil)
        XCTAssertEqual(machine.fileFinished(empty), [.reply(.message(.fileResult, empty))])
        XCTAssertEqual(
            machine.received(.message(.done, Done())),
            [.reply(.message(.summary, Summary(verified: 2, failed: 0))), .close])
        XCTAssertTrue(machine.isFinished)
        XCTAssertNil(machine.connectionEnded())
    }

    func testAFileTheInboxAlreadyHoldsEndsWithoutBytesAndOnlyWithItsDigest() {
        let held = String(repeating: "c", count: 64)
        func receiving() -> Receiver.StateMachine {
            var machine = machineAtDecision([file("same", 3 * chunk), file("other", 10)])
            _ = machine.decided(Answer(accepted: [.init(index: 0, existing: held), .init(index: 1)], reason: nil))
            return machine
        }
        var same = receiving()
        XCTAssertEqual(
            same.received(endFrame(0, held)),
            [
                .alreadyHeld(index: 0),
                .reply(.message(.fileResult, FileResult(index: 0, verified: true, storedAs: "same", error: nil))),
            ])
        // Another digest with no bytes sent: the file ended before its first byte.
        var different = receiving()
        isFailure(different.received(endFrame(0)), containing: "before its first byte")
        // The withdrawing digest never counts as the held file, even if the answer said so.
        var withdrawn = machineAtDecision([file("z", 10)])
        _ = withdrawn.decided(Answer(accepted: [.init(index: 0, existing: FileEnd.withdrawn)], reason: nil))
        guard case .reply(let frame)? = withdrawn.received(endFrame(0, FileEnd.withdrawn)).first,
            let result = try? frame.decode(FileResult.self)
        else { return XCTFail("no result") }
        XCTAssertFalse(result.verified)
        // A file sent anyway (its digest differs) is received as a new one.
        var resent = receiving()
        XCTAssertEqual(resent.received(chunkFrame(0, 0, chunk)).first, .openFile(index: 0, offset: 0))
    }

    func testASenderMayWithdrawAFileAtAnyPointAndItFailsAlone() {
        var machine = machineAtDecision([file("a", 3 * chunk), file("b", 2 * chunk), file("c", 10)])
        _ = machine.decided(Answer(accepted: [0, 1, 2].map { .init(index: $0) }, reason: nil))
        // Half way through: the part file is finished as withdrawn (the shell removes it).
        _ = machine.received(chunkFrame(0, 0, chunk))
        XCTAssertEqual(
            machine.received(endFrame(0, FileEnd.withdrawn)), [.finishFile(index: 0, sha256: FileEnd.withdrawn)])
        let failed = FileResult(index: 0, verified: false, storedAs: nil, error: Receiver.StateMachine.withdrawnReason)
        XCTAssertEqual(machine.fileFinished(failed), [.reply(.message(.fileResult, failed))])
        // Before its first byte: it fails at once, and the next file may start.
        XCTAssertEqual(
            machine.received(endFrame(1, FileEnd.withdrawn)),
            [
                .reply(
                    .message(
                        .fileResult,
                        FileResult(
                            index: 1, verified: false, storedAs: nil,
                            error: Receiver.StateMachine.withdrawnReason)))
            ])
        XCTAssertEqual(machine.received(chunkFrame(2, 0, 10)).first, .openFile(index: 2, offset: 0))
        XCTAssertEqual(machine.received(endFrame(2)), [.finishFile(index: 2, sha256: digest)])
        let verified = FileResult(index: 2, verified: true, storedAs: "c", error: nil)
        _ = machine.fileFinished(verified)
        XCTAssertEqual(
            machine.received(.message(.done, Done())),
            [.reply(.message(.summary, Summary(verified: 1, failed: 2))), .close])
    }

    func testAFileEndMustComeAfterEveryByteOnceAndForAnAcceptedFile() {
        func receiving() -> Receiver.StateMachine {
            var machine = machineAtDecision([file("a", 2 * chunk), file("declined", 10)])
            _ = machine.decided(Answer(accepted: [.init(index: 0)], reason: nil))
            return machine
        }
        var early = receiving()
        _ = early.received(chunkFrame(0, 0, chunk))
        isFailure(early.received(endFrame(0)), containing: "ended at byte \(chunk) of \(2 * chunk)")
        var declined = receiving()
        isFailure(declined.received(endFrame(1)), containing: "not accepted")
        var twice = receiving()
        _ = twice.received(chunkFrame(0, 0, chunk))
        _ = twice.received(chunkFrame(0, chunk, chunk))
        XCTAssertEqual(twice.received(endFrame(0)), [.finishFile(index: 0, sha256: digest)])
        isFailure(twice.received(endFrame(0)), containing: "already ended")
        var malformed = receiving()
        isFailure(
            malformed.received(Frame(kind: .fileEnd, payload: Data([0, 0, 0, 0]))),
            containing: "fileEnd message of 4 bytes")
    }

    func testAnotherProtocolVersionIsRefusedWithAClearMessage() {
        var machine = Receiver.StateMachine(hello: Hello(protocolVersion: 2, device: "r", name: "R"))
        XCTAssertEqual(
            machine.received(.message(.hello, Hello(protocolVersion: 1, device: "s", name: "S"))), [.takeSlot])
        isFailure(machine.slot(refused: nil), containing: "version 1")
        XCTAssertTrue(machine.isFinished)
    }

    func testAnUntrustedSenderIsTurnedAwayAtItsHelloBeforeItTakesASlot() {
        var machine = Receiver.StateMachine(
            hello: Hello(protocolVersion: 2, device: "r", name: "R"), onlyKnownSenders: true)
        machine.identified(trusted: false)
        XCTAssertEqual(
            machine.received(.message(.hello, Hello(protocolVersion: 2, device: "s", name: "S"))), [.turnAway])
        XCTAssertTrue(machine.isFinished, "nothing more is read from it")

        var trusted = Receiver.StateMachine(
            hello: Hello(protocolVersion: 2, device: "r", name: "R"), onlyKnownSenders: true)
        trusted.identified(trusted: true)
        XCTAssertEqual(
            trusted.received(.message(.hello, Hello(protocolVersion: 2, device: "s", name: "S"))), [.takeSlot])

        var anyone = Receiver.StateMachine(hello: Hello(protocolVersion: 2, device: "r", name: "R"))
        anyone.identified(trusted: false)
        XCTAssertEqual(
            anyone.received(.message(.hello, Hello(protocolVersion: 2, device: "s", name: "S"))), [.takeSlot])
    }

    func testASenderFindingEverySlotTakenIsToldTheReceiverIsBusy() {
        var machine = Receiver.StateMachine(hello: Hello(protocolVersion: 2, device: "r", name: "R"))
        XCTAssertEqual(
            machine.received(.message(.hello, Hello(protocolVersion: 2, device: "s", name: "S"))), [.takeSlot])
        XCTAssertThrowsError(try machine.admit(.manifest, length: 10), "nothing is read while the slot is taken")
        XCTAssertEqual(
            machine.slot(refused: .sourceAtItsShare(limit: 4)), [.refuseBusy(.sourceAtItsShare(limit: 4))])
        XCTAssertTrue(machine.isFinished)
    }

    func testMessagesOutOfOrderAreProtocolViolations() {
        var early = Receiver.StateMachine(hello: Hello(protocolVersion: 2, device: "r", name: "R"))
        isFailure(
            early.received(.message(.manifest, Manifest(chunkSize: chunk, entries: []))), containing: "before the hello"
        )
        var chunkBeforeAnswer = machineAtDecision([file("a", 10)])
        isFailure(chunkBeforeAnswer.received(chunkFrame(0, 0, 10)), containing: "unexpected chunk")
        var garbage = Receiver.StateMachine(hello: Hello(protocolVersion: 2, device: "r", name: "R"))
        isFailure(garbage.received(Frame(kind: .hello, payload: Data("{not json".utf8))), containing: "malformed hello")
    }

    func testChunksMustBeAcceptedAlignedContiguousAndInsideTheFile() {
        func receiving() -> Receiver.StateMachine {
            var machine = machineAtDecision([file("a", 3 * chunk), file("declined", 10)])
            _ = machine.decided(Answer(accepted: [.init(index: 0, have: [digest])], reason: nil))
            return machine
        }
        var declined = receiving()
        isFailure(declined.received(chunkFrame(1, 0, 10)), containing: "not accepted")
        var unknown = receiving()
        isFailure(unknown.received(chunkFrame(9, 0, 10)), containing: "not accepted")
        var short = receiving()
        isFailure(short.received(chunkFrame(0, 0, 100)), containing: "chunks of")
        var misaligned = receiving()
        isFailure(misaligned.received(chunkFrame(0, 100, chunk)), containing: "chunks of")
        var pastResume = receiving()
        isFailure(pastResume.received(chunkFrame(0, 2 * chunk, chunk)), containing: "past the")
        var skipping = receiving()
        XCTAssertEqual(skipping.received(chunkFrame(0, chunk, chunk)).first, .openFile(index: 0, offset: UInt64(chunk)))
        var resumed = skipping
        isFailure(skipping.received(chunkFrame(0, chunk, chunk)), containing: "skipped from byte")
        XCTAssertEqual(resumed.received(chunkFrame(0, 2 * chunk, chunk)).count, 1)
        var beyond = resumed
        isFailure(beyond.received(chunkFrame(0, 3 * chunk, chunk)), containing: "chunks of")
        XCTAssertEqual(resumed.received(endFrame(0)), [.finishFile(index: 0, sha256: digest)])
        isFailure(resumed.received(chunkFrame(0, 2 * chunk, chunk)), containing: "already complete")
    }

    func testFilesComeOneAfterAnotherSoAReceiverHoldsOneOpenFile() {
        var machine = machineAtDecision([file("a", 2 * chunk), file("b", 2 * chunk), file("c", 10)])
        _ = machine.decided(Answer(accepted: [0, 1, 2].map { .init(index: $0) }, reason: nil))
        XCTAssertEqual(machine.received(chunkFrame(0, 0, chunk)).first, .openFile(index: 0, offset: 0))
        // A second file started while the first is half way: refused (each would hold a file open).
        var interleaving = machine
        isFailure(interleaving.received(chunkFrame(1, 0, chunk)), containing: "one after another")
        // All of its bytes are not enough: the next may start only once the first has ended.
        _ = machine.received(chunkFrame(0, chunk, chunk))
        var beforeTheEnd = machine
        isFailure(beforeTheEnd.received(chunkFrame(2, 0, 10)), containing: "one after another")
        var endingAnother = machine
        isFailure(endingAnother.received(endFrame(2)), containing: "one after another")
        XCTAssertEqual(machine.received(endFrame(0)).last, .finishFile(index: 0, sha256: digest))
        XCTAssertEqual(machine.received(chunkFrame(2, 0, 10)).first, .openFile(index: 2, offset: 0))
    }

    func testDoneBeforeTheEndFailsTheUnfinishedFilesAndEndsWithASummary() {
        var machine = machineAtDecision([file("a", 2 * chunk), file("b", 5)])
        let held = String(repeating: "c", count: 64)
        _ = machine.decided(Answer(accepted: [.init(index: 0), .init(index: 1, existing: held)], reason: nil))
        _ = machine.received(endFrame(1, held))
        _ = machine.received(chunkFrame(0, 0, chunk))
        let actions = machine.received(.message(.done, Done()))
        XCTAssertEqual(actions.count, 3, "\(actions)")
        guard case .reply(let frame) = actions[0], let result = try? frame.decode(FileResult.self) else {
            return XCTFail("\(actions)")
        }
        XCTAssertEqual(result.index, 0)
        XCTAssertFalse(result.verified)
        XCTAssertEqual(actions[1], .reply(.message(.summary, Summary(verified: 1, failed: 1))))
        XCTAssertEqual(actions[2], .close)
    }

    func testDecliningEverythingAndRefusingEndTheExchange() {
        var declined = machineAtDecision([file("a", 1)])
        let actions = declined.decided(Answer(accepted: [], reason: "no thanks"))
        guard case .fail(let error, tellPeer: true)? = actions.first else { return XCTFail("\(actions)") }
        XCTAssertTrue(error.isDeclined)
        XCTAssertEqual(error.exitCode, 5)
        var full = machineAtDecision([file("a", 1)])
        isFailure(full.refused(.noSpace("disk full")), containing: "disk full")
    }

    func testACutConnectionBeforeTheSenderIsDoneIsAnError() {
        var machine = machineAtDecision([file("a", chunk)])
        _ = machine.decided(Answer(accepted: [.init(index: 0)], reason: nil))
        XCTAssertNotNil(machine.connectionEnded())
        var fresh = Receiver.StateMachine(hello: Hello(protocolVersion: 2, device: "r", name: "R"))
        XCTAssertNotNil(fresh.connectionEnded())
    }

    func testTheSendersFailureEndsWithoutAnEcho() {
        var machine = machineAtDecision([file("a", 1)])
        let actions = machine.received(.message(.failure, Failure(code: "internal", message: "disk error\u{1b}[2J")))
        guard case .fail(let error, tellPeer: false)? = actions.first else { return XCTFail("\(actions)") }
        XCTAssertFalse(error.message.contains("\u{1b}"))
    }

    func testFramesNotDueYetAreRefusedFromTheirHeader() {
        var machine = Receiver.StateMachine(hello: Hello(protocolVersion: 2, device: "r", name: "R"))
        XCTAssertNoThrow(try machine.admit(.hello, length: 200))
        XCTAssertThrowsError(try machine.admit(.chunk, length: chunk + 12)) { error in
            XCTAssertTrue(
                (error as? PeerTransferError)?.message.contains("chunk message before the hello") == true, "\(error)")
        }
        XCTAssertThrowsError(try machine.admit(.hello, length: TransferLimits.maximumHello + 1)) { error in
            XCTAssertEqual((error as? PeerTransferError)?.wireCode, "limit", "\(error)")
        }
        XCTAssertThrowsError(try machine.admit(.manifest, length: 10))
        _ = machine.received(.message(.hello, Hello(protocolVersion: 2, device: "s", name: "S")))
        _ = machine.slot(refused: nil)
        XCTAssertNoThrow(try machine.admit(.manifest, length: TransferLimits.maximumControlMessage))
        XCTAssertThrowsError(try machine.admit(.fileEnd, length: FileEnd.size))
        machine = machineAtDecision([file("a", 10)])
        XCTAssertThrowsError(try machine.admit(.chunk, length: 22), "no chunk before the answer")
        XCTAssertNoThrow(try machine.admit(.failure, length: 100))
        _ = machine.decided(Answer(accepted: [Answer.Entry(index: 0)], reason: nil))
        XCTAssertNoThrow(try machine.admit(.chunk, length: 22))
        XCTAssertNoThrow(try machine.admit(.done, length: 2))
    }
}
