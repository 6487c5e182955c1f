import Foundation
import Salut
import XCTest
@testable import PeerTransferCore

/// The protocol's refusals, failed verdicts and lies, in this process over a connection in
/// memory: a real sender facing a real receiver or a scripted one, a real receiver facing raw
/// frames. What each end says, and that nothing lands that should not.
final class ConversationRefusalTests: XCTestCase {
    private let chunk = TransferLimits.chunkSize

    private static func hello(version: Int = TransferLimits.protocolVersion) -> Frame {
        Frame.message(.hello, Hello(protocolVersion: version, device: "scripted", name: "Scripted"))
    }

    private static func manifest(_ entries: [ManifestEntry]) -> Frame {
        Frame.message(.manifest, Manifest(chunkSize: TransferLimits.chunkSize, entries: entries))
    }

    private static func file(_ path: String, size: UInt64) -> ManifestEntry {
        ManifestEntry(path: path, kind: .file, size: size, mode: 0o644, modified: 0)
    }

    /// Reads the sender's frames up to (and with) the first of `kind`.
    private static func read(
        upTo kind: Frame.Kind, from reader: inout FrameReader
    ) async throws -> [Frame] {
        var frames: [Frame] = []
        while let frame = try await reader.next() {
            frames.append(frame)
            if frame.kind == kind { return frames }
        }
        throw PeerTransferError.runtime("the sender ended before its \(kind)")
    }

    /// Says hello back and answers the offer, accepting `accepted`.
    private static func greetAndAccept(
        _ accepted: [Int], reader: inout FrameReader, output: OutputStream
    ) async throws {
        _ = try await read(upTo: .hello, from: &reader)
        try await output.write(hello().encoded)
        _ = try await read(upTo: .manifest, from: &reader)
        let answer = Answer(accepted: accepted.map { Answer.Entry(index: $0) })
        try await output.write(Frame.message(.answer, answer).encoded)
    }

    // MARK: - Failed verdicts

    /// A file that grows while it is sent is withdrawn: it fails alone on both ends, with the
    /// reason, the other file arrives verified, and nothing of the changed one is kept.
    func testAFileChangedWhileItIsSentFailsAloneOnBothEnds() async throws {
        let talk = try Conversation()
        let grown = try talk.makeFile("grows.bin", size: 6 * chunk)
        try talk.makeFile("stays.txt", size: 100, seed: 3)
        let once = Locked(false)
        talk.whileSending = { sent in
            guard sent >= 1 << 20, !once.exchange(true) else { return }
            let handle = FileHandle(forWritingAtPath: grown)!
            handle.seekToEndOfFile()
            handle.write(Data("more".utf8))
            handle.closeFile()
        }
        let outcome = try await talk.send(["grows.bin", "stays.txt"])
        let report = try outcome.sent.get()
        XCTAssertEqual(report.verified, 1)
        XCTAssertEqual(report.failed.count, 1, "\(report.failed)")
        XCTAssertTrue(
            report.failed[0].hasPrefix("grows.bin: the file changed while the sender read it"), "\(report.failed)")
        XCTAssertEqual(talk.received("stays.txt"), talk.original("stays.txt"))
        XCTAssertEqual(talk.inboxListing(), ["stays.txt"], "nothing of the changed file is kept")
        XCTAssertTrue(
            outcome.received.contains {
                if case .fileFailed(_, let path, let reason) = $0 {
                    return path == "grows.bin" && reason.contains("withdrew")
                }
                return false
            }, "\(outcome.received)")
        XCTAssertTrue(outcome.log.contains { $0.contains("complete: 1 verified, 1 failed") }, "\(outcome.log)")
    }

    // MARK: - Refusals

    /// A receiver of another protocol version is left after its hello: nothing is offered.
    func testAReceiverOfAnotherVersionIsLeftBeforeTheOffer() async throws {
        let talk = try Conversation()
        try talk.makeFile("a.txt", size: 10)
        let offered = Locked(false)
        let (_, sent) = try await talk.sendToScripted(["a.txt"]) { reader, output in
            _ = try await Self.read(upTo: .hello, from: &reader)
            try await output.write(Self.hello(version: 99).encoded)
            if let frame = try? await reader.next(), frame.kind == .manifest { offered.withLock { $0 = true } }
        }
        guard case .failure(let error) = sent else { return XCTFail("the send succeeded") }
        XCTAssertEqual(error.wireCode, "protocol")
        XCTAssertTrue(error.message.contains("speaks protocol 99"), error.message)
        XCTAssertFalse(offered.value, "nothing is offered to a receiver of another version")
    }

