import Foundation
import XCTest

@testable import PeerTransferCore

/// The offer policy without a terminal or a hook process: what the person is asked, what a
/// pick means, and what a hook's end means.
final class OfferQuestionTests: XCTestCase {
    let key = String(repeating: "ab", count: 32)

    func offer(_ paths: [String], label: String? = nil, name: String = "laptop") -> IncomingOffer {
        let entries = paths.map { path in
            path.hasSuffix("/")
                ? ManifestEntry(path: String(path.dropLast()), kind: .directory, size: 0, mode: 0o755, modified: 0)
                : ManifestEntry(path: path, kind: .file, size: 1_000, mode: 0o644, modified: 0)
        }
        return IncomingOffer(
            senderName: name, senderKey: key, senderLabel: label, code: "12345 67890 12345 67890",
            manifest: Manifest(chunkSize: TransferLimits.chunkSize, entries: entries))
    }

    func testTheQuestionListsTheFirstEntriesEscapedAfterTheKeyAndOffersAlwaysOnlyForAStranger() {
        let paths = ["a\u{1b}[2Jb.txt", "photos/"] + (1...12).map { "photos/\($0).jpg" }
        let question = OfferQuestion(offer(paths), canTrust: true)
        let text = question.text
        XCTAssertFalse(text.contains("\u{1b}"), "no raw escape from the sender: \(text)")
        XCTAssertTrue(text.hasPrefix("unknown sender [key abababababababab…, code 12345 67890 12345 67890]"), text)
        XCTAssertTrue(text.contains("offers 13 files (13 KB):\n  a\\x1b[2Jb.txt\n  photos/\n"), text)
        XCTAssertTrue(text.contains("(and 4 more)\n"), "10 entries listed of 14: \(text)")
        XCTAssertTrue(text.contains("(a: accept, and always trust the key \(key))"), text)
        XCTAssertTrue(text.hasSuffix("Accept? [y/N/a/p] "), text)
        XCTAssertTrue(question.reminder.contains("a (always)"))

        let trusted = OfferQuestion(offer(paths, label: "laptop"), canTrust: true)
        XCTAssertFalse(trusted.offersAlways, "a trusted sender is trusted already")
        XCTAssertTrue(trusted.text.hasSuffix("Accept? [y/N/p] "))
        XCTAssertFalse(OfferQuestion(offer(paths), canTrust: false).offersAlways, "nowhere to record the key")
    }

    func testALongNameIsCutKeepingItsEnd() {
        let long = String(repeating: "x", count: 300) + ".pdf.exe"
        let text = OfferQuestion(offer([long]), canTrust: false).text
        XCTAssertTrue(text.contains("…"), "cut in the middle: \(text)")
        XCTAssertTrue(text.contains("x.pdf.exe\n"), "its end kept: \(text)")
        XCTAssertFalse(text.contains(String(repeating: "x", count: 101)), "at most 100 characters a name")
    }

    func testAPickTakesNumbersAndRangesAndBringsTheFoldersOfThePickedFiles() {
        let question = OfferQuestion(offer(["notes.txt", "photos/", "photos/1.jpg", "photos/2.jpg"]), canTrust: false)
        XCTAssertTrue(
            question.pickList.hasPrefix("  1. notes.txt\n  2. photos/\n  3. photos/1.jpg\n"), question.pickList)
        XCTAssertEqual(question.picked("1"), [0])
        XCTAssertEqual(question.picked("4"), [3, 1], "a picked file brings its folder")
        XCTAssertEqual(question.picked("1, 3-4"), [0, 1, 2, 3])
        XCTAssertEqual(question.picked(""), [], "nothing declines all")
        XCTAssertNil(question.picked("5"), "out of the list")
        XCTAssertNil(question.picked("0"))
        XCTAssertNil(question.picked("two"))
        XCTAssertEqual(question.pickReminder, "Numbers from 1 to 4, like 1 3-5: ")
    }

    func testOnlyTheFirstEntriesCanBePicked() {
        let paths = (1...(OfferQuestion.pickable + 5)).map { "f\($0)" }
        let question = OfferQuestion(offer(paths), canTrust: false)
        XCTAssertTrue(question.pickList.contains("only the first 200 of 205 can be picked here"))
        XCTAssertNil(question.picked("201"))
    }

    func testAHooksEndIsItsVerdict() {
        let entries = offer(["a.txt", "b\u{1b}.txt", "c.txt"]).manifest.entries
        func judged(_ status: Int32?, _ printed: String) -> Judgement {
            AcceptHookVerdict.judgement(status: status, printed: Data(printed.utf8), entries: entries, limit: 120)
        }
        XCTAssertEqual(judged(0, "").accepted, [0, 1, 2], "exit 0 printing nothing: all")
        XCTAssertEqual(
            judged(0, "a.txt\nb\\x1b.txt\n").accepted, [0, 1], "the paths it prints, as they were shown to it")
        XCTAssertEqual(judged(0, "a.txt\nb\\x1b.txt\n").cause, .hook)
        let none = judged(0, "nothing.txt\n")
        XCTAssertEqual(none.accepted, [])
        XCTAssertEqual(none.cause, .hook)
        XCTAssertEqual(judged(1, "a.txt\n"), .declined("declined by the receiver's accept hook", by: .hook))
        XCTAssertEqual(
            judged(nil, ""),
            .declined("no answer: the receiver's accept hook did not decide within 120 s", by: .noAnswer))
    }
}
