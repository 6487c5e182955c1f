import Foundation
import SalutTestSupport
import XCTest

/// `netsvc browse` against `avahi-browse`, and the commands added around it.
final class NetsvcBrowseTests: XCTestCase {
    let netsvc = NetsvcTests.netsvc

    private func run(_ arguments: [String], seconds: Double = 30) throws -> (Int32, String) {
        let process = try Foreign(arguments)
        let output = process.finish(seconds: seconds)
        return (process.process.terminationStatus, output)
    }

    func testNamesFromTheNetworkCannotDriveTheTerminal() throws {
        // A name that would retitle and clear the user's terminal, and a TXT value with a bell.
        let hostile = "Evil\u{1B}]0;owned\u{07}\u{1B}[2J Name"
        let type = uniqueType("e")
        let theirs = try Foreign(["avahi-publish", "-s", hostile, type, "5003", "note=ring\u{07}"])
        defer { theirs.stop() }
        XCTAssertTrue(theirs.waitForOutput(containing: "Established", seconds: 10), theirs.output)
        let (code, text) = try run([netsvc, "browse", type, "--resolve", "--terminate"])
        XCTAssertEqual(code, 0, text)
        XCTAssertFalse(
            text.unicodeScalars.contains { $0.value == 0x1B || $0.value == 0x07 },
            "raw control characters reached the terminal: \(text.debugDescription)")
        XCTAssertTrue(text.contains("Evil\\x1b]0;owned\\x07\\x1b[2J Name"), text)
        XCTAssertTrue(text.contains("note=0x72696e6707"), "a TXT value with control bytes is shown in hex: \(text)")
        // JSON keeps the name exact, escaped as JSON does.
        let (jsonCode, json) = try run([netsvc, "browse", type, "--terminate", "--json"])
        XCTAssertEqual(jsonCode, 0, json)
        XCTAssertFalse(json.unicodeScalars.contains { $0.value == 0x1B }, json)
        XCTAssertTrue(jsonLines(json).contains { $0["name"] as? String == hostile }, json)
    }

