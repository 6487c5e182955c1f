import Foundation
import Salut
import XCTest
@testable import PeerTransferCore

/// The protocol's conversations between a real sender and a real receiver in this process
/// (over a connection in memory, or TLS on loopback where said; no processes, no
/// avahi-daemon): what each end reports, and what lands.
final class ConversationTests: XCTestCase {
    func testATreeArrivesVerifiedAndASecondSendFindsItThere() async throws {
        for link in [Conversation.Link.memory, .tls] {
            try await treeArrivesVerified(over: link)
        }
    }

    private func treeArrivesVerified(over link: Conversation.Link) async throws {
        let talk = try Conversation()
        talk.link = link
        try talk.makeFile("tree/a.txt", size: 10)
        try talk.makeFile("tree/sub/big.bin", size: 3 << 20, seed: 2)
        try FileManager.default.createDirectory(
            atPath: talk.folder + "/src/tree/empty", withIntermediateDirectories: true)
        let first = try await talk.send(["tree"])
        let report = try first.sent.get()
        XCTAssertEqual(report.verified, 2)
        XCTAssertEqual(report.failed, [])
        XCTAssertEqual(report.bytesSent, (3 << 20) + 10)
        XCTAssertEqual(talk.received("tree/a.txt"), talk.original("tree/a.txt"))
        XCTAssertEqual(talk.received("tree/sub/big.bin"), talk.original("tree/sub/big.bin"))
        XCTAssertEqual(talk.inboxListing(), ["tree", "tree/a.txt", "tree/empty", "tree/sub", "tree/sub/big.bin"])
        XCTAssertNil(first.receiverError)
        XCTAssertTrue(first.log.contains { $0.contains("complete: 2 verified, 0 failed") }, "\(first.log)")

        // Sent again: the receiver already has both, and no file byte goes.
        let again = try await talk.send(["tree"])
        let second = try again.sent.get()
        XCTAssertEqual(second.verified, 2)
        XCTAssertEqual(second.bytesSent, 0)
        XCTAssertEqual(second.bytesSkipped, (3 << 20) + 10)
        XCTAssertEqual(talk.inboxListing().count, 5, "nothing numbered beside the files: \(talk.inboxListing())")
    }

    func testAnInterruptedFileResumesAfterTheChunksTheReceiverHas() async throws {
        let talk = try Conversation()
        try talk.makeFile("big.bin", size: 3 << 20 + 5)
        // What an interrupted send left: this sender's part file with the first two chunks.
        let inbox = try Inbox(path: talk.inbox)
        let part = try inbox.openPart(
            try RelativePath(validating: "big.bin"), for: talk.sender.identity.publicKeySHA256)
        try part.write(talk.original("big.bin")!.prefix(2 << 20), at: 0)
        part.closeFiles()
        let report = try await talk.send(["big.bin"]).sent.get()
        XCTAssertEqual(report.bytesSkipped, 2 << 20)
        XCTAssertEqual(report.bytesSent, (1 << 20) + 5)
        XCTAssertEqual(talk.received("big.bin"), talk.original("big.bin"))
        XCTAssertEqual(talk.inboxListing(), ["big.bin"], "the part file became the file")
    }

    /// Cancelled half way (`peerxfer cancel`): both ends say cancelled, and the receiver removes
    /// the part file it was writing and says so.
    func testACancelledSendIsNamedOnBothEndsAndLeavesNoPartFile() async throws {
        let talk = try Conversation()
        try talk.makeFile("big.bin", size: 6 << 20)
        talk.stopSending = (.cancelled, 1 << 20)
        let result = try await talk.send(["big.bin"])
        let error = try XCTUnwrap(result.error())
        XCTAssertEqual(error.outcome, "cancelled")
        XCTAssertTrue(error.message.contains("was told, and removes what it received"), error.message)
        XCTAssertEqual(result.receiverError?.outcome, "cancelled")
        XCTAssertEqual(talk.inboxListing(), [], "nothing left of a cancelled send")
        XCTAssertTrue(
            result.log.contains { $0.contains("cancelled by the sender") && $0.contains("1 part file removed") },
            "\(result.log)")
    }

