import Foundation
import SalutStreams
import SalutTestSupport
import XCTest

/// Reads from `input` until `count` bytes or the end of the data.
func readBytes(_ input: InputStream, count: Int) async throws -> Data {
    var received = Data()
    for try await chunk in input.chunks {
        received.append(chunk)
        if received.count >= count { break }
    }
    return received
}

/// The `SocketStreamError` a failed open threw (nil when it was another error or none).
func openError(_ pair: BoundStreamPair) async -> SocketStreamError? {
    do {
        try await withDeadline(20, "open") { try await pair.open() }
        return nil
    } catch {
        return error as? SocketStreamError
    }
}

final class TLSTests: SalutTestCase {
    var certificate: TestCertificate!

    override func setUpWithError() throws {
        certificate = try TestCertificate.make()
    }

    func testPinnedCertificateReachesOpenSSLServer() async throws {
        let (server, port) = try reversingServer(certificate)
        defer { server.stop() }
        let tls = TLSConfiguration(pinnedSHA256: [certificate.certificateSHA256])
        let pair = SocketStreams.pair(toHost: "127.0.0.1", port: port, tls: tls)
        try await withDeadline(20, "open") { try await pair.open() }
        try await pair.output.write(Data("hello salut\n".utf8))
        let answer = try await withDeadline(20, "answer") { try await readBytes(pair.input, count: 12) }
        XCTAssertEqual(String(decoding: answer, as: UTF8.self), "tulas olleh\n")
        XCTAssertEqual(pair.input.property(forKey: .salutTLSProtocolVersion) as? String, "TLSv1.3")
        XCTAssertEqual(
            pair.input.property(forKey: .salutTLSPeerCertificateSHA256) as? String, certificate.certificateSHA256)
        XCTAssertEqual(
            pair.input.property(forKey: .socketSecurityLevelKey) as? String,
            StreamSocketSecurityLevel.negotiatedSSL.rawValue)
        pair.input.close(); pair.output.close()
    }

    func testTrustedRootValidatesChainAndNameOrAddress() async throws {
        for host in ["localhost", "127.0.0.1"] {
            let (server, port) = try reversingServer(certificate)
            defer { server.stop() }
            let tls = TLSConfiguration(trustRoots: .file(certificate.certificateFile))
            let pair = SocketStreams.pair(toHost: host, port: port, tls: tls)
            let error = await openError(pair)
            XCTAssertNil(error, "\(host): \(String(describing: error))")
            try await pair.output.write(Data("ab\n".utf8))
            let answer = try await withDeadline(20, "answer") { try await readBytes(pair.input, count: 3) }
            XCTAssertEqual(String(decoding: answer, as: UTF8.self), "ba\n", host)
            pair.input.close(); pair.output.close()
        }
    }

    func testSystemTrustStoreRefusesASelfSignedServerAndSaysWhy() async throws {
        let (server, port) = try reversingServer(certificate)
        defer { server.stop() }
        let pair = SocketStreams.pair(toHost: "localhost", port: port, tls: .client)
        let error = await openError(pair)
        guard let tls = error?.tlsError, tls.code == .untrustedPeer, let reason = tls.reason else {
            return XCTFail("got \(String(describing: error))")
        }
        XCTAssertTrue(reason.contains("self-signed") || reason.contains("self signed"), reason)
        // And what to do next: the key to pin, or the trust store.
        XCTAssertTrue(reason.contains("pin its key (SHA-256 \(certificate.publicKeySHA256))"), reason)
        XCTAssertTrue(reason.contains("SSL_CERT_FILE"), reason)
        XCTAssertEqual(pair.input.streamStatus, .error)
        XCTAssertEqual(pair.output.streamStatus, .error)
        XCTAssertEqual(pair.input.streamError as? SocketStreamError, error)
    }

    func testWrongPinIsRefusedWithThePresentedFingerprint() async throws {
        let (server, port) = try reversingServer(certificate)
        defer { server.stop() }
        let wrong = String(repeating: "ab", count: 32)
        let pair = SocketStreams.pair(toHost: "127.0.0.1", port: port, tls: TLSConfiguration(pinnedSHA256: [wrong]))
        let error = await openError(pair)
        XCTAssertEqual(error?.tlsError?.code, .pinMismatch, "\(String(describing: error))")
        // Both hashes, named apart: the key's is what one pins.
        XCTAssertEqual(error?.tlsError?.presentedFingerprint, certificate.certificateSHA256)
        XCTAssertEqual(error?.tlsError?.presentedPublicKeyFingerprint, certificate.publicKeySHA256)
        XCTAssertTrue(
            "\(error!)".contains("matches no pinned fingerprint") && "\(error!)".contains(certificate.publicKeySHA256))
    }

