import SalutDiscovery
import SalutTools
import XCTest

/// "Did you mean …": the names a person probably meant.
final class NameSuggestionsTests: XCTestCase {
    func testTyposCaseAndStartsFindTheNameAndStrangersDoNot() {
        let names = ["Kitchen", "Office PC", "Living Room", "kitchen-2", "Attic"]
        XCTAssertEqual(NameSuggestions.closest(to: "kitchn", among: names), ["Kitchen"])
        XCTAssertEqual(NameSuggestions.closest(to: "kitchen", among: names).first, "Kitchen")
        XCTAssertEqual(NameSuggestions.closest(to: "Kticehn", among: names), [])  // too far
        XCTAssertEqual(NameSuggestions.closest(to: "Kithcen", among: names), ["Kitchen"])  // two swapped
        XCTAssertEqual(NameSuggestions.closest(to: "offi", among: names), ["Office PC"])
        XCTAssertEqual(NameSuggestions.closest(to: "Garage", among: names), [])
        XCTAssertEqual(NameSuggestions.closest(to: "Kitchen", among: ["Kitchen"]), [], "not the name itself")
        XCTAssertEqual(NameSuggestions.closest(to: "", among: names), [])
        // A long hostile name costs nothing much, and suggests nothing.
        XCTAssertEqual(NameSuggestions.closest(to: "kitchen", among: [String(repeating: "x", count: 100_000)]), [])
    }
}

/// The command-line checks netsvc and peerxfer make before ArgumentParser reads the arguments.
final class MistypedArgumentsTests: XCTestCase {
    let options: Set<String> = ["--domain", "--tsig-key", "--text", "--help"]

    func testTheFirstUnknownLongOptionIsNamedWithWhatItMayBe() {
        XCTAssertEqual(
            MistypedArguments.firstUnknownOption(in: ["--domian", "x"], options: options),
            .init(typed: "--domian", suggestions: ["--domain"]))
        XCTAssertEqual(
            MistypedArguments.firstUnknownOption(in: ["--domian=x"], options: options)?.typed, "--domian")
        XCTAssertEqual(
            MistypedArguments.firstUnknownOption(in: ["--zzz"], options: options),
            .init(typed: "--zzz", suggestions: []))
    }

    func testValuesOperandsAndShortOptionsAreLeftAlone() {
        XCTAssertNil(MistypedArguments.firstUnknownOption(in: ["--domain", "x", "--tsig-key=k"], options: options))
        XCTAssertNil(MistypedArguments.firstUnknownOption(in: ["--text", "--looks-like-one"], options: options))
        XCTAssertNil(MistypedArguments.firstUnknownOption(in: ["--", "--anything"], options: options))
        XCTAssertNil(MistypedArguments.firstUnknownOption(in: ["-h", "-", "--"], options: options))
    }

    func testOptionsAreReadFromHelpAndCommandsAreCheckedByName() {
        XCTAssertEqual(
            MistypedArguments.options(inHelp: "  --domain <ZONE>   The zone (or --tsig-key).\n  -h, --help"),
            ["--domain", "--tsig-key", "--help"])
        XCTAssertNil(MistypedArguments.unknownCommand("browse", commands: ["browse", "publish"]))
        XCTAssertEqual(
            MistypedArguments.unknownCommand("brwose", commands: ["browse", "publish"])?.suggestions, ["browse"])
    }
}
