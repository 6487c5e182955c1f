import Foundation
import SalutTestSupport
import XCTest

/// `netsvc connect` and `netsvc publish --listen`, run as a user would, against the real daemon.
final class NetsvcStreamTests: XCTestCase {
    let netsvc = NetsvcTests.netsvc

    /// Starts `netsvc publish … --listen` and waits until it has published.
    private func listeningPublisher(_ arguments: [String]) throws -> Foreign {
        let publisher = try Foreign([netsvc, "publish"] + arguments + ["--listen"])
        guard publisher.waitForOutput(containing: "(listening)", seconds: 10) else {
            publisher.stop()
            throw DeadlineExceeded(what: "publish --listen: \(publisher.output)", seconds: 10)
        }
        return publisher
    }

    /// Runs a shell command line (for redirections) and returns its exit status and output.
    private func shell(_ line: String, seconds: Double = 60) throws -> (Int32, String) {
        let process = try Foreign(["/bin/sh", "-c", line])
        let output = process.finish(seconds: seconds)
        return (process.process.terminationStatus, output)
    }

    private func temporaryFile(_ name: String) -> String {
        FileManager.default.temporaryDirectory.appendingPathComponent("salut-\(UUID().uuidString)-\(name)").path
    }

    func testConnectToExecCatRoundTripsTenMebibytesUnchanged() throws {
        let type = uniqueType("x")
        let publisher = try listeningPublisher(["Echo", type, "0", "--exec", "cat"])
        defer { publisher.stop() }
        let input = temporaryFile("in"), output = temporaryFile("out")
        defer {
            try? FileManager.default.removeItem(atPath: input); try? FileManager.default.removeItem(atPath: output)
        }
        XCTAssertTrue(FileManager.default.createFile(atPath: input, contents: payload(10 << 20)))
        let (code, text) = try shell("\(netsvc) connect Echo \(type) < \(input) > \(output)")
        XCTAssertEqual(code, 0, text)
        let sent = try Data(contentsOf: URL(fileURLWithPath: input))
        let received = try Data(contentsOf: URL(fileURLWithPath: output))
        XCTAssertEqual(received.count, sent.count)
        XCTAssertTrue(received == sent, "the bytes that came back differ")
        XCTAssertTrue(publisher.waitForOutput(containing: "disconnected", seconds: 10), publisher.output)
    }

    func testListenBridgesItsOwnStdinAndStdoutBothWays() throws {
        let type = uniqueType("s")
        let publisher = try listeningPublisher(["Desk", type, "0"])
        defer { publisher.stop() }
        publisher.write("from the publisher\n")
        publisher.closeInput()
        let (code, text) = try shell("echo 'from the client' | \(netsvc) connect Desk \(type)")
        XCTAssertEqual(code, 0, text)
        XCTAssertTrue(text.contains("from the publisher"), text)
        XCTAssertTrue(publisher.waitForOutput(containing: "from the client", seconds: 10), publisher.output)
    }

    func testTLSWithThePinnedKeyWorksAndAWrongPinExits1() throws {
        let certificate = try TestCertificate.make()
        let type = uniqueType("t")
        let publisher = try listeningPublisher([
            "Vault", type, "0", "--exec", "tr a-z A-Z",
            "--tls-cert", certificate.certificateFile, "--tls-key", certificate.keyFile,
        ])
        defer { publisher.stop() }
        let (code, text) = try shell(
            "echo secret | \(netsvc) connect Vault \(type) --pin \(certificate.publicKeySHA256)")
        XCTAssertEqual(code, 0, text)
        XCTAssertEqual(text, "SECRET\n")
        let wrong = String(repeating: "0", count: 64)
        let (refused, message) = try shell("echo secret | \(netsvc) connect Vault \(type) --pin \(wrong)")
        XCTAssertEqual(refused, 1, message)
        XCTAssertTrue(message.contains("matches no pinned fingerprint"), message)
        XCTAssertFalse(message.contains("SECRET"), message)
        let (plain, plainMessage) = try shell("echo secret | \(netsvc) connect Vault \(type) --tls")
        XCTAssertEqual(plain, 1, "the system trust store does not know a self-signed certificate: \(plainMessage)")
        XCTAssertTrue(plainMessage.contains("self-signed"), plainMessage)
        // Without --tls: the service closes without a word; the person is told what to try.
        let (_, cleartext) = try shell("echo secret | \(netsvc) connect Vault \(type)")
        XCTAssertTrue(
            cleartext.contains("if it expects TLS, try again with --tls (and --pin SHA256 or --ca FILE)"), cleartext)
        XCTAssertFalse(cleartext.contains("SECRET"), cleartext)
    }