    func testAClientSendsItsCertificateOnlyToAServerThatPassedItsPin() async throws {
        // The client's own identity (its long-term key, its name) goes out only after the
        // server's key passed the pin: a refused impostor learns nothing of it.
        let client = try TestCertificate.make(commonName: "client-identity-\(UUID().uuidString.prefix(6))")
        let wrong = String(repeating: "ab", count: 32)
        for (pin, sends) in [(certificate.publicKeySHA256, true), (wrong, false)] {
            // Asks for a client certificate and prints what it gets ("depth=0 CN = …").
            let (server, port) = try reversingServer(certificate, extra: ["-verify", "1"])
            defer { server.stop() }
            let tls = TLSConfiguration(
                pinnedSHA256: [pin], certificateChainFile: client.certificateFile,
                privateKeyFile: client.keyFile)
            let pair = SocketStreams.pair(toHost: "127.0.0.1", port: port, tls: tls)
            let error = await openError(pair)
            if sends {
                XCTAssertNil(error)
                try await pair.output.write(Data("ab\n".utf8))
                _ = try await withDeadline(20, "answer") { try await readBytes(pair.input, count: 3) }
            } else {
                XCTAssertEqual(error?.tlsError?.code, .pinMismatch, "\(String(describing: error))")
            }
            pair.input.close(); pair.output.close()
            XCTAssertTrue(server.waitForExit(seconds: 20), server.output)
            XCTAssertEqual(server.output.contains("client-identity"), sends, "pin \(pin.prefix(8)): \(server.output)")
        }
    }

    func testNameMismatchIsRefused() async throws {
        let (server, port) = try reversingServer(certificate)
        defer { server.stop() }
        let tls = TLSConfiguration(peerName: "printer.example", trustRoots: .file(certificate.certificateFile))
        let pair = SocketStreams.pair(toHost: "127.0.0.1", port: port, tls: tls)
        let error = await openError(pair)
        guard let tls = error?.tlsError, tls.code == .untrustedPeer, let reason = tls.reason else {
            return XCTFail("got \(String(describing: error))")
        }
        XCTAssertTrue(reason.contains("hostname mismatch"), reason)
        XCTAssertTrue(reason.contains("the certificate is for /CN=localhost"), reason)
    }

    func testAppleStyleSettingsDictionaryWithPublicKeyPin() async throws {
        let (server, port) = try reversingServer(certificate)
        defer { server.stop() }
        let pair = SocketStreams.pair(toHost: "127.0.0.1", port: port)
        // Refused before anything changes: insecure levels, unknown keys, wrong value types.
        XCTAssertFalse(
            pair.input.setProperty(
                StreamSocketSecurityLevel.ssLv3.rawValue as NSString, forKey: .socketSecurityLevelKey))
        let key = Stream.PropertyKey(kCFStreamPropertySSLSettings as String)
        XCTAssertFalse(pair.input.setProperty(["NoSuchKey": true] as NSDictionary, forKey: key))
        XCTAssertFalse(
            pair.input.setProperty([kCFStreamSSLValidatesCertificateChain: "yes"] as NSDictionary, forKey: key))
        XCTAssertFalse(
            pair.input.setProperty([SalutSSLSettingsKey.pinnedSHA256: "not-a-pin"] as NSDictionary, forKey: key))
        // As a macOS program would write it, plus Salut's pin key.
        let settings: [String: Any] = [
            kCFStreamSSLPeerName as String: "localhost",
            SalutSSLSettingsKey.pinnedSHA256: [certificate.publicKeySHA256],
            SalutSSLSettingsKey.maximumVersion: "TLSv1.2",
        ]
        XCTAssertTrue(
            pair.input.setProperty(
                StreamSocketSecurityLevel.negotiatedSSL.rawValue as NSString, forKey: .socketSecurityLevelKey))
        XCTAssertTrue(pair.input.setProperty(settings as NSDictionary, forKey: key))
        let error = await openError(pair)
        XCTAssertNil(error)
        XCTAssertEqual(pair.input.property(forKey: .salutTLSProtocolVersion) as? String, "TLSv1.2")
        XCTAssertFalse(
            pair.input.setProperty(settings as NSDictionary, forKey: key), "settings are fixed once connecting")
        try await pair.output.write(Data("xyz\n".utf8))
        let answer = try await withDeadline(20, "answer") { try await readBytes(pair.input, count: 4) }
        XCTAssertEqual(String(decoding: answer, as: UTF8.self), "zyx\n")
        pair.input.close(); pair.output.close()
    }