    /// A receiver whose hello claims more than a hello may hold (16 MiB, announced in the
    /// frame's header) is refused from the header alone, before the sender keeps any of it;
    /// and one that answers the hello with a chunk is a protocol violation.
    func testAnOversizedOrWrongFirstFrameFromTheReceiverIsRefusedFromItsHeader() async throws {
        let talk = try Conversation()
        try talk.makeFile("a.txt", size: 10)
        let (_, sent) = try await talk.sendToScripted(["a.txt"]) { reader, output in
            _ = try await Self.read(upTo: .hello, from: &reader)
            var header = Data([Frame.Kind.hello.rawValue])
            withUnsafeBytes(of: UInt32(16 << 20).bigEndian) { header.append(contentsOf: $0) }
            try await output.write(header + Data(count: 1024))  // the rest never comes
        }
        guard case .failure(let error) = sent else { return XCTFail("the send succeeded") }
        XCTAssertEqual(error.wireCode, "limit", "\(error)")
        XCTAssertTrue(error.message.contains("hello message of 16777216 bytes"), error.message)

        let (_, chunked) = try await talk.sendToScripted(["a.txt"]) { reader, output in
            _ = try await Self.read(upTo: .hello, from: &reader)
            try await output.write(ChunkFrame(index: 0, offset: 0, data: Data(count: 8)).frame.encoded)
        }
        guard case .failure(let wrong) = chunked else { return XCTFail("the send succeeded") }
        XCTAssertEqual(wrong.wireCode, "protocol", "\(wrong)")
        XCTAssertTrue(wrong.message.contains("the receiver sent chunk where hello was due"), wrong.message)
    }

    /// A sender of another protocol version, a path that leaves the inbox, and an offer larger
    /// than the inbox's free space are each refused by the receiver, with its reason, and
    /// nothing lands.
    func testTheReceiverRefusesAnotherVersionAnUnsafePathAndAnOfferItHasNoRoomFor() async throws {
        let cases: [(frames: [Frame], outcome: String, words: String)] = [
            ([Self.hello(version: 99)], "protocol", "version 99"),
            ([Self.hello(), Self.manifest([Self.file("../escape.txt", size: 10)])], "path", "\"..\" component"),
            ([Self.hello(), Self.manifest([Self.file("/etc/escape.txt", size: 10)])], "path", "is absolute"),
            (
                [Self.hello(), Self.manifest([Self.file("huge.bin", size: TransferLimits.maximumFileSize)])],
                "space", "bytes free"
            ),
        ]
        for (frames, outcome, words) in cases {
            let talk = try Conversation()
            let result = try await talk.offerRaw(frames)
            let error = try XCTUnwrap(result.receiverError, "\(words): \(result.log)")
            XCTAssertEqual(error.wireCode, outcome, "\(words): \(error.message)")
            XCTAssertTrue(error.message.contains(words), error.message)
            XCTAssertEqual(talk.inboxListing(), [], words)
        }
    }

    // MARK: - A sender that stops or trickles

    /// A sender that stops halfway through a file is dropped once the receiver's idle bound
    /// passes: the log names the bound (not a closed stream), the file is never given its
    /// name, and its part file is kept for a resume.
    func testASenderThatStopsMidFileIsDroppedAfterTheIdleBoundAndItsPartFileKept() async throws {
        let talk = try Conversation()
        talk.idleBound = .seconds(1)
        let size = UInt64(4 * chunk)
        let result = try await talk.sendFromScript { reader, output in
            try await output.write(
                Self.hello().encoded + Self.manifest([Self.file("stalled.bin", size: size)]).encoded)
            _ = try await Self.read(upTo: .answer, from: &reader)
            let first = ChunkFrame(index: 0, offset: 0, data: Data(repeating: 0x73, count: TransferLimits.chunkSize))
            try await output.write(first.frame.encoded)
        }
        XCTAssertTrue(
            result.log.contains { $0.contains("no progress from the sender for 1") },
            "the log names the idle bound: \(result.log)")
        XCTAssertNotNil(result.receiverError, "\(result.received)")
        XCTAssertNil(talk.received("stalled.bin"), "never named unfinished")
        XCTAssertEqual(talk.partFiles().count, 1, "its part file is kept: \(talk.inboxListing())")
    }

