import Foundation
import SalutTestSupport
import XCTest

/// What `netsvc` does with bad input (issue #11 item 4) and with hostile names from the network
/// (item 5): the exit code and the message the user sees.
final class NetsvcInputTests: XCTestCase {
    let netsvc = NetsvcTests.netsvc
    /// Points the client at a bus that does not exist: any command that reached the daemon
    /// would exit 3.
    let noDaemon = ["env", "DBUS_SYSTEM_BUS_ADDRESS=unix:path=/nonexistent"]

    private func run(_ arguments: [String], seconds: Double = 20) throws -> (code: Int32, output: String) {
        let process = try Foreign(arguments)
        let output = process.finish(seconds: seconds)
        return (process.process.terminationStatus, output)
    }

    /// `netsvc` with arguments written as shell words, so that they can hold bytes that are not
    /// UTF-8 (`$(printf '\377')`), which a Swift string cannot carry to the child.
    private func runShell(_ words: String) throws -> (code: Int32, output: String) {
        try run(noDaemon + ["sh", "-c", "exec \"$0\" \(words)", netsvc])
    }

    func testEveryTimeoutOptionRefusesNonFiniteAndOutOfRangeValuesBeforeTheDaemon() throws {
        // Every subcommand whose help offers --timeout, so that a new one is covered too.
        let (_, top) = try run([netsvc, "--help"])
        let commands = ["browse", "publish", "resolve", "lookup", "connect", "monitor", "domains"]
        XCTAssertTrue(commands.allSatisfy { top.contains($0) }, top)
        let arguments = [
            "resolve": ["x", "_xy._tcp"], "lookup": ["x.local"], "connect": ["x", "_xy._tcp"],
            "monitor": ["x", "_xy._tcp"], "browse": ["_xy._tcp"], "publish": ["x", "_xy._tcp", "1"], "domains": [],
        ]
        var timed: [String] = []
        for command in commands {
            guard try run([netsvc, command, "--help"]).output.contains("--timeout") else { continue }
            timed.append(command)
            for bad in ["nan", "inf", "-inf", "-1", "0", "1e20", "1e300", "3600.5", "soon"] {
                let (code, out) = try run(
                    noDaemon + [netsvc, command] + arguments[command, default: []] + ["--timeout=\(bad)"])
                XCTAssertEqual(code, 2, "\(command) --timeout \(bad): \(out)")
                XCTAssertTrue(out.contains("The value '\(bad)' is invalid for '--timeout"), out)
                XCTAssertTrue(out.contains("0.001 to 3600"), "the message says the range: \(out)")
            }
            // A negative number as the next argument is a value out of range, not a missing one.
            let (code, out) = try run(
                noDaemon + [netsvc, command] + arguments[command, default: []] + ["--timeout", "-1"])
            XCTAssertEqual(code, 2, "\(command) --timeout -1: \(out)")
            XCTAssertTrue(out.contains("The value '-1' is invalid for '--timeout"), "\(command) --timeout -1: \(out)")
        }
        XCTAssertEqual(Set(timed), ["resolve", "lookup", "connect", "domains"])
    }

    func testALongServiceTypeIsWarnedAboutOnceAndLogLevelSilencesIt() throws {
        let type = "_salutlongwarn\(UInt32.random(in: 100_000...999_999))._tcp"
        let (code, out) = try run([netsvc, "browse", type, "--terminate"])
        XCTAssertEqual(code, 0, "taken: \(out)")
        XCTAssertEqual(
            out.components(separatedBy: "netsvc: warning: service type \(type)").count - 1, 1, "one warning: \(out)")
        XCTAssertTrue(out.contains("RFC 6335 allows 15"), out)
        let (quietCode, quiet) = try run([netsvc, "browse", type, "--terminate", "--log-level", "error"])
        XCTAssertEqual(quietCode, 0, quiet)
        // Resolving does not warn: the library cannot tell a type typed by the user from one
        // found on the network (a LAN peer's long type is not the user's choice).
        let (_, resolved) = try run([
            netsvc, "resolve", "Nobody", "_salutotherlong\(UInt32.random(in: 100_000...999_999))._tcp", "--timeout",
            "0.5",
        ])
        XCTAssertFalse(resolved.contains("warning"), resolved)
        XCTAssertFalse(quiet.contains("warning"), quiet)
        let (badCode, bad) = try run(noDaemon + [netsvc, "browse", type, "--log-level", "loud"])
        XCTAssertEqual(badCode, 2, bad)
        XCTAssertTrue(bad.contains("--log-level"), bad)
    }

