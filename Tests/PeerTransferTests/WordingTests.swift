import XCTest
@testable import PeerTransferCore

final class WordingTests: XCTestCase {
    func testDurationsReadInTheLargestWholeUnit() {
        XCTAssertEqual(Wording.duration(604_800), "7 days")
        XCTAssertEqual(Wording.duration(86_400), "1 day")
        XCTAssertEqual(Wording.duration(3_600), "1 hour")
        XCTAssertEqual(Wording.duration(5_400), "90 minutes")
        XCTAssertEqual(Wording.duration(90), "90 seconds")
        XCTAssertEqual(Wording.duration(60), "1 minute")
        XCTAssertEqual(Wording.duration(0.5), "0.5 seconds", "a fraction is said, not rounded away")
        XCTAssertEqual(Wording.duration(2.25), "2.3 seconds")
        XCTAssertEqual(Wording.duration(0.01), "0.1 seconds")
        XCTAssertEqual(Wording.duration(0.95), "1 second", "rounded first, then counted")
        XCTAssertEqual(Wording.duration(59.95), "1 minute")
        // Nothing a configuration could hold traps.
        XCTAssertEqual(Wording.duration(-3), "0 seconds")
        XCTAssertEqual(Wording.duration(.nan), "0 seconds")
        XCTAssertEqual(Wording.duration(.infinity), Wording.duration(1e12))
    }

    func testShortTaskIDsAreTheFirstEightDigits() {
        XCTAssertEqual(TaskID.short("3f2a9c1e-0000-4000-8000-000000000000"), "3f2a9c1e")
        XCTAssertEqual(TaskID.short("abc"), "abc")
    }

    func testAgoReadsAsPeopleSayIt() {
        XCTAssertEqual(Wording.ago(5), "just now")
        XCTAssertEqual(Wording.ago(300), "5 minutes ago")
        XCTAssertEqual(Wording.ago(7_300), "2 hours ago")
        XCTAssertEqual(Wording.ago(3 * 86_400 + 5), "3 days ago")
        XCTAssertEqual(Wording.clock(102), "1:42")
        XCTAssertEqual(Wording.clock(3723), "1:02:03")
        XCTAssertEqual(Wording.clock(.infinity), "--:--")
    }
}

final class ShellWordTests: XCTestCase {
    /// Each word, printed, holds no character a terminal acts on or hides, and bash reads it
    /// back as the text it stands for.
    func testWordsAreSafeToShowAndMeanTheirTextToBash() throws {
        let texts = [
            "/tmp/plain cfg", "/tmp/it's \"quoted\"", "/tmp/back\\slash", "/tmp/nl\ncfg", "/tmp/esc\u{1b}[31mcfg",
            "/tmp/c1\u{9b}2J", "/tmp/Kit\u{3164}chen", "/tmp/bidi\u{202e}fdp", "/tmp/music\u{1d173}", "/tmp/ünï cödé",
        ]
        for text in texts {
            let word = ShellWord.quoted(text)
            XCTAssertFalse(
                word.unicodeScalars.contains {
                    $0.value < 0x20 || (0x7f...0x9f).contains($0.value) || $0.value == 0x3164 || $0.value == 0x202e
                },
                "\(word.debugDescription) shows a raw control or invisible character")
            // In a UTF-8 locale and in the C locale (many containers, cron, ssh sessions).
            for locale in ["C.UTF-8", "C"] {
                let bash = Process()
                bash.executableURL = URL(fileURLWithPath: "/bin/bash")
                bash.arguments = ["-c", "printf %s \(word)"]
                bash.environment = ["LC_ALL": locale]
                let output = Pipe()
                bash.standardOutput = output
                try bash.run()
                let read = output.fileHandleForReading.readDataToEndOfFile()
                bash.waitUntilExit()
                XCTAssertEqual(
                    String(decoding: read, as: UTF8.self), text,
                    "bash (LC_ALL=\(locale)) read \(word) as something else")
            }
        }
        XCTAssertEqual(ShellWord.quoted("/tmp/it's"), "'/tmp/it'\\''s'")
        XCTAssertEqual(ShellWord.quoted("/tmp/nl\ncfg"), "$'/tmp/nl\\x0acfg'")
        XCTAssertEqual(ShellWord.quoted("/tmp/Kit\u{3164}chen"), "$'/tmp/Kit\\xe3\\x85\\xa4chen'")
    }

    func testACutNameKeepsItsExtension() {
        let name = "invoice" + String(repeating: "-", count: 150) + ".pdf.exe"
        let shown = Wording.shortened(name, to: 100)
        XCTAssertEqual(shown.count, 100)
        XCTAssertTrue(shown.hasSuffix(".pdf.exe") && shown.hasPrefix("invoice") && shown.contains("…"), shown)
        XCTAssertEqual(Wording.shortened("short.txt", to: 100), "short.txt")
    }

