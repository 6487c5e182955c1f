import Foundation
import Salut
import SalutTestSupport
import XCTest

/// CFNetwork's spelling of streams (`CFStreamCreatePairWithSocketToHost`,
/// `CFReadStreamSetProperty`, the `kCF…` constants), written as Apple code writes it.
final class CFNetworkSpellingTests: XCTestCase {
    /// The Apple-style sample in Examples/CFNetworkClient talks TLS to OpenSSL's server when the
    /// server's certificate is trusted (here through OpenSSL's `SSL_CERT_FILE`), and refuses a
    /// server it does not trust instead of talking to it.
    func testTheCFNetworkSampleTalksTLSToOpenSSLAndRefusesAnUntrustedServer() throws {
        let binary = BuiltProduct.path("cfnetwork-client")
        guard FileManager.default.isExecutableFile(atPath: binary) else {
            return XCTFail("build cfnetwork-client first (Scripts/test does: swift build --build-tests)")
        }
        let certificate = try TestCertificate.make()
        let (trusted, trustedPort) = try reversingServer(certificate)
        defer { trusted.stop() }
        let run = try Foreign([
            "/usr/bin/env", "SSL_CERT_FILE=\(certificate.certificateFile)", binary, "localhost", "\(trustedPort)",
            "bonjour tout le monde",
        ])
        let out = run.finish(seconds: 30)
        XCTAssertEqual(run.process.terminationStatus, 0, out)
        XCTAssertTrue(out.contains("received: ednom el tuot ruojnob"), out)

        let (untrusted, untrustedPort) = try reversingServer(certificate)
        defer { untrusted.stop() }
        let refused = try Foreign([binary, "localhost", "\(untrustedPort)", "secret"])
        let why = refused.finish(seconds: 30)
        XCTAssertEqual(refused.process.terminationStatus, 1, why)
        XCTAssertTrue(why.contains("not trusted"), why)
        XCTAssertFalse(untrusted.output.contains("terces"), "the server got the line: \(untrusted.output)")
    }

    /// A TLS request made with CFNetwork's functions that cannot be honoured returns false, and
    /// the streams fail on open: the listener never sees a byte, let alone the password.
    func testARefusedCFNetworkTLSRequestNeverSendsInTheClear() throws {
        let listener = try RecordingListener()
        defer { listener.stop() }
        let secret = Data("password=hunter2\n".utf8)
        let level = CFStreamPropertyKey(rawValue: kCFStreamPropertySocketSecurityLevel)
        let settings = CFStreamPropertyKey(rawValue: kCFStreamPropertySSLSettings)
        let refusals: [(CFStreamPropertyKey, CFTypeRef)] = [
            (level, kCFStreamSocketSecurityLevelSSLv3),
            (level, "kCFStreamSocketSecurityLevelTLSv9" as CFString),
            (settings, [kCFStreamSSLValidatesCertificateChain: "no" as CFString] as CFDictionary),
            (settings, [kCFStreamSSLLevel: kCFStreamSocketSecurityLevelNone] as CFDictionary),
        ]
        for (key, value) in refusals {
            var readStream: Unmanaged<CFReadStream>?
            var writeStream: Unmanaged<CFWriteStream>?
            CFStreamCreatePairWithSocketToHost(
                kCFAllocatorDefault, "127.0.0.1" as CFString, UInt32(listener.port), &readStream, &writeStream)
            let input = readStream!.takeRetainedValue()
            let output = writeStream!.takeRetainedValue()
            XCTAssertFalse(CFReadStreamSetProperty(input, key, value), "\(value)")
            XCTAssertFalse(CFReadStreamOpen(input), "\(value)")
            XCTAssertFalse(CFWriteStreamOpen(output), "\(value)")
            XCTAssertEqual(CFWriteStreamGetStatus(output), .error)
            let written = secret.withUnsafeBytes {
                CFWriteStreamWrite(output, $0.bindMemory(to: UInt8.self).baseAddress!, $0.count)
            }
            XCTAssertLessThan(written, 1, "a failed stream takes no bytes")
            let error = CFReadStreamCopyError(input)
            XCTAssertNotNil(error)
            XCTAssertEqual((input.streamError as? SocketStreamError)?.tlsError?.code, .invalidConfiguration)
            CFReadStreamClose(input)
            CFWriteStreamClose(output)
        }
        // One that is honoured, on the same listener: what it sees is a TLS ClientHello. (A write
        // now would wait for the handshake, which this listener never finishes, as on Apple's
        // systems: TLSTests covers that.)
        var readStream: Unmanaged<CFReadStream>?
        var writeStream: Unmanaged<CFWriteStream>?
        CFStreamCreatePairWithSocketToHost(
            nil, "127.0.0.1" as CFString, UInt32(listener.port), &readStream, &writeStream)
        let input = readStream!.takeRetainedValue() as InputStream
        let output = writeStream!.takeRetainedValue() as OutputStream
        XCTAssertTrue(CFReadStreamSetProperty(input, level, kCFStreamSocketSecurityLevelNegotiatedSSL))
        XCTAssertTrue(CFWriteStreamSetProperty(output, level, kCFStreamSocketSecurityLevelNegotiatedSSL))
        XCTAssertFalse(listener.output.contains("chunk"), "a refused request connected: \(listener.output)")
        XCTAssertTrue(CFReadStreamOpen(input))
        XCTAssertTrue(CFWriteStreamOpen(output))
        XCTAssertTrue(listener.waitForOutput(containing: "chunk 16030", seconds: 20), listener.output)
        CFReadStreamClose(input)
        CFWriteStreamClose(output)
        XCTAssertTrue(listener.waitForOutput(containing: "got 16030", seconds: 20), listener.output)
        XCTAssertFalse(listener.received(secret), "the password went in the clear: \(listener.output)")
        XCTAssertFalse(listener.output.contains("got -"), "a refused request opened a connection: \(listener.output)")
    }