    /// Cancelled at a moment the receiver picks (the sender most often waits for room to write
    /// a chunk then): told once that chunk is out, never inside it; the part file goes.
    func testACancelWhileAChunkIsBeingWrittenIsToldAfterItAndTheReceiverRemovesThePartFile() async throws {
        for round in 1...3 {
            let talk = try Conversation()
            try talk.makeFile("big.bin", size: 16 << 20)
            talk.stopWhenReceived = (.cancelled, UInt64(round) << 20)
            let result = try await talk.send(["big.bin"])
            let error = try XCTUnwrap(result.error())
            XCTAssertEqual(error.outcome, "cancelled", "round \(round)")
            XCTAssertTrue(error.message.contains("was told"), error.message)
            XCTAssertEqual(result.receiverError?.outcome, "cancelled", "round \(round): \(result.log)")
            XCTAssertEqual(talk.inboxListing(), [], "round \(round)")
        }
    }

    /// Stopped half way (Ctrl-C): both ends say stopped, the receiver keeps the part file and
    /// says the send resumes, and the same send then resumes from it.
    func testAStoppedSendKeepsItsPartFileAndTheSameSendResumesFromIt() async throws {
        let talk = try Conversation()
        try talk.makeFile("big.bin", size: 6 << 20)
        talk.stopSending = (.interrupted, 1 << 20)
        let stopped = try await talk.send(["big.bin"])
        let error = try XCTUnwrap(stopped.error())
        XCTAssertEqual(error.outcome, "stopped")
        XCTAssertTrue(error.message.contains("keeps what it received"), error.message)
        XCTAssertEqual(stopped.receiverError?.outcome, "stopped")
        XCTAssertEqual(talk.partFiles().count, 1, "\(talk.inboxListing())")
        XCTAssertTrue(
            stopped.log.contains { $0.contains("stopped after") && $0.contains("the same send resumes") },
            "\(stopped.log)")
        XCTAssertFalse(stopped.log.contains { $0.contains("close_notify") }, "no TLS detail: \(stopped.log)")

        let resumed = try await talk.send(["big.bin"]).sent.get()
        XCTAssertGreaterThan(resumed.bytesSkipped, 0, "resumed from the part file")
        XCTAssertEqual(resumed.bytesSent + resumed.bytesSkipped, 6 << 20)
        XCTAssertEqual(talk.received("big.bin"), talk.original("big.bin"))
        XCTAssertEqual(talk.inboxListing(), ["big.bin"])
    }

    /// Cancelled while the receiver's question is open: the question is withdrawn, and the
    /// part file an earlier interrupted send of the same file left is removed too.
    func testCancellingWhileTheQuestionIsOpenWithdrawsItAndRemovesWhatAnEarlierSendLeft() async throws {
        let talk = try Conversation()
        try talk.makeFile("big.bin", size: 3 << 20)
        let inbox = try Inbox(path: talk.inbox)
        let part = try inbox.openPart(
            try RelativePath(validating: "big.bin"), for: talk.sender.identity.publicKeySHA256)
        try part.write(talk.original("big.bin")!.prefix(1 << 20), at: 0)
        part.closeFiles()
        XCTAssertEqual(talk.partFiles().count, 1)
        let stopper = talk.stopper
        talk.policy = .ask { _ in
            stopper.stop(.cancelled)
            // Withdrawn (this task is cancelled) once the sender's word comes; the test fails
            // with a decline should it never come.
            try? await Task.sleep(for: .seconds(60))
            return .declined("no one withdrew the question")
        }
        let result = try await talk.send(["big.bin"])
        XCTAssertEqual(try XCTUnwrap(result.error()).outcome, "cancelled")
        let receiverError = try XCTUnwrap(result.receiverError)
        XCTAssertEqual(receiverError.outcome, "cancelled")
        XCTAssertTrue(receiverError.message.contains("its question was withdrawn"), receiverError.message)
        XCTAssertEqual(talk.inboxListing(), [], "the earlier send's part file went too")
    }