    func testASenderIsNamedByItsTrustedLabelOrItsClaimedNameMarkedAsClaimed() {
        let key = "368bc9ff" + String(repeating: "0", count: 56)
        XCTAssertEqual(Receiver.shown(claimed: "laptop", key: key, label: "Laptop"), "\"Laptop\" [key 368bc9ff…]")
        // Trusted under one name and calling itself another now: both, so that three log lines
        // about one device do not read as three devices.
        XCTAssertEqual(
            Receiver.shown(claimed: "Desk", key: key, label: "Laptop"),
            "\"Laptop\" (calling itself \"Desk\") [key 368bc9ff…]")
        XCTAssertEqual(Receiver.shown(claimed: "vm", key: key, label: nil), "\"vm\" (claimed) [key 368bc9ff…]")
        XCTAssertEqual(
            Receiver.shown(claimed: "vm", key: key, label: KnownPeers.trustedByFingerprint),
            "\"vm\" (claimed, key trusted) [key 368bc9ff…]")
        // A claimed name with quotes cannot pass for a trusted label.
        let forged = Receiver.shown(claimed: "Laptop\" [key 368bc9ff…]", key: key, label: nil)
        XCTAssertEqual(forged, "\"Laptop\\\" [key 368bc9ff…]\" (claimed) [key 368bc9ff…]")
        XCTAssertFalse(forged.hasPrefix("\"Laptop\" "), forged)
    }

    func testTwoSpellingsOfANameAreToldApartByTheirCharacters() {
        XCTAssertEqual(TransferPlan.spelled("caf\u{e9}.txt"), "with U+00E9")
        XCTAssertEqual(TransferPlan.spelled("cafe\u{301}.txt"), "with U+0065 U+0301")
        XCTAssertEqual(TransferPlan.spelled("plain.txt"), "all ASCII")
        XCTAssertTrue(
            TransferPlan.spelled(String(repeating: "\u{3042}", count: 20)).hasSuffix(" …"), "a long list is cut")
    }
}

/// What a person may type at a receiver's question.
final class OfferAnswerTests: XCTestCase {
    func testAnswersAreReadLeniently() {
        XCTAssertEqual(OfferAnswer(" Y "), .yes)
        XCTAssertEqual(OfferAnswer("yes"), .yes)
        XCTAssertEqual(OfferAnswer(""), .no, "the question's default")
        XCTAssertEqual(OfferAnswer("No"), .no)
        XCTAssertEqual(OfferAnswer("always"), .always)
        XCTAssertEqual(OfferAnswer("p"), .pick)
        XCTAssertEqual(OfferAnswer("yse"), .unclear, "a typo is asked again, not taken as a no")
        XCTAssertEqual(OfferAnswer("ja"), .unclear)
    }

    func testPicksAreNumbersAndRangesWithinTheList() {
        XCTAssertEqual(OfferAnswer.picked("1 3-5, 8", count: 10), [0, 2, 3, 4, 7])
        XCTAssertEqual(OfferAnswer.picked("", count: 3), [])
        XCTAssertNil(OfferAnswer.picked("0", count: 3))
        XCTAssertNil(OfferAnswer.picked("4", count: 3))
        XCTAssertNil(OfferAnswer.picked("3-1", count: 3))
        XCTAssertNil(OfferAnswer.picked("1-2-3", count: 3))
        XCTAssertNil(OfferAnswer.picked("two", count: 3))
        XCTAssertNil(OfferAnswer.picked("1-99999999999999999999", count: 3))
    }
}

/// A peer's free text, as the tool keeps and shows it.
final class PeerTextTests: XCTestCase {
    func testAPeersLongTextIsCutBeforeItIsEscaped() {
        let flood = String(repeating: "\u{1}", count: 2_000_000)
        let error = PeerTransferError.fromWire(code: "declined", message: flood)
        XCTAssertLessThan(error.message.utf8.count, 5_000, "cut, not 8 MB of escapes")
        XCTAssertTrue(error.message.hasSuffix("… (cut at 1000 bytes)"), String(error.message.suffix(40)))
        XCTAssertEqual(error.exitCode, 5)
        XCTAssertEqual(Terminal.escapePeerText("short \u{1b}"), "short \\x1b")
    }

    func testAClaimedNamesQuotesAreEscapedOnce() {
        XCTAssertEqual(Receiver.quotable("Bob\") trusted (\"x"), "Bob\\\") trusted (\\\"x")
        XCTAssertEqual(Receiver.quotable(Receiver.quotable("a\"b")), "a\\\"b", "not twice")
        XCTAssertEqual(Receiver.quotable("a\\\\\"b"), "a\\\\\\\"b", "an escaped backslash does not escape the quote")
    }
}