    func testAnAppleSettingsDictionaryIsHonouredAndARefusedOneNeverSendsInTheClear() async throws {
        let listener = try RecordingListener()
        defer { listener.stop() }
        let port = listener.port
        let secret = Data("password=hunter2\n".utf8)
        let key = kCFStreamPropertySSLSettings as Stream.PropertyKey

        // Apple's spelling: typed level and NSString keys. Taken (as on Apple's systems): TLS
        // starts, so the listener sees a ClientHello and never the password.
        let apple = SocketStreams.pair(toHost: "127.0.0.1", port: port)
        let settings: [NSString: Any] = [
            kCFStreamSSLLevel as NSString: StreamSocketSecurityLevel.negotiatedSSL,
            kCFStreamSSLValidatesCertificateChain as NSString: false,
        ]
        XCTAssertTrue(apple.input.setProperty(settings, forKey: key))
        XCTAssertTrue(
            apple.output.setProperty(
                kCFStreamSocketSecurityLevelNegotiatedSSL,
                forKey: kCFStreamPropertySocketSecurityLevel as Stream.PropertyKey))
        apple.input.open()
        apple.output.open()
        // Written at once, as careless code does: it waits for the handshake, which a
        // plaintext server never finishes, so it never goes out.
        _ = secret.withUnsafeBytes {
            apple.output.write($0.bindMemory(to: UInt8.self).baseAddress!, maxLength: $0.count)
        }
        XCTAssertTrue(listener.waitForOutput(containing: "chunk ", seconds: 20), listener.output)
        apple.input.close(); apple.output.close()
        XCTAssertTrue(listener.waitForOutput(containing: "got ", seconds: 20), listener.output)
        let first = listener.output.components(separatedBy: "got ").last!.prefix { $0 != "\n" }
        XCTAssertTrue(first.hasPrefix("16030"), "a TLS record came first: \(first)")
        XCTAssertFalse(listener.received(secret), "the password went in the clear")

        // Settings that cannot be honoured: setProperty says false, and code that ignores it
        // gets failed streams on open, before any byte moves (no connection at all).
        for bad: [NSString: Any] in [
            [kCFStreamSSLLevel as NSString: StreamSocketSecurityLevel.ssLv3],
            [kCFStreamSSLLevel as NSString: 42],
            [kCFStreamSSLValidatesCertificateChain as NSString: "no"],
        ] {
            let pair = SocketStreams.pair(toHost: "127.0.0.1", port: port)
            XCTAssertFalse(pair.input.setProperty(bad, forKey: key), "\(bad)")
            let error = await openError(pair)
            XCTAssertEqual(error?.tlsError?.code, .invalidConfiguration, "\(bad): \(String(describing: error))")
            XCTAssertEqual(pair.output.streamStatus, .error)
            let written = secret.withUnsafeBytes {
                pair.output.write($0.bindMemory(to: UInt8.self).baseAddress!, maxLength: $0.count)
            }
            XCTAssertLessThan(written, 1, "a failed stream takes no bytes")
            pair.input.close(); pair.output.close()
        }
        // The same after open: the streams fail and the connection is reset.
        let late = SocketStreams.pair(toHost: "127.0.0.1", port: port)
        try await withDeadline(20, "open") { try await late.open() }
        XCTAssertFalse(
            late.input.setProperty([kCFStreamSSLLevel as NSString: StreamSocketSecurityLevel.ssLv2], forKey: key))
        XCTAssertEqual(late.output.streamStatus, .error)
        late.input.close(); late.output.close()
        XCTAssertTrue(listener.waitForOutput(containing: "got -", seconds: 20), listener.output)
        XCTAssertFalse(listener.received(secret), listener.output)
    }