    /// A cancel that comes in the same write as the offer (so the receiver reads both at once)
    /// still withdraws the question at once, and no failure frame is sent back for it.
    func testACancelInTheSameWriteAsTheOfferWithdrawsTheQuestion() async throws {
        let talk = try Conversation()
        let asked = Locked(0)
        talk.policy = .ask { _ in
            asked.withLock { $0 += 1 }
            try? await Task.sleep(for: .seconds(60))
            return .declined("the question stayed open")
        }
        let hello = Frame.message(
            .hello, Hello(protocolVersion: TransferLimits.protocolVersion, device: "raw", name: "Raw"))
        let manifest = Frame.message(
            .manifest,
            Manifest(
                chunkSize: TransferLimits.chunkSize,
                entries: [ManifestEntry(path: "a.bin", kind: .file, size: 10, mode: 0o644, modified: 0)]))
        let cancel = Frame.message(.failure, Failure(code: "cancelled", message: "changed my mind"))
        let started = ContinuousClock.now
        let result = try await talk.offerRaw([hello, manifest, cancel])
        XCTAssertLessThan(ContinuousClock.now - started, .seconds(30), "withdrawn, not answered after 60 s")
        let error = try XCTUnwrap(result.receiverError)
        XCTAssertEqual(error.outcome, "cancelled", error.message)
        XCTAssertLessThanOrEqual(asked.value, 1)
        XCTAssertEqual(talk.inboxListing(), [])
    }

    /// A sender that ends without a word in the middle (killed, its link lost) is said to have
    /// stopped, plainly, and what it sent is kept. Over TLS: a connection lost is a reset
    /// there, where the two ends of a connection in memory can only close.
    func testASenderGoneWithoutAWordIsSaidPlainlyAndItsPartFileKept() async throws {
        let talk = try Conversation()
        talk.link = .tls
        try talk.makeFile("big.bin", size: 6 << 20)
        talk.cutAfterBytes = 1 << 20
        let result = try await talk.send(["big.bin"])
        XCTAssertNotNil(result.error())
        let receiverError = try XCTUnwrap(result.receiverError)
        XCTAssertEqual(receiverError.outcome, "stopped")
        XCTAssertTrue(receiverError.message.contains("the sender stopped without a word"), receiverError.message)
        XCTAssertFalse(result.log.contains { $0.hasPrefix("warning") && $0.contains("close_notify") }, "\(result.log)")
        XCTAssertEqual(talk.partFiles().count, 1, "\(talk.inboxListing())")
    }

    /// Each way an offer is not taken: its own words, outcome and exit code on the sender, the
    /// same outcome on the receiver, and nothing in the inbox.
    func testEachWayAnOfferIsNotTakenIsNamedTruthfullyOnBothEnds() async throws {
        let cases: [(Judgement, String, Int32, String)] = [
            (.declined("declined by the person at the receiver"), "declined", 5, "declined by the person"),
            (.declined("declined by the receiver's accept hook", by: .hook), "declined-by-hook", 9, "accept hook"),
            (.declined("no answer: no one answered", by: .noAnswer), "no-answer", 7, "no one answered"),
            (.declined("no one to ask: no terminal", by: .cannotAsk), "cannot-ask", 8, "no one to ask"),
        ]
        for (judgement, outcome, exitCode, words) in cases {
            let talk = try Conversation()
            try talk.makeFile("a.txt", size: 10)
            talk.policy = .ask { _ in judgement }
            let result = try await talk.send(["a.txt"])
            let error = try XCTUnwrap(result.error(), outcome)
            XCTAssertEqual(error.outcome, outcome)
            XCTAssertEqual(error.exitCode, exitCode, outcome)
            XCTAssertTrue(error.message.hasPrefix("the receiver says: "), error.message)
            XCTAssertTrue(error.message.contains(words), error.message)
            XCTAssertEqual(result.receiverError?.outcome, outcome)
            XCTAssertEqual(talk.inboxListing(), [], outcome)
        }
    }