    /// A sender that keeps its transfer alive but far below the receiver's minimum pace is cut
    /// with a `limit` failure saying how fast it must go, and its connection closed.
    func testASenderBelowTheMinimumPaceIsCutAndToldTheRate() async throws {
        let talk = try Conversation()
        // No grace, and a rate no link reaches: the first chunk after the answer is too late.
        talk.pace = TransferPace(minimumRate: 1 << 40, grace: .zero)
        let frames = Locked([Frame]())
        let result = try await talk.sendFromScript { reader, output in
            try await output.write(
                Self.hello().encoded
                    + Self.manifest([Self.file("slow.bin", size: UInt64(8 * TransferLimits.chunkSize))]).encoded)
            _ = try await Self.read(upTo: .answer, from: &reader)
            for index in 0..<8 {
                let chunk = ChunkFrame(
                    index: 0, offset: UInt64(index * TransferLimits.chunkSize),
                    data: Data(repeating: 0x7a, count: TransferLimits.chunkSize))
                guard (try? await output.write(chunk.frame.encoded)) != nil else { break }
            }
            while case .some(.some(let frame)) = try? await reader.next() { frames.withLock { $0.append(frame) } }
        }
        let failures = frames.value.filter { $0.kind == .failure }.compactMap { try? $0.decode(Failure.self) }
        XCTAssertEqual(failures.map(\.code), ["limit"], "\(frames.value.map(\.kind))")
        XCTAssertTrue(failures.first?.message.contains("too slow") == true, "\(failures)")
        XCTAssertEqual(result.receiverError?.wireCode, "limit", "\(result.received)")
        XCTAssertNil(talk.received("slow.bin"))
    }

    // MARK: - A receiver that lies

    /// A verdict on a file whose end was not sent yet is a lie: the send ends at it, with the
    /// reason, and the lie is never reported as a verified file.
    func testAVerdictBeforeTheFilesEndIsALieThatEndsTheSend() async throws {
        let talk = try Conversation()
        // Far more than the connection holds: its end cannot have been sent when the lie comes.
        try talk.makeFile("big.bin", size: 16 * chunk)
        let (events, sent) = try await talk.sendToScripted(["big.bin"]) { reader, output in
            try await Self.greetAndAccept([0], reader: &reader, output: output)
            let lie = FileResult(index: 0, verified: true, storedAs: "big.bin", error: nil)
            try await output.write(Frame.message(.fileResult, lie).encoded)
        }
        guard case .failure(let error) = sent else { return XCTFail("the send succeeded") }
        XCTAssertEqual(error.wireCode, "protocol")
        XCTAssertTrue(error.message.contains("whose end was not sent yet"), error.message)
        XCTAssertFalse(
            events.contains { if case .fileVerified = $0 { return true } else { return false } },
            "a lie is not a verified file: \(events)")
    }

    /// A verdict on a file the sender withdrew (it changed between the offer and the answer)
    /// is a lie too: the send ends at it, and it is never reported as verified.
    func testAVerdictOnAWithdrawnFileIsALieThatEndsTheSend() async throws {
        let talk = try Conversation()
        let path = try talk.makeFile("a.bin", size: 1000)
        let (events, sent) = try await talk.sendToScripted(["a.bin"]) { reader, output in
            _ = try await Self.read(upTo: .hello, from: &reader)
            try await output.write(Self.hello().encoded)
            _ = try await Self.read(upTo: .manifest, from: &reader)
            // Once offered, the file changes (its time too): the sender withdraws it.
            try Data(repeating: 7, count: 1000).write(to: URL(fileURLWithPath: path))
            var times = [timespec(tv_sec: 1_000_000, tv_nsec: 0), timespec(tv_sec: 1_000_000, tv_nsec: 0)]
            guard utimensat(AT_FDCWD, path, &times, 0) == 0 else { throw POSIXError(.EIO) }
            try await output.write(Frame.message(.answer, Answer(accepted: [Answer.Entry(index: 0)])).encoded)
            _ = try await Self.read(upTo: .fileEnd, from: &reader)
            let lie = FileResult(index: 0, verified: true, storedAs: "a.bin", error: nil)
            try await output.write(Frame.message(.fileResult, lie).encoded)
            while try await reader.next() != nil {}
        }
        guard case .failure(let error) = sent else { return XCTFail("the send succeeded") }
        XCTAssertEqual(error.exitCode, 1, error.message)
        XCTAssertTrue(error.message.contains("though this sender withdrew it"), error.message)
        XCTAssertFalse(events.contains { if case .fileVerified = $0 { return true } else { return false } })
    }

    /// A summary that leaves out an accepted file is no proof it arrived: that file counts as
    /// failed, the one the receiver vouched for as verified.
    func testASummaryThatSkipsAFileCountsItFailed() async throws {
        let talk = try Conversation()
        try talk.makeFile("one.txt", size: 10)
        try talk.makeFile("two.txt", size: 10, seed: 2)
        let (events, sent) = try await talk.sendToScripted(["one.txt", "two.txt"]) { reader, output in
            try await Self.greetAndAccept([0, 1], reader: &reader, output: output)
            _ = try await Self.read(upTo: .done, from: &reader)
            let result = FileResult(index: 0, verified: true, storedAs: "one.txt", error: nil)
            try await output.write(Frame.message(.fileResult, result).encoded)
            try await output.write(Frame.message(.summary, Summary(verified: 2, failed: 0)).encoded)
        }
        let report = try sent.get()
        XCTAssertEqual(report.verified, 1)
        XCTAssertEqual(report.failed, ["two.txt: the receiver ended without saying it was verified"])
        XCTAssertEqual(events.filter { if case .fileVerified = $0 { return true } else { return false } }.count, 1)
    }

