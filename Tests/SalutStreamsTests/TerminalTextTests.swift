import SalutStreams
import XCTest

/// What a terminal is shown of text a peer chose.
final class TerminalTextTests: XCTestCase {
    func testControlsAndDisguisesAreShownAsEscapesAndPlainTextIsLeftAlone() {
        XCTAssertEqual(TerminalText.escaped("Kitchen printer"), "Kitchen printer")
        XCTAssertEqual(TerminalText.escaped("Küche · 厨房 · кухня"), "Küche · 厨房 · кухня")
        XCTAssertEqual(TerminalText.escaped("a\u{1b}[2Jb\u{7}\r\n"), "a\\x1b[2Jb\\x07\\x0d\\x0a")
        XCTAssertEqual(TerminalText.escaped("\u{9b}31m"), "\\x9b31m")
        XCTAssertEqual(TerminalText.escaped("invoice\u{202e}fdp.exe"), "invoice\\u{202e}fdp.exe")
        XCTAssertEqual(TerminalText.escaped("Kit\u{3164}chen"), "Kit\\u{3164}chen")
        // A backslash is doubled: text that spells an escape never reads as the character.
        XCTAssertEqual(TerminalText.escaped("a\\x1b"), "a\\\\x1b")
        XCTAssertNotEqual(TerminalText.escaped("\\x1b"), TerminalText.escaped("\u{1b}"))
        // Emoji keep the joiner they need.
        XCTAssertEqual(TerminalText.escaped("👩\u{200d}💻"), "👩\u{200d}💻")
        // Text not in Unicode's composed form (NFC) can look like other text and be another
        // name: what makes the difference is shown as an escape (a Kelvin sign passes for a K,
        // an Ohm sign for an omega, an e and a combining accent for an é). Composed text, and
        // combining marks in it that compose with nothing, are left alone. (Compared as bytes:
        // Swift's string comparison takes composed and decomposed text for the same.)
        func shown(_ text: String) -> [UInt8] { Array(TerminalText.escaped(text).utf8) }
        XCTAssertEqual(shown("\u{212a}itchen"), Array("\\u{212a}itchen".utf8))
        XCTAssertEqual(shown("10 \u{2126}"), Array("10 \\u{2126}".utf8))
        XCTAssertEqual(shown("Cafe\u{301}"), Array("Cafe\\u{0301}".utf8))
        XCTAssertEqual(shown("Caf\u{e9}"), Array("Caf\u{e9}".utf8))
        XCTAssertEqual(shown("x\u{301}"), Array("x\u{301}".utf8), "NFC: an accent on an x composes with nothing")
        // Two conjoining jamo show as the syllable they compose: the second is escaped.
        XCTAssertEqual(shown("\u{1100}\u{1161}"), Array("\u{1100}\\u{1161}".utf8))
        // Only the characters not in NFC: a composed é beside a look-alike stays as it is.
        XCTAssertEqual(shown("Caf\u{e9} \u{212a}"), Array("Caf\u{e9} \\u{212a}".utf8))
    }
}