    func testUsageErrorsAreExit2EvenWithoutADaemon() throws {
        let cases: [([String], String)] = [
            (["lookup", "127.0.0.1"], "invalid host name \"127.0.0.1\": that is an IP address"),
            (["lookup", "::1"], "invalid host name \"::1\": that is an IP address"),
            (["lookup", "myhost"], "give the full name with its domain, for example myhost.local"),
            (["lookup", "a..local"], "each dot-separated label must be 1 to 63 bytes"),
            (["resolve", "x", "not-a-type"], "invalid service type \"not-a-type\""),
            (["resolve", "", "_xy._tcp"], "invalid service name: the name is empty"),
            (["monitor", "x", "_xy._tcp", "--domain", "a..b"], "invalid domain \"a..b\""),
            (["connect", String(repeating: "n", count: 64), "_xy._tcp"], "64 bytes of UTF-8; at most 63 fit"),
            (["browse", "_x"], "invalid service type \"_x\""),
            (["browse", "_xy._tcp", "--interface", "nosuch0"], "no network interface named \"nosuch0\""),
            (["publish", "x", "_xy._tcp", "1", "--subtype", "bad subtype"], "invalid service type"),
            // A bad pin is answered with the command's own usage line.
            (["connect", "x", "_xy._tcp", "--pin", "zz"], "Usage: netsvc connect <name> <type>"),
            // A mistyped option is named as such, with what it may be, even when a required
            // option is missing too (ArgumentParser alone would only say that one is missing).
            (["gateway", "--domian", "home.arpa"], "netsvc gateway: unknown option --domian; did you mean --domain?"),
            (["browse", "_xy._tcp", "--termnate"], "unknown option --termnate; did you mean --terminate?"),
            (["resolve", "--tmeout=3", "x"], "unknown option --tmeout; did you mean --timeout?"),
            (["brwose", "_xy._tcp"], "netsvc: 'brwose' is not a command. Did you mean 'browse'?"),
            (["help", "pubilsh"], "'pubilsh' is not a command. Did you mean 'publish'?"),
            // After a flag, the next word is still checked.
            (["gateway", "--dry-run", "--domian", "x", "--tsig-key", "k"], "unknown option --domian; did you mean"),
        ]
        for (arguments, message) in cases {
            let (code, out) = try run(noDaemon + [netsvc] + arguments)
            XCTAssertEqual(code, 2, "\(arguments): \(out)")
            XCTAssertTrue(out.contains(message), "\(arguments): \(out)")
            XCTAssertFalse(out.contains("Avahi error"), "our own message, not Avahi's number: \(out)")
        }
    }

    func testArgumentParsersOwnOptionsStillWorkAfterASubcommand() throws {
        for arguments in [["browse", "--version"], ["gateway", "--help-hidden"], ["help", "help"]] {
            let (code, out) = try run(noDaemon + [netsvc] + arguments)
            XCTAssertEqual(code, 0, "\(arguments): \(out)")
            XCTAssertFalse(out.contains("unknown option") || out.contains("is not a command"), "\(arguments): \(out)")
        }
    }

    func testAGatewayThatCannotStartSaysWhyInItsJSONLogToo() throws {
        // A key file that is not there: a usage error, said on standard error and as the JSON
        // log's last line.
        let (keyCode, keyOutput) = try run(
            noDaemon + [netsvc, "gateway", "--domain", "home.arpa", "--tsig-key", "/nonexistent/gw.key", "--json"])
        XCTAssertEqual(keyCode, 2, keyOutput)
        XCTAssertTrue(keyOutput.contains("netsvc: --tsig-key /nonexistent/gw.key:"), keyOutput)
        let keyEvent = try XCTUnwrap(keyOutput.split(separator: "\n").last { $0.hasPrefix("{") }, keyOutput)
        let keyObject = try XCTUnwrap(JSONSerialization.jsonObject(with: Data(keyEvent.utf8)) as? [String: Any])
        XCTAssertEqual(keyObject["event"] as? String, "error", keyOutput)
        XCTAssertEqual(keyObject["exit"] as? Int, 2, keyOutput)
        XCTAssertTrue((keyObject["message"] as? String)?.contains("/nonexistent/gw.key") == true, keyOutput)

        // No daemon: exit 3, and the JSON says so.
        let key = FileManager.default.temporaryDirectory.appendingPathComponent("gw-\(getpid()).key")
        try "key \"gw.\" {\n algorithm hmac-sha256;\n secret \"c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0\";\n};\n".write(
            to: key, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(at: key) }
        chmod(key.path, 0o600)
        let (daemonCode, daemonOutput) = try run(
            noDaemon + [netsvc, "gateway", "--domain", "home.arpa", "--tsig-key", key.path, "--json"])
        XCTAssertEqual(daemonCode, 3, daemonOutput)
        let daemonEvent = try XCTUnwrap(daemonOutput.split(separator: "\n").last { $0.hasPrefix("{") }, daemonOutput)
        let daemonObject = try XCTUnwrap(
            JSONSerialization.jsonObject(with: Data(daemonEvent.utf8)) as? [String: Any])
        XCTAssertEqual(daemonObject["event"] as? String, "error", daemonOutput)
        XCTAssertEqual(daemonObject["exit"] as? Int, 3, daemonOutput)
    }