    func testTLSAskedForRightAfterOpenStartsOnTheOpenConnectionAsOnApple() async throws {
        // Apple's spellings exactly: Swift values for `setProperty`, the CF key cast with `as`.
        let settings: [String: Any] = [
            kCFStreamSSLPeerName as String: "localhost",
            SalutSSLSettingsKey.pinnedSHA256: [certificate.publicKeySHA256],
        ]
        // The order Apple tutorials use (level, then settings), and the settings alone.
        for levelFirst in [true, false] {
            let (server, port) = try reversingServer(certificate)
            defer { server.stop() }
            let pair = SocketStreams.pair(toHost: "127.0.0.1", port: port)
            pair.input.open()
            pair.output.open()
            if levelFirst {
                XCTAssertTrue(
                    pair.input.setProperty(StreamSocketSecurityLevel.negotiatedSSL, forKey: .socketSecurityLevelKey))
                XCTAssertTrue(
                    pair.output.setProperty(StreamSocketSecurityLevel.negotiatedSSL, forKey: .socketSecurityLevelKey),
                    "the same on the other stream")
            }
            XCTAssertTrue(pair.input.setProperty(settings, forKey: kCFStreamPropertySSLSettings as Stream.PropertyKey))
            try await pair.output.write(Data("over tls\n".utf8))
            let answer = try await withDeadline(20, "answer") { try await readBytes(pair.input, count: 9) }
            XCTAssertEqual(String(decoding: answer, as: UTF8.self), "slt revo\n", "levelFirst \(levelFirst)")
            XCTAssertEqual(pair.input.property(forKey: .salutTLSProtocolVersion) as? String, "TLSv1.3")
            XCTAssertEqual(
                pair.input.property(forKey: .socketSecurityLevelKey) as? String,
                StreamSocketSecurityLevel.negotiatedSSL.rawValue)
            pair.input.close(); pair.output.close()
        }
    }

    func testTLSAskedForAfterBytesWentInTheClearFailsLoudly() async throws {
        let (server, port) = try reversingServer(certificate)
        defer { server.stop() }
        let pair = SocketStreams.pair(toHost: "127.0.0.1", port: port)
        try await withDeadline(20, "open") { try await pair.open() }
        try await pair.output.write(Data("plain\n".utf8))
        XCTAssertFalse(
            pair.output.setProperty(
                StreamSocketSecurityLevel.negotiatedSSL.rawValue as NSString,
                forKey: .socketSecurityLevelKey))
        // Never carried on in the clear: both streams fail and say why.
        XCTAssertEqual(pair.output.streamStatus, .error)
        XCTAssertEqual(pair.input.streamStatus, .error)
        XCTAssertTrue(
            "\(pair.output.streamError.map { "\($0)" } ?? "none")".contains("in the clear"),
            "\(String(describing: pair.output.streamError))")
        XCTAssertEqual(pair.output.write([1], maxLength: 1), -1)
    }

    func testOldProtocolOnlyServerFailsTheHandshake() async throws {
        let (server, port) = try reversingServer(certificate, extra: ["-tls1_1", "-cipher", "DEFAULT@SECLEVEL=0"])
        defer { server.stop() }
        let pair = SocketStreams.pair(
            toHost: "127.0.0.1", port: port, tls: TLSConfiguration(pinnedSHA256: [certificate.certificateSHA256]))
        let error = await openError(pair)
        XCTAssertEqual(error?.tlsError?.code, .handshakeFailed, "got \(String(describing: error))")
    }

    func testPlainPeerIsAHandshakeFailureNotAHang() async throws {
        let listener = try StreamListener(port: 0)
        defer { listener.stop() }
        listener.accept { connection in
            Task {
                try? await connection.streams.open()
                try? await connection.output.write(Data("HTTP/1.0 400 Bad Request\r\n\r\n".utf8))
                connection.output.close()
            }
        }
        let pair = SocketStreams.pair(
            toHost: "127.0.0.1", port: Int(listener.port), tls: TLSConfiguration(validatesCertificateChain: false))
        let error = await openError(pair)
        guard let tls = error?.tlsError, tls.code == .handshakeFailed, let reason = tls.reason else {
            return XCTFail("got \(String(describing: error))")
        }
        XCTAssertFalse(reason.isEmpty)
    }

    func testOurTLSListenerServesOpenSSLClient() async throws {
        let listener = try StreamListener(
            port: 0,
            tls: .server(
                certificateChainFile: certificate.certificateFile,
                privateKeyFile: certificate.keyFile))
        defer { listener.stop() }
        listener.accept { connection in
            Task {
                guard (try? await connection.streams.open()) != nil else { return }
                var line = Data()
                for try await chunk in connection.input.chunks {
                    line.append(chunk)
                    if line.last == UInt8(ascii: "\n") { break }
                }
                try await connection.output.write(Data("ack ".utf8) + line)
                connection.output.close()
            }
        }
        let client = try Foreign([
            "openssl", "s_client", "-connect", "127.0.0.1:\(listener.port)", "-quiet",
            "-verify_return_error", "-CAfile", certificate.certificateFile, "-verify_hostname", "localhost",
        ])
        defer { client.stop() }
        client.write("ping\n")
        XCTAssertTrue(client.waitForOutput(containing: "ack ping", seconds: 20), client.output)
    }

