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
        defer { try? FileManager.default.removeItem(atPath: input); try? FileManager.default.removeItem(atPath: output) }
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
        let publisher = try listeningPublisher(["Vault", type, "0", "--exec", "tr a-z A-Z",
                                                "--tls-cert", certificate.certificateFile, "--tls-key", certificate.keyFile])
        defer { publisher.stop() }
        let (code, text) = try shell("echo secret | \(netsvc) connect Vault \(type) --pin \(certificate.publicKeySHA256)")
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
    }

    func testListenOptionsAreCheckedAsUsageErrors() throws {
        XCTAssertEqual(try shell("\(netsvc) publish X _x._tcp 0").0, 2, "port 0 without --listen")
        XCTAssertEqual(try shell("\(netsvc) publish X _x._tcp 80 --exec cat").0, 2, "--exec without --listen")
        XCTAssertEqual(try shell("\(netsvc) publish X _x._tcp 0 --listen --tls-cert c.pem").0, 2, "cert without key")
        XCTAssertEqual(try shell("\(netsvc) connect X _x._tcp --pin nothex").0, 2, "a malformed pin")
    }
}
