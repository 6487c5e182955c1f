import Foundation
import SalutTestSupport
import XCTest

/// The built `netsvc` run as a user or a script would: exit codes, help, JSON lines.
final class NetsvcTests: XCTestCase {
    static let netsvc = BuiltProduct.path("netsvc")

    private func run(_ arguments: [String], environment: [String] = [], seconds: Double = 20) throws -> (Int32, String)
    {
        let process = try Foreign(environment + [Self.netsvc] + arguments)
        let out = process.finish(seconds: seconds)
        return (process.process.terminationStatus, out)
    }

    func testHelpOfEveryCommandTeachesWithExamples() throws {
        for command in [[], ["browse"], ["publish"], ["resolve"], ["lookup"]] {
            let (code, out) = try run(command + ["--help"])
            XCTAssertEqual(code, 0, "\(command) --help")
            XCTAssertTrue(out.contains("Example"), "\(command) --help has no examples: \(out)")
        }
        let (_, top) = try run(["--help"])
        XCTAssertTrue(top.contains("Exit codes"), top)
        let (versionCode, version) = try run(["--version"])
        XCTAssertEqual(versionCode, 0, version)
        XCTAssertEqual(version.trimmingCharacters(in: .whitespacesAndNewlines), "0.1.0")
    }

    func testUsageErrorsExit2() throws {
        XCTAssertEqual(try run(["resolve"]).0, 2, "missing arguments")
        XCTAssertEqual(try run(["no-such-command"]).0, 2, "unknown command")
        XCTAssertEqual(try run(["resolve", "x", "not-a-type"]).0, 2, "malformed type")
        XCTAssertEqual(try run(["publish", "x", "_ok._tcp", "70000"]).0, 2, "port out of range")
    }

    func testTimeoutsOutsideTheirRangeAreUsageErrorsBeforeTheDaemonIsAsked() throws {
        // Without a daemon: a bad timeout must still be exit 2 (checked first), never a trap or a hang.
        let noDaemon = ["env", "DBUS_SYSTEM_BUS_ADDRESS=unix:path=/nonexistent"]
        for bad in ["nan", "inf", "-1", "0", "1e20", "1e300", "soon"] {
            for command in [
                ["resolve", "x", "_xy._tcp"], ["lookup", "x.local"], ["connect", "x", "_xy._tcp"], ["domains"],
            ] {
                let (code, out) = try run(command + ["--timeout", bad], environment: noDaemon)
                XCTAssertEqual(code, 2, "\(command) --timeout \(bad): \(out)")
                XCTAssertTrue(out.contains("--timeout"), out)
            }
        }
        let (code, out) = try run(["resolve", "x", "_xy._tcp", "--timeout=-1"], environment: noDaemon)
        XCTAssertEqual(code, 2, out)
    }

    func testNotFoundExits1() throws {
        let type = uniqueType()
        let (code, out) = try run(["resolve", "Nobody Home", type, "--timeout", "1"])
        XCTAssertEqual(code, 1, out)
        XCTAssertTrue(
            out.contains(
                "\"Nobody Home\" \(type) in local did not resolve within 1 s: no service of that name is published"),
            out)
        // With --json, the same as an object a script can read.
        let (jsonCode, jsonOut) = try run(["resolve", "Nobody Home", type, "--timeout", "0.5", "--json"])
        XCTAssertEqual(jsonCode, 1, jsonOut)
        XCTAssertTrue(jsonOut.contains(#""event":"error""#) && jsonOut.contains(#""exit":1"#), jsonOut)
        XCTAssertTrue(jsonOut.contains("within 0.5 s"), jsonOut)

        // A service that is published but whose host has no address is told apart, and a name
        // close to a published one gets it as a suggestion.
        let ghost = try Foreign([
            "avahi-publish", "-s", "-H", "nowhere-\(UUID().uuidString.prefix(6)).local", "Ghost Printer", type, "9",
        ])
        defer { ghost.stop() }
        XCTAssertTrue(ghost.waitForOutput(containing: "Established", seconds: 10), ghost.output)
        let (ghostCode, ghostOut) = try run(["resolve", "Ghost Printer", type, "--timeout", "1"])
        XCTAssertEqual(ghostCode, 1, ghostOut)
        XCTAssertTrue(ghostOut.contains("it is published, but its host gave no address in time"), ghostOut)
        let (_, nearOut) = try run(["resolve", "Ghost Printr", type, "--timeout", "1"])
        XCTAssertTrue(nearOut.contains("(did you mean \"Ghost Printer\"?)"), nearOut)
    }

    func testNoDaemonExits3WithAHint() throws {
        let (code, out) = try run(
            ["resolve", "x", "_xy._tcp"], environment: ["env", "DBUS_SYSTEM_BUS_ADDRESS=unix:path=/nonexistent"])
        XCTAssertEqual(code, 3, out)
        XCTAssertTrue(out.contains("start it with") && out.contains("avahi-daemon"), out)
    }

    func testCollisionWithNoRenameExits4AndJSONLinesParse() throws {
        let type = uniqueType()
        let first = try Foreign([Self.netsvc, "publish", "Clash", type, "1", "k=v", "--json"])
        defer { first.stop() }
        XCTAssertTrue(first.waitForOutput(containing: "\"published\"", seconds: 10), first.output)
        let (code, out) = try run(["publish", "Clash", type, "2", "--no-rename"])
        XCTAssertEqual(code, 4, out)
        // With --json the collision is a JSON event too, for scripts that read the lines.
        let (jsonCode, jsonOut) = try run(["publish", "Clash", type, "2", "--no-rename", "--json"])
        XCTAssertEqual(jsonCode, 4, jsonOut)
        XCTAssertTrue(jsonOut.contains("\"event\":\"collision\""), jsonOut)

        let (browseCode, lines) = try run(["browse", type, "--resolve", "--terminate", "--json"])
        XCTAssertEqual(browseCode, 0, lines)
        let objects = lines.split(separator: "\n").compactMap {
            try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any]
        }
        let add = try XCTUnwrap(objects.first { $0["event"] as? String == "add" }, lines)
        XCTAssertEqual(add["name"] as? String, "Clash")
        XCTAssertEqual(add["port"] as? Int, 1)
        XCTAssertEqual((add["txt"] as? [String: Any])?["k"] as? String, "v")

        // SIGINT withdraws: a browser sees the service go.
        kill(first.process.processIdentifier, SIGINT)
        var gone = false
        try eventually(timeout: 10, interval: 0) {
            gone = !(try run(["browse", type, "--terminate"]).1.contains("Clash"))
            return gone
        }
        XCTAssertTrue(gone, "the service is still listed after SIGINT")
    }
}