    func testTLS12IsOnlyForwardSecretAEADInTheServersOrderAndNoCBCSuiteIsTaken() async throws {
        // What a TLS scanner probes, one suite at a time, with `openssl s_client`.
        let listener = try StreamListener(
            port: 0,
            tls: .server(
                certificateChainFile: certificate.certificateFile,
                privateKeyFile: certificate.keyFile))
        defer { listener.stop() }
        listener.accept { connection in
            Task {
                _ = try? await connection.streams.open(); connection.input.close(); connection.output.close()
            }
        }
        func negotiated(_ arguments: [String]) -> String {
            let client = try? Foreign(
                ["openssl", "s_client", "-connect", "127.0.0.1:\(listener.port)", "-brief"] + arguments)
            client?.closeInput()
            let output = client?.finish(seconds: 20) ?? ""
            return output.components(separatedBy: "Ciphersuite: ").dropFirst().first.map {
                String($0.prefix { !$0.isNewline })
            } ?? "none: \(output)"
        }
        for refused in [
            "ECDHE-ECDSA-AES128-SHA", "ECDHE-ECDSA-AES256-SHA", "ECDHE-ECDSA-AES128-SHA256",
            "ECDHE-ECDSA-AES256-SHA384",
            "AES128-GCM-SHA256", "AES256-SHA",
        ] {
            XCTAssertTrue(negotiated(["-tls1_2", "-cipher", refused]).hasPrefix("none"), refused)
        }
        XCTAssertEqual(
            negotiated(["-tls1_2", "-cipher", "ECDHE-ECDSA-CHACHA20-POLY1305"]), "ECDHE-ECDSA-CHACHA20-POLY1305")
        // The client prefers AES-256; the server's order (AES-128 first) wins.
        XCTAssertEqual(
            negotiated(["-tls1_2", "-cipher", "ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-ECDSA-AES128-GCM-SHA256"]),
            "ECDHE-ECDSA-AES128-GCM-SHA256")
        XCTAssertTrue(negotiated(["-tls1_1"]).hasPrefix("none"), "TLS 1.1 is refused")
        XCTAssertTrue(negotiated([]).hasPrefix("TLS_"), "TLS 1.3 by default")
    }

    func testAPeerThatGoesAwayMidWriteIsAnErrorNotASIGPIPE() async throws {
        // SIGPIPE at its default (fatal) disposition: OpenSSL's own socket BIO would raise it
        // and end this process.
        _ = signal(SIGPIPE, SIG_DFL)
        let serverTLS = TLSConfiguration.server(
            certificateChainFile: certificate.certificateFile, privateKeyFile: certificate.keyFile)
        let listener = try StreamListener(port: 0, tls: serverTLS)
        defer { listener.stop() }
        listener.accept { connection in
            Task {  // take a little, then reset the connection
                guard (try? await connection.streams.open()) != nil else { return }
                _ = try? await readBytes(connection.input, count: 64 * 1024)
                connection.input.close()
                connection.output.close()
            }
        }
        let pair = SocketStreams.pair(
            toHost: "127.0.0.1", port: Int(listener.port),
            tls: TLSConfiguration(pinnedSHA256: [certificate.certificateSHA256]))
        try await withDeadline(20, "open") { try await pair.open() }
        // Blocking writes from a thread of our own with SIGPIPE unblocked, as an app's main
        // thread has it (libdispatch's threads block it, which would hide the problem).
        let failed = DispatchSemaphore(value: 0)
        let result = Locked<(any Error)?>(nil)
        Thread.detachNewThread {
            var pipeSignal = sigset_t()
            sigemptyset(&pipeSignal)
            sigaddset(&pipeSignal, SIGPIPE)
            pthread_sigmask(SIG_UNBLOCK, &pipeSignal, nil)
            let block = [UInt8](repeating: 7, count: 64 * 1024)
            for _ in 0..<4096 {  // 256 MiB: far more than the peer takes
                var offset = 0
                while offset < block.count {
                    let n = block.withUnsafeBufferPointer {
                        pair.output.write($0.baseAddress! + offset, maxLength: block.count - offset)
                    }
                    if n < 0 {
                        result.withLock { $0 = pair.output.streamError ?? StreamFailure.notOpen }; failed.signal();
                        return
                    }
                    offset += n
                }
            }
            failed.signal()
        }
        XCTAssertEqual(failed.wait(timeout: .now() + 30), .success, "the writes neither failed nor finished")
        let outcome = result.value
        let error = try XCTUnwrap(outcome, "256 MiB went to a peer that had gone")
        XCTAssertEqual(pair.output.streamStatus, .error, "\(error)")
    }

