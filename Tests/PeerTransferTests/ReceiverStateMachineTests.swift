import Foundation
import XCTest
@testable import PeerTransferCore

/// The receiver's protocol logic, event by event, without a socket or a disk.
final class ReceiverStateMachineTests: XCTestCase {
    private let chunk = TransferLimits.chunkSize
    private let digest = String(repeating: "b", count: 64)

    private func machineAtDecision(_ entries: [ManifestEntry]) -> ReceiverStateMachine {
        var machine = ReceiverStateMachine(hello: Hello(protocolVersion: 1, device: "r", name: "R"))
        XCTAssertEqual(machine.received(.message(.hello, Hello(protocolVersion: 1, device: "s", name: "S"))),
                       [.reply(.message(.hello, Hello(protocolVersion: 1, device: "r", name: "R")))])
        let manifest = Manifest(chunkSize: chunk, entries: entries)
        let actions = machine.received(.message(.manifest, manifest))
        guard case .decide(let decided, let paths)? = actions.first else { XCTFail("no decision asked: \(actions)"); return machine }
        XCTAssertEqual(decided, manifest)
        XCTAssertEqual(paths.map(\.description), entries.map(\.path))
        return machine
    }

    private func file(_ path: String, _ size: Int) -> ManifestEntry {
        ManifestEntry(path: path, kind: .file, size: UInt64(size), mode: 0o644, modified: 0, sha256: digest)
    }

    private func chunkFrame(_ index: UInt32, _ offset: Int, _ count: Int) -> Frame {
        ChunkFrame(index: index, offset: UInt64(offset), data: Data(repeating: 1, count: count)).frame
    }

    private func isFailure(_ actions: [ReceiverStateMachine.Action], containing text: String,
                           file: StaticString = #filePath, line: UInt = #line) {
        guard actions.count == 1, case .fail(let error, tellPeer: true) = actions[0] else {
            return XCTFail("expected one failure, got \(actions)", file: file, line: line)
        }
        XCTAssertTrue(error.message.contains(text), "\(error.message) lacks \(text)", file: file, line: line)
    }

    func testAWholeTransferInOrder() {
        let size = chunk + 10
        var machine = machineAtDecision([ManifestEntry(path: "d", kind: .directory, size: 0, mode: 0o755, modified: 0, sha256: ""),
                                         file("d/a", size), file("d/empty", 0)])
        let answer = Answer(accepted: [.init(index: 0, have: [], complete: false), .init(index: 1, have: [], complete: false),
                                       .init(index: 2, have: [], complete: false)], reason: nil)
        XCTAssertEqual(machine.decided(answer), [.reply(.message(.answer, answer)), .makeDirectory(index: 0),
                                                 .openFile(index: 2, offset: 0), .finishFile(index: 2)])
        let empty = FileResult(index: 2, verified: true, storedAs: "d/empty", error: nil)
        XCTAssertEqual(machine.fileFinished(empty), [.reply(.message(.fileResult, empty))])
        let first = machine.received(chunkFrame(1, 0, chunk))
        XCTAssertEqual(first.count, 2)
        XCTAssertEqual(first.first, .openFile(index: 1, offset: 0))
        let last = machine.received(chunkFrame(1, chunk, 10))
        XCTAssertEqual(last.last, .finishFile(index: 1))
        let result = FileResult(index: 1, verified: true, storedAs: "d/a", error: nil)
        XCTAssertEqual(machine.fileFinished(result), [.reply(.message(.fileResult, result))])
        XCTAssertEqual(machine.received(.message(.done, Done())),
                       [.reply(.message(.summary, Summary(verified: 2, failed: 0))), .close])
        XCTAssertTrue(machine.isFinished)
        XCTAssertNil(machine.connectionEnded())
    }

    func testAnotherProtocolVersionIsRefusedWithAClearMessage() {
        var machine = ReceiverStateMachine(hello: Hello(protocolVersion: 1, device: "r", name: "R"))
        isFailure(machine.received(.message(.hello, Hello(protocolVersion: 2, device: "s", name: "S"))), containing: "version 2")
        XCTAssertTrue(machine.isFinished)
    }

