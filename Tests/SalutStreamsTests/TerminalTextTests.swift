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
    }
}
