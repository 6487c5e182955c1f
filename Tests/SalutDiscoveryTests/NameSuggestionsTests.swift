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
    let options = MistypedArguments.options(
        inHelp: """
            OVERVIEW: Mirror the link (see --pin, which this command does not take).

            USAGE: netsvc gateway [--json] --domain <ZONE> [--text <text>] [--rename/--no-rename]

            OPTIONS:
              --domain <ZONE>   The zone (see also --accept).
              --tsig-key <FILE>  The key.
              --json            JSON.
              --text <text>     Text.
              --rename/--no-rename
                                Whether to rename; --other is not an option here.
              -h, --help        Show help information.
            """
    ).union(.builtIn)

    func testOptionsAndWhetherTheyTakeAValueAreReadFromTheHelp() {
        XCTAssertEqual(
            options.names,
            [
                "--json", "--domain", "--text", "--rename", "--no-rename", "--tsig-key", "--help", "--help-hidden",
                "--version", "--experimental-dump-help", "--generate-completion-script",
            ])
        XCTAssertEqual(
            options.takingValues, ["--domain", "--text", "--tsig-key", "--generate-completion-script"])
    }

    func testTheFirstUnknownLongOptionIsNamedWithWhatItMayBe() {
        XCTAssertEqual(
            MistypedArguments.firstUnknownOption(in: ["--domian", "x"], options: options),
            .init(typed: "--domian", suggestions: ["--domain"]))
        XCTAssertEqual(MistypedArguments.firstUnknownOption(in: ["--domian=x"], options: options)?.typed, "--domian")
        XCTAssertEqual(
            MistypedArguments.firstUnknownOption(in: ["--zzz"], options: options),
            .init(typed: "--zzz", suggestions: []))
        // After a flag, the next word is checked (a flag takes no value).
        XCTAssertEqual(
            MistypedArguments.firstUnknownOption(in: ["--json", "--domian", "x"], options: options)?.typed, "--domian")
        XCTAssertEqual(
            MistypedArguments.firstUnknownOption(in: ["--domain=x", "--tsig-kye", "k"], options: options)?.typed,
            "--tsig-kye")
        // A long dash, as a formatted page turns `--`.
        XCTAssertEqual(
            MistypedArguments.firstUnknownOption(in: ["\u{2014}json"], options: options),
            .init(typed: "\u{2014}json", suggestions: ["--json"]))
        XCTAssertNil(MistypedArguments.firstUnknownOption(in: ["\u{2014}Fancy Name"], options: options))
        // Options the prose mentions are not this command's.
        XCTAssertEqual(MistypedArguments.firstUnknownOption(in: ["--pin"], options: options)?.typed, "--pin")
        XCTAssertEqual(MistypedArguments.firstUnknownOption(in: ["--accept"], options: options)?.typed, "--accept")
        XCTAssertEqual(MistypedArguments.firstUnknownOption(in: ["--other"], options: options)?.typed, "--other")
    }

    func testValuesOperandsBuiltInsAndShortOptionsAreLeftAlone() {
        XCTAssertNil(MistypedArguments.firstUnknownOption(in: ["--domain", "x", "--tsig-key=k"], options: options))
        XCTAssertNil(MistypedArguments.firstUnknownOption(in: ["--text", "--looks-like-one"], options: options))
        XCTAssertNil(MistypedArguments.firstUnknownOption(in: ["--", "--anything"], options: options))
        XCTAssertNil(
            MistypedArguments.firstUnknownOption(in: ["-h", "-", "--no-rename", "--version"], options: options))
    }

    func testHelpBeforeAMistypedCommandAndOptionsBeforeTheCommandAreRefusedWithTheFix() {
        let commands: [(name: String, help: () -> String)] = [
            (
                name: "browse",
                help: { "OPTIONS:\n  --json                  Write JSON.\n  --domain <DOMAIN>       The domain." }
            ),
            (name: "publish", help: { "OPTIONS:\n  --port <PORT>           The port." }),
        ]
        func refusal(_ words: [String]) -> String? {
            MistypedArguments.refusal(of: words, tool: "netsvc", commands: commands)
        }
        XCTAssertEqual(
            refusal(["--help", "brwose"]),
            "netsvc: 'brwose' is not a command. Did you mean 'browse'? The commands: browse, publish (see 'netsvc --help')"
        )
        XCTAssertNil(refusal(["--help", "browse"]), "help for a command that exists")
        XCTAssertNil(refusal(["--help"]))
        XCTAssertNil(refusal(["--version"]))
        XCTAssertEqual(
            refusal(["--jsn", "browse", "_ipp._tcp"]),
            "netsvc: unknown option --jsn; did you mean netsvc browse --json? (options go after the command; see 'netsvc browse --help')"
        )
        XCTAssertEqual(refusal(["--json", "browse"]), "netsvc: --json goes after the command: netsvc browse --json …")
        XCTAssertEqual(
            refusal(["--json"]),
            "netsvc: --json is not an option of netsvc itself: options go after the command (see 'netsvc COMMAND --help')"
        )
    }

    func testCommandsAreCheckedByName() {
        XCTAssertNil(MistypedArguments.unknownCommand("browse", commands: ["browse", "publish"]))
        XCTAssertNil(MistypedArguments.unknownCommand("help", commands: ["browse", "publish"]), "help help")
        XCTAssertEqual(
            MistypedArguments.unknownCommand("brwose", commands: ["browse", "publish"])?.suggestions, ["browse"])
    }
}