    func testMessagesOutOfOrderAreProtocolViolations() {
        var early = ReceiverStateMachine(hello: Hello(protocolVersion: 1, device: "r", name: "R"))
        isFailure(early.received(.message(.manifest, Manifest(chunkSize: chunk, entries: []))), containing: "before the hello")
        var chunkBeforeAnswer = machineAtDecision([file("a", 10)])
        isFailure(chunkBeforeAnswer.received(chunkFrame(0, 0, 10)), containing: "unexpected chunk")
        var garbage = ReceiverStateMachine(hello: Hello(protocolVersion: 1, device: "r", name: "R"))
        isFailure(garbage.received(Frame(kind: .hello, payload: Data("{not json".utf8))), containing: "malformed hello")
    }

    func testChunksMustBeAcceptedAlignedContiguousAndInsideTheFile() {
        func receiving() -> ReceiverStateMachine {
            var machine = machineAtDecision([file("a", 3 * chunk), file("declined", 10)])
            _ = machine.decided(Answer(accepted: [.init(index: 0, have: [digest], complete: false)], reason: nil))
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
        XCTAssertEqual(resumed.received(chunkFrame(0, 2 * chunk, chunk)).last, .finishFile(index: 0))
        isFailure(resumed.received(chunkFrame(0, 2 * chunk, chunk)), containing: "already complete")
    }

    func testFilesComeOneAfterAnotherSoAReceiverHoldsOneOpenFile() {
        var machine = machineAtDecision([file("a", 2 * chunk), file("b", 2 * chunk), file("c", 10)])
        _ = machine.decided(Answer(accepted: [0, 1, 2].map { .init(index: $0, have: [], complete: false) }, reason: nil))
        XCTAssertEqual(machine.received(chunkFrame(0, 0, chunk)).first, .openFile(index: 0, offset: 0))
        // A second file started while the first is half way: refused (each would hold a file open).
        var interleaving = machine
        isFailure(interleaving.received(chunkFrame(1, 0, chunk)), containing: "one after another")
        // Once the first is complete, the next may start.
        XCTAssertEqual(machine.received(chunkFrame(0, chunk, chunk)).last, .finishFile(index: 0))
        XCTAssertEqual(machine.received(chunkFrame(2, 0, 10)).first, .openFile(index: 2, offset: 0))
    }

    func testDoneBeforeTheEndFailsTheUnfinishedFilesAndEndsWithASummary() {
        var machine = machineAtDecision([file("a", 2 * chunk), file("b", 5)])
        _ = machine.decided(Answer(accepted: [.init(index: 0, have: [], complete: false), .init(index: 1, have: [], complete: true)],
                                   reason: nil))
        _ = machine.received(chunkFrame(0, 0, chunk))
        let actions = machine.received(.message(.done, Done()))
        XCTAssertEqual(actions.count, 3, "\(actions)")
        guard case .reply(let frame) = actions[0], let result = try? frame.decode(FileResult.self) else { return XCTFail("\(actions)") }
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
        _ = machine.decided(Answer(accepted: [.init(index: 0, have: [], complete: false)], reason: nil))
        XCTAssertNotNil(machine.connectionEnded())
        var fresh = ReceiverStateMachine(hello: Hello(protocolVersion: 1, device: "r", name: "R"))
        XCTAssertNotNil(fresh.connectionEnded())
    }

    func testTheSendersFailureEndsWithoutAnEcho() {
        var machine = machineAtDecision([file("a", 1)])
        let actions = machine.received(.message(.failure, Failure(code: "internal", message: "disk error\u{1b}[2J")))
        guard case .fail(let error, tellPeer: false)? = actions.first else { return XCTFail("\(actions)") }
        XCTAssertFalse(error.message.contains("\u{1b}"))
    }
}