    /// A receiver that says nothing after the offer is "no answer" (exit 7), as one that never
    /// answers the question is: not a failed transfer.
    func testAReceiverSilentAfterTheOfferIsNoAnswer() async throws {
        let talk = try Conversation()
        try talk.makeFile("a.txt", size: 10)
        let (_, sent) = try await talk.sendToScripted(["a.txt"], answerBound: .seconds(1)) { reader, output in
            _ = try await Self.read(upTo: .hello, from: &reader)
            try await output.write(Self.hello().encoded)
            _ = try await Self.read(upTo: .manifest, from: &reader)
            while try await reader.next() != nil {}  // silent until the sender leaves
        }
        guard case .failure(let error) = sent else { return XCTFail("the send succeeded") }
        XCTAssertEqual(error.outcome, "no-answer", error.message)
        XCTAssertEqual(error.exitCode, 7)
        XCTAssertTrue(error.message.contains("did not answer the offer within 1 second"), error.message)
        XCTAssertFalse(
            error.message.contains("not open"), "the closed stream says nothing to a person: \(error.message)")
    }

    /// An answer that accepts an entry never offered, or one entry twice, ends the send before
    /// a byte of a file goes out; a receiver's `cancelled` after its answer is a broken protocol,
    /// not this end's user cancelling.
    func testAnAnswerBeyondTheOfferAndAReceiversCancelAreProtocolViolations() async throws {
        let answers: [([Int], String)] = [([0, 99], "accepted entry 99"), ([0, 0], "accepted entry 0 twice")]
        for (indexes, words) in answers {
            let talk = try Conversation()
            try talk.makeFile("a.txt", size: 10)
            let (events, sent) = try await talk.sendToScripted(["a.txt"]) { reader, output in
                _ = try await Self.read(upTo: .hello, from: &reader)
                try await output.write(Self.hello().encoded)
                _ = try await Self.read(upTo: .manifest, from: &reader)
                let answer = Answer(accepted: indexes.map { Answer.Entry(index: $0) })
                try await output.write(Frame.message(.answer, answer).encoded)
                while try await reader.next() != nil {}
            }
            guard case .failure(let error) = sent else { return XCTFail("\(indexes): the send succeeded") }
            XCTAssertEqual(error.wireCode, "protocol", "\(indexes): \(error.message)")
            XCTAssertTrue(error.message.contains(words), error.message)
            XCTAssertFalse(
                events.contains { if case .progress = $0 { return true } else { return false } },
                "\(indexes): \(events)")
        }
        let error = try await failureOfASend(afterTheReceiverSays: Failure(code: "cancelled", message: "as if you had"))
        XCTAssertEqual(error.wireCode, "protocol", error.message)
        XCTAssertNotEqual(error.outcome, "cancelled")
    }

    /// A decline said after the offer was accepted is a broken protocol, not a decline: the
    /// sender does not report (or, queued, give up on) a transfer the receiver had taken.
    func testADeclineAfterTheOfferWasAcceptedIsAProtocolViolation() async throws {
        let error = try await failureOfASend(
            afterTheReceiverSays: Failure(code: "declined", message: "changed my mind"))
        XCTAssertEqual(error.wireCode, "protocol")
        XCTAssertEqual(error.exitCode, 1)
        XCTAssertTrue(error.message.contains("accepted the offer, then sent a \"declined\" failure"), error.message)
    }

    /// How a send of a 16-chunk file ends when the receiver accepts it and, after its first
    /// chunk, sends `failure`.
    private func failureOfASend(afterTheReceiverSays failure: Failure) async throws -> PeerTransferError {
        let talk = try Conversation()
        try talk.makeFile("big.bin", size: 16 * chunk)
        let (_, sent) = try await talk.sendToScripted(["big.bin"]) { reader, output in
            try await Self.greetAndAccept([0], reader: &reader, output: output)
            _ = try await Self.read(upTo: .chunk, from: &reader)
            try await output.write(Frame.message(.failure, failure).encoded)
        }
        guard case .failure(let error) = sent else {
            XCTFail("the send succeeded")
            throw CancellationError()
        }
        return error
    }

    /// A receiver that fails the transfer in the middle is heard: its reason, not the broken
    /// write the sender was in, is what the send reports.
    func testAReceiversFailureInTheMiddleIsWhatTheSendReports() async throws {
        let error = try await failureOfASend(
            afterTheReceiverSays: Failure(code: "space", message: "the disk filled up"))
        XCTAssertEqual(error.wireCode, "space")
        XCTAssertEqual(error.message, "the receiver says: the disk filled up")
    }
}