    private func jsonLines(_ text: String) -> [[String: Any]] {
        text.split(separator: "\n").compactMap {
            try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any]
        }
    }

    /// Reads avahi-browse's `-p -r` lines (`=;iface;proto;name;type;domain;host;address;port;"txt"…`)
    /// into name → (port, addresses, TXT strings).
    private func avahiResolved(_ text: String) -> [String: (port: Int, addresses: Set<String>, txt: Set<String>)] {
        var out: [String: (port: Int, addresses: Set<String>, txt: Set<String>)] = [:]
        for line in text.split(separator: "\n") where line.hasPrefix("=;") {
            let fields = line.split(separator: ";", maxSplits: 9, omittingEmptySubsequences: false).map(String.init)
            guard fields.count >= 9 else { continue }
            let name = Self.unescape(fields[3])
            var address = fields[7]
            if address.hasPrefix("fe80:") { address += "%" + fields[1] }
            let txt =
                fields.count > 9
                ? Set(
                    fields[9].split(separator: " ").map { $0.trimmingCharacters(in: CharacterSet(charactersIn: "\"")) })
                : []
            var entry = out[name] ?? (Int(fields[8]) ?? -1, [], [])
            entry.addresses.insert(address)
            entry.txt.formUnion(txt)
            out[name] = entry
        }
        return out
    }

    /// avahi-browse escapes bytes in names as `\DDD` (decimal).
    static func unescape(_ text: String) -> String {
        var bytes: [UInt8] = []
        var rest = Substring(text)
        while let first = rest.first {
            if first == "\\", rest.count >= 4, let code = UInt8(rest.dropFirst().prefix(3)) {
                bytes.append(code)
                rest = rest.dropFirst(4)
            } else {
                bytes.append(contentsOf: Array(String(first).utf8))
                rest = rest.dropFirst()
            }
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// With --resolve, a service that does not resolve holds up no other: one found while the
    /// first still waits for its host's address is printed first, resolved.
    func testAServiceThatDoesNotResolveHoldsUpNoOther() throws {
        let type = uniqueType("w")
        let nowhere = try Foreign([
            "avahi-publish", "-s", "-H", "nowhere-\(UUID().uuidString.prefix(6)).local", "Nowhere", type, "5003",
        ])
        defer { nowhere.stop() }
        XCTAssertTrue(nowhere.waitForOutput(containing: "Established", seconds: 10), nowhere.output)
        let browse = try Foreign([netsvc, "browse", type, "--resolve", "--json"])
        defer { browse.stop() }
        let later = try Foreign(["avahi-publish", "-s", "Later", type, "5004"])
        defer { later.stop() }
        XCTAssertTrue(browse.waitForOutput(containing: #""name":"Nowhere""#, seconds: 20), browse.output)
        let adds = jsonLines(browse.output).filter { $0["event"] as? String == "add" }
        XCTAssertEqual(adds.compactMap { $0["name"] as? String }, ["Later", "Nowhere"], browse.output)
        XCTAssertEqual(adds.first?["resolved"] as? Bool, true, browse.output)
        XCTAssertEqual(adds.last?["resolved"] as? Bool, false, browse.output)
    }

    func testBrowseResolveMatchesAvahiBrowse() throws {
        let type = uniqueType("c")
        let ours = try Foreign([netsvc, "publish", "Salut Side", type, "5001", "color=blue", "flag"])
        defer { ours.stop() }
        let theirs = try Foreign(["avahi-publish", "-s", "Avahi Side", type, "5002", "k=v", "n=1"])
        defer { theirs.stop() }
        XCTAssertTrue(ours.waitForOutput(containing: "published", seconds: 10), ours.output)
        XCTAssertTrue(theirs.waitForOutput(containing: "Established", seconds: 10), theirs.output)

        // A service whose host has no address: flagged as not resolved, in JSON and in text,
        // not printed like a browse without --resolve.
        let unresolvedType = uniqueType("u")
        let nowhere = try Foreign([
            "avahi-publish", "-s", "-H", "nowhere-\(UUID().uuidString.prefix(6)).local", "Nowhere", unresolvedType,
            "5003",
        ])
        defer { nowhere.stop() }
        XCTAssertTrue(nowhere.waitForOutput(containing: "Established", seconds: 10), nowhere.output)
        let (unresolvedCode, unresolved) = try run([
            netsvc, "browse", unresolvedType, "--resolve", "--terminate", "--json",
        ])
        XCTAssertEqual(unresolvedCode, 0, unresolved)
        let flagged = try XCTUnwrap(jsonLines(unresolved).first { $0["event"] as? String == "add" }, unresolved)
        XCTAssertEqual(flagged["resolved"] as? Bool, false, unresolved)
        XCTAssertNotNil(flagged["resolveError"] as? String, unresolved)
        let (_, unresolvedText) = try run([netsvc, "browse", unresolvedType, "--resolve", "--terminate"])
        XCTAssertTrue(unresolvedText.contains("(not resolved: "), unresolvedText)

        let (code, text) = try run([netsvc, "browse", type, "--resolve", "--terminate", "--json"])
        XCTAssertEqual(code, 0, text)
        let adds = jsonLines(text).filter { $0["event"] as? String == "add" }
        XCTAssertTrue(adds.allSatisfy { $0["resolved"] as? Bool == true }, text)
        let (avahiCode, avahiText) = try run(["avahi-browse", "-p", "-r", "-t", type])
        XCTAssertEqual(avahiCode, 0, avahiText)
        let reference = avahiResolved(avahiText)
        XCTAssertEqual(
            Set(adds.compactMap { $0["name"] as? String }), Set(reference.keys), "same services:\n\(text)\n\(avahiText)"
        )
        XCTAssertEqual(Set(reference.keys), ["Salut Side", "Avahi Side"])
        for add in adds {
            let name = add["name"] as? String ?? ""
            let expected = try XCTUnwrap(reference[name], name)
            XCTAssertEqual(add["port"] as? Int, expected.port, name)
            XCTAssertEqual(add["interface"] as? String, "lo", name)
            XCTAssertEqual(add["protocol"] as? String, "IPv4", name)
            // The host is this machine: its loopback name has an A and an AAAA record, and avahi
            // may answer a resolve with either one first (both tools are right, and a run has
            // seen them differ); any other address must be the same.
            let got = Set(add["addresses"] as? [String] ?? [])
            let loopback: Set<String> = ["127.0.0.1", "::1"]
            if got.union(expected.addresses).isSubset(of: loopback) {
                XCTAssertFalse(got.isEmpty, name)
            } else {
                XCTAssertEqual(got, expected.addresses, name)
            }
            let txt = (add["txt"] as? [String: Any] ?? [:]).map { key, value in
                value as? Bool == true ? key : "\(key)=\(value)"
            }
            XCTAssertEqual(Set(txt), expected.txt, name)
        }
    }

    func testBrowseAllListsEveryTypeAndFiltersWork() throws {
        let type = uniqueType("a")
        let publisher = try Foreign([netsvc, "publish", "Everywhere", type, "5003"])
        defer { publisher.stop() }
        XCTAssertTrue(publisher.waitForOutput(containing: "published", seconds: 10), publisher.output)

        // Another host announces a type netsvc will not browse (an underscore in its service
        // name, as some devices' types have): it is left out with a note, the rest listed.
        let odd = "_odd_\(type.dropFirst().prefix { $0 != "." })._tcp"
        let oddPublisher = try Foreign(["avahi-publish", "-s", "Odd One", odd, "5004"])
        defer { oddPublisher.stop() }
        XCTAssertTrue(oddPublisher.waitForOutput(containing: "Established", seconds: 10), oddPublisher.output)

        let (code, text) = try run([netsvc, "browse", "--all", "--terminate", "--json"])
        XCTAssertEqual(code, 0, text)
        XCTAssertTrue(
            jsonLines(text).contains { $0["name"] as? String == "Everywhere" && $0["type"] as? String == type }, text)
        XCTAssertTrue(text.contains("netsvc: not browsing the type \"\(odd)\" another host announces"), text)

        let (v4, v4Text) = try run([
            netsvc, "browse", type, "--terminate", "--resolve", "--ipv4", "--interface", "lo", "--json",
        ])
        XCTAssertEqual(v4, 0, v4Text)
        let found = try XCTUnwrap(jsonLines(v4Text).first { $0["name"] as? String == "Everywhere" }, v4Text)
        XCTAssertEqual(found["addresses"] as? [String], ["127.0.0.1"], "only IPv4 addresses with --ipv4")

        let (local, localText) = try run([netsvc, "browse", type, "--terminate", "--ignore-local", "--json"])
        XCTAssertEqual(local, 0, localText)
        XCTAssertFalse(
            localText.contains("Everywhere"), "a service of this host is left out with --ignore-local: \(localText)")

        let (bad, badText) = try run([netsvc, "browse", type, "--interface", "no-such-if0", "--terminate"])
        XCTAssertEqual(bad, 2, badText)
        XCTAssertTrue(badText.contains("no network interface named"), badText)
        XCTAssertEqual(try run([netsvc, "browse", "--terminate"]).0, 2, "a type or --all is required")
        XCTAssertEqual(try run([netsvc, "browse", type, "--ipv4", "--ipv6"]).0, 2)
    }

    func testPlainOutputIsAlignedAndUncolouredWhenNotATerminal() throws {
        let type = uniqueType("p")
        let first = try Foreign([netsvc, "publish", "A", type, "1"])
        defer { first.stop() }
        let second = try Foreign([netsvc, "publish", "Much Longer Name", type, "2"])
        defer { second.stop() }
        XCTAssertTrue(first.waitForOutput(containing: "published", seconds: 10))
        XCTAssertTrue(second.waitForOutput(containing: "published", seconds: 10))
        let (code, text) = try run([netsvc, "browse", type, "--terminate"])
        XCTAssertEqual(code, 0, text)
        let lines = text.split(separator: "\n").filter { $0.hasPrefix("+") }
        XCTAssertEqual(lines.count, 2, text)
        XCTAssertFalse(text.contains("\u{1B}["), "no colour codes into a pipe")
        let typeColumns = Set(
            lines.compactMap { line in String(line).range(of: type).map { String(line)[..<$0.lowerBound].count } })
        XCTAssertEqual(typeColumns.count, 1, "the type column lines up:\n\(text)")
    }

    func testColourOnlyOnATerminalAndNeverWithNO_COLOR() throws {
        let type = uniqueType("k")
        let publisher = try Foreign([netsvc, "publish", "Painted", type, "7"])
        defer { publisher.stop() }
        XCTAssertTrue(publisher.waitForOutput(containing: "published", seconds: 10))
        // `script` gives netsvc a pseudo-terminal as stdout (NO_COLOR removed: a test runner
        // may set it).
        let (code, text) = try run([
            "env", "-u", "NO_COLOR", "script", "-qec", "\(netsvc) browse \(type) --terminate", "/dev/null",
        ])
        XCTAssertEqual(code, 0, text)
        XCTAssertTrue(text.contains("\u{1B}[32m+"), "a green + on a terminal: \(text.debugDescription)")
        let (plainCode, plain) = try run([
            "env", "NO_COLOR=1", "script", "-qec", "\(netsvc) browse \(type) --terminate", "/dev/null",
        ])
        XCTAssertEqual(plainCode, 0, plain)
        XCTAssertTrue(plain.contains("Painted") && !plain.contains("\u{1B}["), plain.debugDescription)
    }

    func testVerifyListsOnlyServicesThatAnswerAndReportsOneThatStopsAnsweringAsRemoved() throws {
        let type = uniqueType("v")
        let publisher = try Foreign([netsvc, "publish", "Real One", type, "4242"])
        defer { publisher.stop() }
        XCTAssertTrue(publisher.waitForOutput(containing: "published", seconds: 10), publisher.output)
        // A ghost: announced, never answering (its host left without its goodbye reaching us).
        try GhostResponder.announce("Long Gone", type: type, port: 4243)
        // One that answers until it is told to leave, then leaves without a goodbye.
        let fading = try GhostResponder.start("Fading", type: type, port: 4244, answering: true)
        defer {
            fading.stop()
            for name in ["Long Gone", "Fading"] {
                try? GhostResponder.announce(name, type: type, port: 1, goodbye: true)
            }
        }
        XCTAssertTrue(fading.waitForOutput(containing: "answering", seconds: 10), fading.output)

        // Without --verify the daemon's cache lists all three; with it, the ghost is left out.
        let (plainCode, plain) = try run([netsvc, "browse", type, "--terminate"])
        XCTAssertEqual(plainCode, 0, plain)
        XCTAssertTrue(plain.contains("Long Gone") && plain.contains("Real One") && plain.contains("Fading"), plain)
        let (code, verified) = try run([netsvc, "browse", type, "--terminate", "--verify", "--log-level", "info"])
        XCTAssertEqual(code, 0, verified)
        XCTAssertTrue(verified.contains("+ Real One") && verified.contains("+ Fading"), verified)
        XCTAssertFalse(verified.contains("+ Long Gone"), verified)
        XCTAssertTrue(verified.contains("Long Gone (\(type)) is listed by avahi-daemon but does not answer"), verified)

        // Watching: the one that stops answering is reported removed within the bound (one
        // period and two 3 s checks), while the daemon still lists it.
        let watch = try Foreign([netsvc, "browse", type, "--verify", "--verify-every", "1", "--json"])
        defer { watch.stop() }
        XCTAssertTrue(watch.waitForOutput(containing: "\"name\":\"Fading\"", seconds: 10), watch.output)
        fading.closeInput()
        XCTAssertTrue(fading.waitForExit(seconds: 10), "the responder left")
        XCTAssertTrue(
            watch.waitForOutput(containing: "\"reason\":\"not-answering\"", seconds: 15),
            "reported within 15 s of the responder leaving: \(watch.output)")
        let removal = jsonLines(watch.output).first { $0["event"] as? String == "remove" }
        XCTAssertEqual(removal?["name"] as? String, "Fading", watch.output)
        XCTAssertEqual(removal?["detail"] as? String, "stopped answering; avahi-daemon may still list it")
        XCTAssertTrue(try run(["avahi-browse", "-pt", type]).1.contains("Fading"), "the daemon still lists it")
        XCTAssertFalse(jsonLines(watch.output).contains { $0["name"] as? String == "Long Gone" }, watch.output)

        // Bad combinations are usage errors.
        XCTAssertEqual(try run([netsvc, "browse", type, "--verify-every", "5"]).0, 2)
        XCTAssertEqual(try run([netsvc, "browse", type, "--verify-every", "6"]).0, 2, "even the default value")
        for bad in ["0.5", "0", "3601", "nan", "-5"] {
            let (status, text) = try run([netsvc, "browse", type, "--verify", "--verify-every", bad])
            XCTAssertEqual(status, 2, bad)
            XCTAssertTrue(text.contains("--verify-every must be 1 to 3600 seconds"), "\(bad): \(text)")
        }
        XCTAssertEqual(try run([netsvc, "browse", type, "--verify", "--domain", "example.com"]).0, 2)
    }

    func testPublishWithSubtypesIsFoundUnderEach() throws {
        let type = uniqueType("u")
        let publisher = try Foreign([
            netsvc, "publish", "Sub Printer", type, "631", "--subtype", "_color", "--subtype", "_duplex",
        ])
        defer { publisher.stop() }
        XCTAssertTrue(publisher.waitForOutput(containing: "published", seconds: 10), publisher.output)
        for subtype in ["_color", "_duplex"] {
            let (code, text) = try run(["avahi-browse", "-p", "-t", "\(subtype)._sub.\(type)"])
            XCTAssertEqual(code, 0, text)
            XCTAssertTrue(text.contains("Sub\\032Printer"), "\(subtype): \(text)")
        }
        XCTAssertEqual(try run([netsvc, "publish", "X", type, "1", "--subtype", "bad subtype"]).0, 2)
    }

    func testMonitorPrintsEachTXTChange() throws {
        let type = uniqueType("m")
        let first = try Foreign(["avahi-publish", "-s", "Watched", type, "5004", "v=1"])
        XCTAssertTrue(first.waitForOutput(containing: "Established", seconds: 10), first.output)
        let monitor = try Foreign([netsvc, "monitor", "Watched", type, "--json"])
        defer { monitor.stop() }
        XCTAssertTrue(monitor.waitForOutput(containing: "\"v\":\"1\"", seconds: 10), monitor.output)
        first.stop()
        let second = try Foreign(["avahi-publish", "-s", "Watched", type, "5004", "v=2"])
        defer { second.stop() }
        XCTAssertTrue(monitor.waitForOutput(containing: "\"v\":\"2\"", seconds: 15), monitor.output)
    }

    func testDomainsListsLocalFirst() throws {
        let (code, text) = try run([netsvc, "domains"])
        XCTAssertEqual(code, 0, text)
        XCTAssertEqual(text.split(separator: "\n").first, "local")
        let (json, jsonText) = try run([netsvc, "domains", "--registration", "--json"])
        XCTAssertEqual(json, 0, jsonText)
        XCTAssertEqual(jsonLines(jsonText).first?["domain"] as? String, "local")
    }

    func testCompletionScriptsAndHelpOfTheNewCommands() throws {
        for shell in ["bash", "zsh", "fish"] {
            let (code, text) = try run([netsvc, "--generate-completion-script", shell])
            XCTAssertEqual(code, 0, shell)
            XCTAssertTrue(
                text.contains("netsvc") && text.contains("browse") && text.contains("connect"),
                "\(shell): \(text.prefix(200))")
        }
        for command in ["connect", "monitor", "domains"] {
            let (code, text) = try run([netsvc, command, "--help"])
            XCTAssertEqual(code, 0, command)
            XCTAssertTrue(text.contains("Example"), "\(command) --help has no examples: \(text)")
        }
    }
}