    /// A bound pair made and driven entirely with CFNetwork's functions carries bytes intact,
    /// and the constants have Apple's types and values.
    func testABoundPairDrivenWithCFNetworksFunctionsCarriesBytesAndConstantsCompileAsOnApple() throws {
        var readStream: Unmanaged<CFReadStream>?
        var writeStream: Unmanaged<CFWriteStream>?
        CFStreamCreateBoundPair(kCFAllocatorDefault, &readStream, &writeStream, 64)
        let input = readStream!.takeRetainedValue()
        let output = writeStream!.takeRetainedValue()
        XCTAssertEqual(CFReadStreamGetStatus(input), .notOpen)
        XCTAssertTrue(CFReadStreamOpen(input))
        XCTAssertTrue(CFWriteStreamOpen(output))
        XCTAssertTrue(CFWriteStreamCanAcceptBytes(output))
        XCTAssertFalse(CFReadStreamHasBytesAvailable(input))
        let text = Array("salut, CoreFoundation".utf8)
        XCTAssertEqual(CFWriteStreamWrite(output, text, text.count), text.count)
        XCTAssertTrue(CFReadStreamHasBytesAvailable(input))
        var buffer = [UInt8](repeating: 0, count: 64)
        XCTAssertEqual(CFReadStreamRead(input, &buffer, buffer.count), text.count)
        XCTAssertEqual(Array(buffer[..<text.count]), text)
        CFWriteStreamClose(output)
        XCTAssertEqual(CFReadStreamRead(input, &buffer, buffer.count), 0, "the end after the writer closes")
        XCTAssertEqual(CFReadStreamGetStatus(input), .atEnd)
        CFReadStreamClose(input)
        XCTAssertEqual(CFReadStreamGetStatus(input), .closed)
        XCTAssertNil(CFReadStreamCopyError(input))
        XCTAssertEqual(CFReadStreamRead(input, nil, 4), -1, "no buffer is an error, not a crash")

        // The constants, as Apple code uses them.
        XCTAssertNil(kCFAllocatorDefault)
        XCTAssertEqual(kCFBooleanTrue.boolValue, true)
        XCTAssertEqual(kCFBooleanFalse.boolValue, false)
        XCTAssertEqual(kCFNull, NSNull())
        XCTAssertEqual(kCFStreamSSLPeerName as Stream.PropertyKey, Stream.PropertyKey("kCFStreamSSLPeerName"))
        XCTAssertEqual(kCFStreamSSLPeerName as String, "kCFStreamSSLPeerName")
        XCTAssertEqual(
            CFStreamPropertyKey(kCFStreamPropertySocketSecurityLevel),
            CFStreamPropertyKey(rawValue: Stream.PropertyKey.socketSecurityLevelKey.rawValue as CFString))
        XCTAssertEqual(
            kCFStreamSocketSecurityLevelNegotiatedSSL as String, StreamSocketSecurityLevel.negotiatedSSL.rawValue)
    }
}