    func testTLSCutWithoutCloseNotifyIsATruncationNotAnEnd() async throws {
        // openssl s_server sends some bytes, then its TCP connection is cut (killed) without a
        // close_notify: the reader must see an error, not a clean end of data.
        let (server, port) = try reversingServer(certificate)
        let pair = SocketStreams.pair(
            toHost: "127.0.0.1", port: port,
            tls: TLSConfiguration(pinnedSHA256: [certificate.certificateSHA256]))
        try await withDeadline(20, "open") { try await pair.open() }
        try await pair.output.write(Data("olleh\n".utf8))
        let first = try await withDeadline(10, "the reply") { try await readBytes(pair.input, count: 6) }
        XCTAssertEqual(String(decoding: first, as: UTF8.self), "hello\n")
        // A blocking reader, already waiting when the cut comes (as netsvc's bridge is), must get
        // -1 and the error, not 0 (the end of the data).
        let result = Locked<Int?>(nil)
        let finished = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            var scratch = [UInt8](repeating: 0, count: 4096)
            var n = 1
            while n > 0 { n = pair.input.read(&scratch, maxLength: scratch.count) }
            result.withLock { $0 = n }
            finished.signal()
        }
        kill(server.process.processIdentifier, SIGKILL)
        XCTAssertEqual(finished.wait(timeout: .now() + 10), .success, "the cut was never noticed")
        XCTAssertEqual(result.value, -1, "a cut TLS stream ended as if complete")
        XCTAssertEqual(
            pair.input.streamError as? SocketStreamError, .tls(.closedWithoutCloseNotify),
            "\(String(describing: pair.input.streamError))")
    }

    func testMutualTLSBetweenOurOwnEndsMovesEightMebibytesBothWays() async throws {
        let clientCertificate = try TestCertificate.make(commonName: "peer-client", alternativeNames: "DNS:peer-client")
        var serverTLS = TLSConfiguration.server(
            certificateChainFile: certificate.certificateFile, privateKeyFile: certificate.keyFile)
        serverTLS.requiresClientCertificate = true
        serverTLS.pinnedSHA256 = [clientCertificate.publicKeySHA256]
        let listener = try StreamListener(port: 0, tls: serverTLS)
        defer { listener.stop() }
        listener.accept { connection in
            Task {  // echo everything back
                guard (try? await connection.streams.open()) != nil else { return }
                for try await chunk in connection.input.chunks { try await connection.output.write(chunk) }
                connection.output.close()
            }
        }
        let tls = TLSConfiguration(
            pinnedSHA256: [certificate.certificateSHA256],
            certificateChainFile: clientCertificate.certificateFile,
            privateKeyFile: clientCertificate.keyFile)
        let pair = SocketStreams.pair(toHost: "::1", port: Int(listener.port), tls: tls)
        try await withDeadline(20, "open") { try await pair.open() }
        var payload = Data(count: 8 << 20)
        payload.withUnsafeMutableBytes { raw in
            for i in 0..<raw.count { raw[i] = UInt8(truncatingIfNeeded: i &* 31 &+ i >> 13) }
        }
        let sent = payload
        let writer = Task {
            try await pair.output.write(sent)
            pair.output.close()
        }
        let echoed = try await withDeadline(60, "echo") { try await readBytes(pair.input, count: Int.max) }
        try await writer.value
        XCTAssertEqual(echoed.count, payload.count)
        XCTAssertTrue(echoed == payload, "the echoed bytes differ")

        // Without a client certificate the server refuses.
        let anonymous = SocketStreams.pair(
            toHost: "::1", port: Int(listener.port),
            tls: TLSConfiguration(pinnedSHA256: [certificate.certificateSHA256]))
        let refused: Data? = try await withDeadline(20, "refusal") {
            guard (try? await anonymous.open()) != nil else { return nil }
            return try? await readBytes(anonymous.input, count: 1)  // TLS 1.3: the alert comes after
        }
        XCTAssertTrue(refused == nil || refused!.isEmpty, "an anonymous client got data")
    }

    /// A listener's trust evaluator judges each client during the handshake: the admitted key
    /// talks, another is refused before any of its bytes reach the application.
    func testAListenersEvaluatorAdmitsOneClientKeyAndRefusesAnotherBeforeItsBytes() async throws {
        let admitted = try TestCertificate.make(commonName: "admitted", alternativeNames: "DNS:admitted")
        let stranger = try TestCertificate.make(commonName: "stranger", alternativeNames: "DNS:stranger")
        var serverTLS = TLSConfiguration.server(
            certificateChainFile: certificate.certificateFile, privateKeyFile: certificate.keyFile)
        serverTLS.requiresClientCertificate = true
        // Self-signed clients: the evaluator, not a chain, decides.
        serverTLS.validatesCertificateChain = false
        let judged = Locked<[String]>([])
        let listener = try StreamListener(
            port: 0, tls: serverTLS,
            trustEvaluator: { trust, decide in
                judged.withLock { $0.append(trust.publicKeySHA256) }
                decide(trust.publicKeySHA256 == admitted.publicKeySHA256)
            })
        defer { listener.stop() }
        let outcomes = Locked<[String]>([])
        listener.accept { connection in
            Task {
                do {
                    try await connection.streams.open()
                } catch {
                    outcomes.withLock {
                        $0.append("refused: \((error as? SocketStreamError)?.tlsError?.code == .rejectedByEvaluator)")
                    }
                    return
                }
                var got = Data()
                for try await chunk in connection.input.chunks { got.append(chunk) }
                outcomes.withLock { $0.append("read: \(String(decoding: got, as: UTF8.self))") }
                try await connection.output.write(got)
                connection.output.close()
            }
        }
        func client(_ identity: TestCertificate) -> BoundStreamPair {
            SocketStreams.pair(
                toHost: "127.0.0.1", port: Int(listener.port),
                tls: TLSConfiguration(
                    pinnedSHA256: [certificate.certificateSHA256], certificateChainFile: identity.certificateFile,
                    privateKeyFile: identity.keyFile))
        }
        let good = client(admitted)
        try await withDeadline(20, "the admitted client opens") { try await good.open() }
        try await good.output.write(Data("hello".utf8))
        good.output.close()
        let echoed = try await withDeadline(20, "the echo") { try await readBytes(good.input, count: Int.max) }
        XCTAssertEqual(String(decoding: echoed, as: UTF8.self), "hello")

        let bad = client(stranger)
        _ = try await withDeadline(20, "the stranger's try") { () -> Data? in
            guard (try? await bad.open()) != nil else { return nil }
            try? await bad.output.write(Data("password=hunter2".utf8))
            return try? await readBytes(bad.input, count: 1)
        }
        try await eventually("both judged", timeout: 20) { outcomes.withLock({ $0.count }) >= 2 }
        XCTAssertEqual(
            outcomes.withLock { $0 }, ["read: hello", "refused: true"], "no byte of the stranger's was read")
        XCTAssertEqual(judged.withLock { $0 }, [admitted.publicKeySHA256, stranger.publicKeySHA256])

        // A foreign client (Python's ssl) with the stranger's key hears why, inside the
        // handshake: a bad_certificate alert, not a connection that just closes.
        let script = """
            import socket, ssl, sys
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
            context.load_cert_chain(sys.argv[1], sys.argv[2])
            raw = socket.create_connection(("127.0.0.1", int(sys.argv[3])), timeout=20)
            try:
                tls = context.wrap_socket(raw, server_hostname="server")
                try:
                    tls.sendall(b"password=hunter2")
                except OSError:
                    pass  # (the alert may be in first: it is read below)
                print("read", tls.recv(1), flush=True)
            except ssl.SSLError as error:
                print("alert", error.reason, flush=True)
            except OSError as error:
                print("closed", error, flush=True)
            """
        let foreign = try Foreign(
            ["/usr/bin/python3", "-c", script, stranger.certificateFile, stranger.keyFile, "\(listener.port)"])
        defer { foreign.stop() }
        XCTAssertTrue(foreign.waitForOutput(containing: "\n", seconds: 20), foreign.output)
        XCTAssertTrue(foreign.output.contains("alert SSLV3_ALERT_BAD_CERTIFICATE"), foreign.output)
        try await eventually("the third judged", timeout: 20) { outcomes.withLock({ $0.count }) >= 3 }
        XCTAssertEqual(outcomes.withLock { $0.last }, "refused: true", "no byte of the foreign stranger's was read")
        XCTAssertEqual(
            judged.withLock { $0 }, [admitted.publicKeySHA256, stranger.publicKeySHA256, stranger.publicKeySHA256],
            "asked once a connection")
    }

    func testCipherSuitesAskedForAreTheOnesNegotiated() async throws {
        // Our client's order against an OpenSSL server (which follows the client's order).
        let (server, port) = try reversingServer(certificate)
        defer { server.stop() }
        var tls = TLSConfiguration(pinnedSHA256: [certificate.certificateSHA256])
        tls.tls13CipherSuites = "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384"
        let pair = SocketStreams.pair(toHost: "127.0.0.1", port: port, tls: tls)
        try await withDeadline(20, "open") { try await pair.open() }
        try await pair.output.write(Data("ab\n".utf8))
        _ = try await withDeadline(20, "answer") { try await readBytes(pair.input, count: 3) }
        XCTAssertEqual(pair.input.property(forKey: .salutTLSCipherSuite) as? String, "TLS_AES_128_GCM_SHA256")
        pair.input.close(); pair.output.close()

        // Our server's order wins over an OpenSSL client's (which puts AES-256-GCM first).
        var serverTLS = TLSConfiguration.server(
            certificateChainFile: certificate.certificateFile, privateKeyFile: certificate.keyFile)
        serverTLS.tls13CipherSuites = "TLS_CHACHA20_POLY1305_SHA256:TLS_AES_256_GCM_SHA384"
        let listener = try StreamListener(port: 0, tls: serverTLS)
        defer { listener.stop() }
        listener.accept { connection in
            Task {
                guard (try? await connection.streams.open()) != nil else { return }
                try await connection.output.write(Data("ready\n".utf8))
            }
        }
        let client = try Foreign([
            "openssl", "s_client", "-connect", "127.0.0.1:\(listener.port)",
            "-CAfile", certificate.certificateFile,
        ])
        defer { client.stop() }
        XCTAssertTrue(client.waitForOutput(containing: "ready", seconds: 20), client.output)
        XCTAssertTrue(client.output.contains("TLS_CHACHA20_POLY1305_SHA256"), client.output)

        // Names OpenSSL does not know, or an empty entry, are configuration errors.
        var unknown = TLSConfiguration(pinnedSHA256: [certificate.certificateSHA256])
        unknown.tls13CipherSuites = "TLS_NO_SUCH_SUITE"
        let refused = await openError(SocketStreams.pair(toHost: "127.0.0.1", port: port, tls: unknown))
        XCTAssertEqual(refused?.tlsError?.code, .invalidConfiguration, "\(String(describing: refused))")
        for bad in ["TLS_AES_128_GCM_SHA256::TLS_AES_256_GCM_SHA384", "TLS_AES_128_GCM_SHA256:TLS_BOGUS", ""] {
            unknown.tls13CipherSuites = bad
            XCTAssertThrowsError(try unknown.validate(), bad)  // OpenSSL alone would drop TLS_BOGUS silently
        }
    }

    func testBadServerConfigurationsAreTypedErrors() {
        XCTAssertThrowsError(try StreamListener(port: 0, tls: TLSConfiguration(role: .server))) { error in
            XCTAssertEqual((error as? SocketStreamError)?.tlsError?.code, .invalidConfiguration, "\(error)")
        }
        XCTAssertThrowsError(
            try StreamListener(
                port: 0, tls: .server(certificateChainFile: "/nonexistent.pem", privateKeyFile: certificate.keyFile))
        ) { error in
            XCTAssertEqual(
                error as? SocketStreamError,
                .tls(.cannotLoad(file: "/nonexistent.pem", reason: "no such readable file")))
        }
        XCTAssertThrowsError(try TLSConfiguration(minimumVersion: .v1_3, maximumVersion: .v1_2).validate())
        XCTAssertNil(TLSConfiguration.Version(string: "1.4"))
        XCTAssertEqual(TLSConfiguration.Version(string: "TLSv1.3"), .v1_3)
    }
}

final class PinParsingTests: XCTestCase {
    func testPinsAreASCIIHexOrBase64AndAnythingElseIsAClearError() throws {
        let hex = String(repeating: "ab", count: 32)
        XCTAssertNoThrow(try TLSConfiguration(pinnedSHA256: [hex]).validate())
        XCTAssertNoThrow(try TLSConfiguration(pinnedSHA256: [hex.uppercased()]).validate())
        XCTAssertNoThrow(
            try TLSConfiguration(pinnedSHA256: [stride(from: 0, to: 64, by: 2).map { _ in "ab" }.joined(separator: ":")]
            ).validate())
        // Full-width digits and letters pass Character.isHexDigit; they crashed the parser.
        let fullWidth = String(repeating: "\u{FF11}\u{FF21}", count: 32)
        let arabic = String(repeating: "\u{0661}", count: 64)
        for bad in [fullWidth, arabic, String(repeating: "g", count: 64), "abc"] {
            XCTAssertThrowsError(try TLSConfiguration(pinnedSHA256: [bad]).validate()) { error in
                XCTAssertEqual((error as? TLSError)?.code, .invalidConfiguration, "\(error)")
            }
        }
        XCTAssertNil(SHA256Digest(hex: fullWidth))
    }
}