    func testOversizedTXTRecordIsAUsageErrorThatSaysTheSizeAndTheLimit() throws {
        // 300 attributes of 246 bytes: 74,100 bytes with their length bytes (Avahi said "Invalid record").
        let huge = (1...300).map { "k\(String(format: "%03d", $0))=" + String(repeating: "x", count: 241) }
        let (code, out) = try run(noDaemon + [netsvc, "publish", "Big", "_xy._tcp", "1"] + huge)
        XCTAssertEqual(code, 2, out)
        XCTAssertTrue(
            out.contains("invalid TXT record: the record is 74100 bytes; at most 8800 fit in one mDNS packet"), out)

        // One byte over the limit: 35 attributes of 250 bytes (8,785 with their length bytes) and
        // one of 15 (16).
        let limit = (1...35).map { "k\(String(format: "%02d", $0))=" + String(repeating: "x", count: 246) }
        let (overCode, over) = try run(
            noDaemon + [netsvc, "publish", "Big", "_xy._tcp", "1"] + limit + [
                "last=" + String(repeating: "y", count: 10)
            ])
        XCTAssertEqual(overCode, 2, over)
        XCTAssertTrue(over.contains("the record is 8801 bytes; at most 8800"), over)
    }

    func testTXTRecordAtTheLimitIsPublishedWithAWarningAndResolves() throws {
        let type = uniqueType("z")
        let limit = (1...35).map { "k\(String(format: "%02d", $0))=" + String(repeating: "x", count: 246) }
        let ours = try Foreign(
            [netsvc, "publish", "At Limit", type, "1"] + limit + ["last=" + String(repeating: "y", count: 9)])
        defer { ours.stop() }
        XCTAssertTrue(ours.waitForOutput(containing: "published", seconds: 10), ours.output)
        XCTAssertTrue(
            ours.output.contains("warning: the TXT record is 8800 bytes; RFC 6763 §6.2 advises under 1300"), ours.output
        )
        let (code, json) = try run([netsvc, "resolve", "At Limit", type, "--json"])
        XCTAssertEqual(code, 0, json)
        let object = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(json.utf8)) as? [String: Any], json)
        XCTAssertEqual((object["txt"] as? [String: Any])?.count, 36, "every attribute arrives")
    }

    func testDuplicateTXTKeysInAnyCaseAreAUsageErrorNamingBoth() throws {
        let (code, out) = try run(noDaemon + [netsvc, "publish", "x", "_xy._tcp", "1", "a=1", "Path=/", "PATH=/b"])
        XCTAssertEqual(code, 2, out)
        XCTAssertTrue(out.contains("keys \"Path\" and \"PATH\" are the same key (TXT keys are case-insensitive"), out)
        let (same, sameOut) = try run(noDaemon + [netsvc, "publish", "x", "_xy._tcp", "1", "flag", "flag=1"])
        XCTAssertEqual(same, 2, sameOut)
        XCTAssertTrue(sameOut.contains("key \"flag\" appears twice"), sameOut)
    }

    func testArgumentsThatAreNotUTF8AreRefusedNotRepaired() throws {
        let cases: [(String, String)] = [
            ("publish \"$(printf 'Bad\\377')\" _xy._tcp 1", "the service name is not valid UTF-8: \"Bad\\xFF\""),
            ("resolve \"$(printf '\\377')\" _xy._tcp", "the service name is not valid UTF-8: \"\\xFF\""),
            ("connect \"$(printf 'a\\300b')\" _xy._tcp", "the service name is not valid UTF-8: \"a\\xC0b\""),
            ("monitor x _xy._tcp --domain \"$(printf 'lo\\377cal')\"", "--domain is not valid UTF-8: \"lo\\xFFcal\""),
            ("lookup \"$(printf 'host\\377.local')\"", "the host name is not valid UTF-8: \"host\\xFF.local\""),
            ("publish x _xy._tcp 1 \"$(printf 'k=\\376')\"", "a TXT attribute is not valid UTF-8: \"k=\\xFE\""),
            ("browse _xy._tcp --domain=\"$(printf '\\377')\"", "--domain is not valid UTF-8: \"--domain=\\xFF\""),
        ]
        for (words, message) in cases {
            let (code, out) = try runShell(words)
            XCTAssertEqual(code, 2, "\(words): \(out)")
            XCTAssertTrue(out.contains(message), "\(words): \(out)")
        }
        // Valid UTF-8 beyond ASCII is a name like any other (and this one is not there: exit 1).
        let (code, out) = try run([netsvc, "resolve", "Café ☕", uniqueType(), "--timeout", "0.5"])
        XCTAssertEqual(code, 1, out)
    }

    func testHostileHostNamesAndTXTValuesAreEscapedInEveryTextOutputAndExactInJSON() throws {
        let type = uniqueType("h")
        let host = "evil\u{1B}[2J\u{07}" + String(type.dropFirst().prefix { $0 != "." }) + ".local"
        // A value that is text (shown escaped) and one with ASCII control bytes (shown in hex).
        let value = "\u{202E}gnp.exe\u{9B}1m\u{3164}"
        let control = "\u{1B}]0;owned\u{07}"
        let address = try Foreign(["avahi-publish", "-a", "-R", host, "192.0.2.77"])
        defer { address.stop() }
        XCTAssertTrue(address.waitForOutput(containing: "Established", seconds: 10), address.output)
        let service = try Foreign([
            "avahi-publish", "-s", "-H", host, "Hostile \u{1B}[31mRed", type, "7", "note=" + value, "ctl=" + control,
        ])
        defer { service.stop() }
        XCTAssertTrue(service.waitForOutput(containing: "Established", seconds: 10), service.output)

        let raw: Set<UInt32> = [0x1B, 0x07, 0x9B, 0x202E, 0x3164]
        func assertSafe(_ text: String, _ what: String, file: StaticString = #filePath, line: UInt = #line) {
            XCTAssertFalse(
                text.unicodeScalars.contains { raw.contains($0.value) },
                "\(what): raw control characters reached the terminal: \(text.debugDescription)", file: file, line: line
            )
        }
        let name = "Hostile \u{1B}[31mRed"
        let (resolveCode, resolved) = try run([netsvc, "resolve", name, type])
        XCTAssertEqual(resolveCode, 0, resolved)
        assertSafe(resolved, "resolve")
        XCTAssertTrue(resolved.contains("Hostile \\x1b[31mRed"), resolved)
        XCTAssertTrue(resolved.contains("note=\\u{202e}gnp.exe\\x9b1m\\u{3164}"), resolved)
        XCTAssertTrue(resolved.contains("ctl=0x1b5d303b6f776e656407"), resolved)
        XCTAssertTrue(resolved.contains("host       evil"), resolved)

        let (browseCode, browsed) = try run([netsvc, "browse", type, "--resolve", "--terminate"])
        XCTAssertEqual(browseCode, 0, browsed)
        assertSafe(browsed, "browse --resolve")
        XCTAssertTrue(browsed.contains("Hostile \\x1b[31mRed"), browsed)

        let monitor = try Foreign([netsvc, "monitor", name, type])
        defer { monitor.stop() }
        XCTAssertTrue(monitor.waitForOutput(containing: "note=", seconds: 10), monitor.output)
        monitor.stop()
        assertSafe(monitor.output, "monitor")

        // JSON: the same characters as \u escapes, and the exact value once parsed.
        let (jsonCode, json) = try run([netsvc, "resolve", name, type, "--json"])
        XCTAssertEqual(jsonCode, 0, json)
        assertSafe(json, "resolve --json")
        XCTAssertTrue(json.contains("\\u202e") && json.contains("\\u009b"), json)
        let object = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(json.utf8)) as? [String: Any], json)
        XCTAssertEqual((object["txt"] as? [String: Any])?["note"] as? String, value)
        XCTAssertEqual((object["txt"] as? [String: Any])?["ctl"] as? String, control)
        XCTAssertEqual(object["name"] as? String, name)
    }
}