    func testListenOptionsAreCheckedAsUsageErrors() throws {
        XCTAssertEqual(try shell("\(netsvc) publish X _xy._tcp 0").0, 2, "port 0 without --listen")
        XCTAssertEqual(try shell("\(netsvc) publish X _xy._tcp 80 --exec cat").0, 2, "--exec without --listen")
        XCTAssertEqual(try shell("\(netsvc) publish X _xy._tcp 0 --listen --tls-cert c.pem").0, 2, "cert without key")
        XCTAssertEqual(try shell("\(netsvc) connect X _xy._tcp --pin nothex").0, 2, "a malformed pin")
        XCTAssertEqual(
            try shell("\(netsvc) publish X _xy._tcp 0 --listen --max-connections 0").0, 2, "no connections at all")
        XCTAssertEqual(try shell("\(netsvc) publish X _xy._tcp 0 --listen --idle-timeout nan").0, 2, "a NaN idle bound")
    }

    func testConnectExitsNonZeroWhenNotAllOfItsInputReachedTheService() throws {
        let type = uniqueType("u")
        // The service reads 10 bytes, answers, and goes away: most of the upload never arrives.
        let publisher = try listeningPublisher(["Short", type, "0", "--exec", "head -c 10"])
        defer { publisher.stop() }
        let input = temporaryFile("big")
        defer { try? FileManager.default.removeItem(atPath: input) }
        // More than loopback's socket buffers hold, so the upload cannot all be out of our hands.
        XCTAssertTrue(FileManager.default.createFile(atPath: input, contents: payload(32 << 20)))
        let (code, message) = try shell("\(netsvc) connect Short \(type) < \(input) > /dev/null")
        XCTAssertEqual(code, 1, message)
        XCTAssertTrue(message.contains("connection to \"Short\" failed: "), message)
        XCTAssertTrue(
            message.contains("sending:") || message.contains("receiving:"), "says which direction: \(message)")
    }

    func testAnEmptyInputToAServiceThatClosesAtOnceIsACleanEnd() throws {
        let type = uniqueType("e")
        // The service ends the session before reading anything: with nothing to send, nothing
        // was lost, however the closes cross on the wire.
        let publisher = try listeningPublisher(["Brief", type, "0", "--exec", "echo bye"])
        defer { publisher.stop() }
        for round in 1...10 {
            let (code, text) = try shell("\(netsvc) connect Brief \(type) < /dev/null")
            XCTAssertEqual(code, 0, "round \(round): \(text)")
            XCTAssertFalse(text.contains("not all of the input"), "round \(round): \(text)")
        }
    }

    func testAChildHasOnlyItsOwnThreeDescriptors() throws {
        let type = uniqueType("d")
        let publisher = try listeningPublisher(["Fds", type, "0", "--exec", "ls /proc/$$/fd"])
        defer { publisher.stop() }
        let (code, text) = try shell("\(netsvc) connect Fds \(type) < /dev/null")
        XCTAssertEqual(code, 0, text)
        XCTAssertEqual(text.split(separator: "\n").sorted(), ["0", "1", "2"], "the shell's descriptors: \(text)")
    }

    func testAChildThatIgnoresSIGTERMIsKilledWhenItsPeerGoesAway() throws {
        let type = uniqueType("k")
        let marker = temporaryFile("pid")
        defer { try? FileManager.default.removeItem(atPath: marker) }
        // The shell ignores SIGTERM and so does its `sleep`; only SIGKILL ends them.
        let publisher = try listeningPublisher([
            "Stubborn", type, "0", "--idle-timeout", "1",
            "--exec", "trap '' TERM; echo $$ > \(marker); sleep 300",
        ])
        defer { publisher.stop() }
        let client = try Foreign([netsvc, "connect", "Stubborn", type])
        var pid: Int32?
        eventually(timeout: 10, interval: 0.02) {
            pid = (try? String(contentsOfFile: marker, encoding: .utf8)).flatMap {
                Int32($0.trimmingCharacters(in: .whitespacesAndNewlines))
            }
            return pid != nil
        }
        let child = try XCTUnwrap(pid, "the child never started")
        kill(client.process.processIdentifier, SIGKILL)  // the peer vanishes (its kernel resets the connection)
        XCTAssertTrue(publisher.waitForOutput(containing: "disconnected", seconds: 15), publisher.output)
        XCTAssertNotEqual(kill(child, 0), 0, "the child outlived its connection")
        XCTAssertTrue(publisher.output.contains("exit 137"), "SIGKILL after the grace: \(publisher.output)")
    }