    func testAPartlyDeclinedOfferSendsTheRestAndNamesWhoDeclined() async throws {
        for (cause, exitCode) in [(Judgement.Cause.person, 5), (.hook, 9)] {
            let talk = try Conversation()
            try talk.makeFile("keep.txt", size: 10)
            try talk.makeFile("skip.txt", size: 10, seed: 2)
            talk.policy = .ask { offer in
                Judgement(
                    accepted: Set(
                        offer.manifest.entries.indices.filter { offer.manifest.entries[$0].path == "keep.txt" }),
                    cause: cause)
            }
            let report = try await talk.send(["keep.txt", "skip.txt"]).sent.get()
            XCTAssertEqual(report.verified, 1)
            XCTAssertEqual(report.declined, ["skip.txt"])
            XCTAssertEqual(report.declineError("x").exitCode, Int32(exitCode))
            XCTAssertEqual(talk.inboxListing(), ["keep.txt"])
        }
    }

    func testAnUntrustedSenderIsDeclinedByPolicyUntilTrusted() async throws {
        let talk = try Conversation()
        try talk.makeFile("a.txt", size: 10)
        talk.policy = .known
        let refused = try await talk.send(["a.txt"])
        let refusal = refused.error()
        let error = try XCTUnwrap(refusal)
        XCTAssertEqual(error.exitCode, 10)
        XCTAssertEqual(error.outcome, "declined-by-policy")
        XCTAssertTrue(error.message.contains("takes files only from known senders"), error.message)
        XCTAssertTrue(
            error.message.contains(talk.sender.identity.publicKeySHA256), "the key to trust: \(error.message)")
        XCTAssertEqual(talk.inboxListing(), [])

        talk.trusted[talk.sender.identity.publicKeySHA256] = "laptop"
        let trusted = try await talk.send(["a.txt"]).sent.get()
        XCTAssertEqual(trusted.verified, 1)
        XCTAssertEqual(talk.received("a.txt"), talk.original("a.txt"))
    }

    func testAReceiverWithEverySlotTakenSaysItIsBusy() async throws {
        let talk = try Conversation()
        try talk.makeFile("a.txt", size: 10)
        talk.slotRefused = .everySlotTaken(limit: 8)
        let busy = try await talk.send(["a.txt"]).error()
        let error = try XCTUnwrap(busy)
        XCTAssertEqual(error.exitCode, 1)
        XCTAssertTrue(error.message.contains("the receiver is busy with 8 transfers"), error.message)
        XCTAssertEqual(talk.inboxListing(), [])
        // Refused for its address's share, the sender is told that, not that every slot is taken.
        talk.slotRefused = .sourceAtItsShare(limit: 4)
        let refused = try await talk.send(["a.txt"]).error()
        let share = try XCTUnwrap(refused)
        XCTAssertTrue(
            share.message.contains("already runs 4 transfers from your address"), share.message)
        XCTAssertFalse(share.message.contains("busy with"), share.message)
        XCTAssertEqual(talk.inboxListing(), [])
    }

    func testTheReceiversLogNamesATrustedSenderByItsLabelAndAStrangerAsClaimed() async throws {
        let talk = try Conversation()
        try talk.makeFile("a.txt", size: 10)
        let stranger = try await talk.send(["a.txt"])
        XCTAssertTrue(
            stranger.log.contains { $0.contains("transfer from \"Sender\" (claimed) [key") }, "\(stranger.log)")
        talk.trusted[talk.sender.identity.publicKeySHA256] = "laptop"
        try talk.makeFile("b.txt", size: 10)
        let known = try await talk.send(["b.txt"])
        XCTAssertTrue(
            known.log.contains { $0.contains("transfer from \"laptop\" (calling itself \"Sender\") [key") },
            "\(known.log)")
    }
}
