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
        // A character Unicode writes as another (NFC) is shown as an escape: a Kelvin sign
        // passes for a K, an Ohm sign for an omega, yet the names differ. Composed and
        // decomposed accents are both left alone (each is its own canonical form's text).
        XCTAssertEqual(TerminalText.escaped("\u{212a}itchen"), "\\u{212a}itchen")
        XCTAssertEqual(TerminalText.escaped("10 \u{2126}"), "10 \\u{2126}")
        XCTAssertEqual(TerminalText.escaped("Caf\u{e9} e\u{301}"), "Caf\u{e9} e\u{301}")
    }
}