    func testMaxConnectionsRefusesANewcomerWhenEveryPeerHasSpoken() throws {
        let type = uniqueType("m")
        let publisher = try listeningPublisher(["One", type, "0", "--exec", "cat", "--max-connections", "1"])
        defer { publisher.stop() }
        let first = try Foreign([netsvc, "connect", "One", type])
        defer { first.stop() }
        first.write("first\n")
        XCTAssertTrue(first.waitForOutput(containing: "first", seconds: 10), first.output)
        let (code, text) = try shell("echo second | \(netsvc) connect One \(type)")
        XCTAssertEqual(code, 1, "refused: \(text)")
        // Turned away after the connection was made, or while it was being made (the service's
        // reset can come first): either way named as a refusal.
        XCTAssertTrue(
            text.contains(
                "failed: the service sent nothing back (a service at its connection limit turns newcomers away so")
                || text.contains("netsvc: connection to 127.0.0.1:") && text.contains(" refused"),
            "the refusal is named: \(text)")
        XCTAssertTrue(publisher.waitForOutput(containing: "refused", seconds: 10), publisher.output)
        first.write("still served\n")
        XCTAssertTrue(first.waitForOutput(containing: "still served", seconds: 10), first.output)
    }

    func testMaxConnectionsKeepsABridgedPeerThatSpokeAndRefusesTheNewcomer() throws {
        // Without --exec the service bridges its own stdin and stdout: the peer's bytes are
        // read at once, so having spoken must not depend on bytes still waiting unread.
        let type = uniqueType("b")
        let publisher = try listeningPublisher(["Bridge", type, "0", "--max-connections", "1"])
        defer { publisher.stop() }
        let first = try Foreign([netsvc, "connect", "Bridge", type])
        defer { first.stop() }
        first.write("first\n")
        XCTAssertTrue(publisher.waitForOutput(containing: "first", seconds: 10), publisher.output)
        let (code, text) = try shell("echo second | \(netsvc) connect Bridge \(type)")
        XCTAssertEqual(code, 1, "refused: \(text)")
        XCTAssertTrue(publisher.waitForOutput(containing: "refused", seconds: 10), publisher.output)
        first.write("still bridged\n")
        XCTAssertTrue(publisher.waitForOutput(containing: "still bridged", seconds: 10), publisher.output)
        XCTAssertFalse(publisher.output.contains("made room"), publisher.output)
    }

    func testMaxConnectionsMakesRoomByEndingAPeerThatSaidNothing() throws {
        let type = uniqueType("r")
        let publisher = try listeningPublisher(["Room", type, "0", "--exec", "cat", "--max-connections", "1"])
        defer { publisher.stop() }
        let silent = try Foreign([netsvc, "connect", "Room", type])  // connects, says nothing
        defer { silent.stop() }
        XCTAssertTrue(publisher.waitForOutput(containing: "connected", seconds: 10), publisher.output)
        let (code, text) = try shell("echo talker | \(netsvc) connect Room \(type)")
        XCTAssertEqual(code, 0, text)
        XCTAssertEqual(text, "talker\n")
        XCTAssertTrue(silent.waitForExit(seconds: 10), "the silent peer was ended to make room")
        XCTAssertTrue(publisher.output.contains("made room"), publisher.output)
    }

    func testMaxConnectionsMakesRoomByEndingAPeerThatClosedWithoutAByte() throws {
        // The child echoes one line, or (given none) keeps the connection for 30 s: a peer
        // that connects and closes without a byte (as a port scan does) holds its slot.
        let type = uniqueType("c")
        let publisher = try listeningPublisher([
            "Scan", type, "0", "--exec", "read -r line && echo \"$line\" || sleep 30",
            "--max-connections", "1",
        ])
        defer { publisher.stop() }
        let closed = try Foreign(["sh", "-c", "\(netsvc) connect Scan \(type) </dev/null"])
        defer { closed.stop() }
        XCTAssertTrue(publisher.waitForOutput(containing: "connected", seconds: 10), publisher.output)
        let (code, text) = try shell("echo talker | \(netsvc) connect Scan \(type)")
        XCTAssertEqual(code, 0, "\(text)\n\(publisher.output)")
        XCTAssertEqual(text, "talker\n")
        XCTAssertTrue(closed.waitForExit(seconds: 10), "the peer that closed without a byte was ended to make room")
        XCTAssertTrue(publisher.output.contains("made room"), publisher.output)
    }
}
