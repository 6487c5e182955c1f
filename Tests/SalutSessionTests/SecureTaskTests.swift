import Foundation
@testable import SalutSession
import SalutStreams
import SalutTestSupport
import XCTest

final class SecureTaskTests: SalutTestCase {
    var certificate: TestCertificate!

    override func setUpWithError() throws {
        certificate = try TestCertificate.make()
    }

    private func session(
        _ policy: PeerTrustPolicy, delegate: RecordingDelegate? = nil, store: URL? = nil
    ) -> PeerSession {
        var configuration = store == nil ? PeerSessionConfiguration.ephemeral : PeerSessionConfiguration.default
        configuration.trustPolicy = policy
        if let store { configuration.trustStoreURL = store }
        return PeerSession(configuration: configuration, delegate: delegate)
    }

    /// Starts TLS on a task to `openssl s_server -rev`, and sends a line through it.
    private func exchange(_ session: PeerSession) async throws -> (PeerStreamTask, String) {
        let (server, port) = try reversingServer(certificate)
        defer { server.stop() }
        let task = session.streamTask(withHostName: "127.0.0.1", port: port)
        task.resume()
        try await task.secureConnection()
        try await task.write(Data("salut\n".utf8), timeout: 5)
        let (reply, _) = try await task.readData(ofMinLength: 6, maxLength: 6, timeout: 5)
        task.cancel()
        return (task, String(decoding: reply, as: UTF8.self))
    }

    func testStartSecureConnectionAgainstOpenSSLServerWithAPin() async throws {
        let (task, reply) = try await exchange(session(.pinned([certificate.certificateSHA256])))
        XCTAssertEqual(reply, "tulas\n")
        XCTAssertEqual(task.connectionDetails?.tls?.protocolVersion, "TLSv1.3")
    }

    func testTrustChallengeCanAcceptWhatThePolicyRefuses() async throws {
        let delegate = RecordingDelegate()
        delegate.trustAnswer = .useCredential
        let (task, reply) = try await exchange(session(.systemRoots, delegate: delegate))
        XCTAssertEqual(reply, "tulas\n")
        let challenge = try XCTUnwrap(delegate.challenges.first)
        XCTAssertEqual(
            challenge.proposedDisposition, .cancelAuthenticationChallenge,
            "the system roots do not know this certificate")
        XCTAssertEqual(challenge.peerTrust.certificateSHA256, certificate.certificateSHA256)
        XCTAssertEqual(challenge.host, "127.0.0.1")
        XCTAssertNotNil(challenge.peerTrust.policyFailure)
        XCTAssertTrue(delegate.events.contains("challenge \(task.taskIdentifier)"))
    }

    func testTrustChallengeCanRejectWhatThePolicyAccepts() async throws {
        let delegate = RecordingDelegate()
        delegate.trustAnswer = .cancelAuthenticationChallenge
        do {
            _ = try await exchange(session(.pinned([certificate.certificateSHA256]), delegate: delegate))
            XCTFail("a rejected peer was used")
        } catch {
            XCTAssertEqual(error as? PeerSessionError, .connection(.tls(.rejectedByEvaluator)))
        }
        XCTAssertEqual(delegate.challenges.first?.proposedDisposition, .useCredential)
    }

    func testDefaultHandlingFollowsThePolicy() async throws {
        do {
            _ = try await exchange(session(.systemRoots, delegate: RecordingDelegate()))
            XCTFail("a self-signed peer passed the system roots")
        } catch {
            XCTAssertEqual((error as? PeerSessionError)?.connectionError?.code, .tls, "\(error)")
        }
    }

    func testTrustOnFirstUseRemembersTheKeyOnDisk() async throws {
        let store = FileManager.default.temporaryDirectory.appendingPathComponent(
            "salut-known-\(UUID().uuidString).json")
        defer { try? FileManager.default.removeItem(at: store) }
        let (_, reply) = try await exchange(session(.trustOnFirstUse, store: store))
        XCTAssertEqual(reply, "tulas\n")
        let saved = try JSONDecoder().decode([String: String].self, from: Data(contentsOf: store))
        XCTAssertEqual(saved.values.first, certificate.publicKeySHA256)
        // The same peer with a new key is refused by a new session reading the same store.
        let original = certificate!
        certificate = try TestCertificate.make()
        defer { certificate = original }
        let (server, port) = try reversingServer(certificate)
        defer { server.stop() }
        let key = try XCTUnwrap(saved.keys.first)
        // Point the stored entry at this server's port, as if it were the same host.
        let moved = [
            key.replacingOccurrences(of: key.split(separator: ":").last.map(String.init) ?? "", with: "\(port)"):
                original.publicKeySHA256
        ]
        try JSONEncoder().encode(moved).write(to: store)
        let task = session(.trustOnFirstUse, store: store).streamTask(withHostName: "127.0.0.1", port: port)
        task.resume()
        do {
            try await task.secureConnection()
            XCTFail("a changed key was trusted")
        } catch {
            XCTAssertEqual(error as? PeerSessionError, .connection(.tls(.rejectedByEvaluator)))
        }
    }

    func testTrustOnFirstUsePinsOnlyWhatTheDelegateAcceptsAndABadStoreTrustsNoOne() async throws {
        let store = FileManager.default.temporaryDirectory.appendingPathComponent(
            "salut-known-\(UUID().uuidString).json")
        defer { try? FileManager.default.removeItem(at: store) }
        // The delegate refuses the first key: it must not stay pinned.
        let refusing = RecordingDelegate()
        refusing.trustAnswer = .cancelAuthenticationChallenge
        do {
            _ = try await exchange(session(.trustOnFirstUse, delegate: refusing, store: store))
            XCTFail("a refused key was used")
        } catch {}
        XCTAssertFalse(FileManager.default.fileExists(atPath: store.path), "a key the delegate refused was pinned")
        // A store that cannot be read fails closed, and is left as it is.
        try Data("{not json".utf8).write(to: store)
        do {
            _ = try await exchange(session(.trustOnFirstUse, store: store))
            XCTFail("a first use was trusted with an unreadable store")
        } catch {
            XCTAssertEqual((error as? PeerSessionError)?.connectionError?.code, .tls, "\(error)")
        }
        XCTAssertEqual(try String(contentsOf: store, encoding: .utf8), "{not json")
    }

    func testTheTrustStoreMergesProcessesAndComparesNamesWithoutCase() throws {
        let file = FileManager.default.temporaryDirectory.appendingPathComponent(
            "salut-known-\(UUID().uuidString).json")
        defer { try? FileManager.default.removeItem(at: file) }
        let a = String(repeating: "aa", count: 32), b = String(repeating: "bb", count: 32)
        // Two sessions (as two processes would) on one file: neither loses the other's pin.
        let first = TrustStore(file: file), second = TrustStore(file: file)
        XCTAssertNil(first.check(peer: "Printer.local:631", fingerprint: a))
        XCTAssertNil(second.check(peer: "scanner.local:80", fingerprint: b))
        XCTAssertTrue(first.remember(peer: "Printer.local:631", fingerprint: a))
        XCTAssertTrue(second.remember(peer: "scanner.local:80", fingerprint: b))
        let saved = try JSONDecoder().decode([String: String].self, from: Data(contentsOf: file))
        XCTAssertEqual(saved.count, 2, "\(saved)")
        // Another case of the name is the same peer, held to its key.
        XCTAssertNil(second.check(peer: "PRINTER.local:631", fingerprint: a))
        XCTAssertNotNil(second.check(peer: "printer.LOCAL:631", fingerprint: b))
        // Two first uses at once with different keys: the second to be remembered is refused,
        // and the key remembered first stays.
        XCTAssertFalse(second.remember(peer: "printer.local:631", fingerprint: b))
        XCTAssertNotNil(first.check(peer: "Printer.local:631", fingerprint: b))
        let memory = TrustStore(file: nil)
        XCTAssertTrue(memory.remember(peer: "x:1", fingerprint: a))
        XCTAssertFalse(memory.remember(peer: "X:1", fingerprint: b))
    }

    /// STARTTLS both ways: plain, then TLS (our task against our own listener upgrading its
    /// accepted connection), then plain again after both sides stop TLS.
    func testStartAndStopSecureConnectionMidStream() async throws {
        let listener = try StreamListener(port: 0)
        defer { listener.stop() }
        let serverTLS = TLSConfiguration.server(
            certificateChainFile: certificate.certificateFile, privateKeyFile: certificate.keyFile)
        listener.accept { connection in
            Task {
                let pair = connection.streams
                try await pair.open()
                _ = await pair.read(minimum: 9, maximum: 9, limit: OperationLimit())  // "STARTTLS\n"
                // Like any STARTTLS server: the go-ahead goes out in the same step as the switch,
                // so the client's first TLS bytes are never read in the clear.
                let upgraded: Result<ConnectionDetails, SocketStreamError> = await withCheckedContinuation { done in
                    pair.startTLS(serverTLS, evaluator: nil, dialledHost: nil, preface: Data("GO\n".utf8)) {
                        done.resume(returning: $0)
                    }
                }
                guard case .success = upgraded else { return }
                let secret = await pair.read(minimum: 7, maximum: 7, limit: OperationLimit())  // "secret\n"
                _ = await pair.write(Data("got ".utf8) + secret.data, limit: OperationLimit())
                let stopped: Result<Void, SocketStreamError> = await withCheckedContinuation { done in
                    pair.stopTLS { done.resume(returning: $0) }
                }
                guard case .success = stopped else { return }
                let plain = await pair.read(minimum: 6, maximum: 6, limit: OperationLimit())  // "plain\n"
                _ = await pair.write(Data("again ".utf8) + plain.data, limit: OperationLimit())
                pair.output.close()
            }
        }
        let task = session(.pinned([certificate.publicKeySHA256])).streamTask(
            withHostName: "127.0.0.1", port: Int(listener.port))
        task.resume()
        try await task.write(Data("STARTTLS\n".utf8), timeout: 5)
        let (go, _) = try await task.readData(ofMinLength: 3, maxLength: 3, timeout: 5)
        XCTAssertEqual(go, Data("GO\n".utf8))
        try await withDeadline(10, "TLS start") { try await task.secureConnection() }
        XCTAssertEqual(task.connectionDetails?.tls?.publicKeySHA256, certificate.publicKeySHA256)
        try await task.write(Data("secret\n".utf8), timeout: 5)
        let (got, _) = try await task.readData(ofMinLength: 11, maxLength: 11, timeout: 5)
        XCTAssertEqual(String(decoding: got, as: UTF8.self), "got secret\n")
        try await withDeadline(10, "TLS stop") { try await task.insecureConnection() }
        XCTAssertNil(task.connectionDetails?.tls, "back in the clear")
        try await task.write(Data("plain\n".utf8), timeout: 5)
        let (again, _) = try await task.readData(ofMinLength: 12, maxLength: 12, timeout: 5)
        XCTAssertEqual(String(decoding: again, as: UTF8.self), "again plain\n")
        task.cancel()
    }

    func testVersionLimitsAndClientIdentityComeFromTheConfiguration() async throws {
        let clientCertificate = try TestCertificate.make(
            commonName: "session-client", alternativeNames: "DNS:session-client")
        var serverTLS = TLSConfiguration.server(
            certificateChainFile: certificate.certificateFile, privateKeyFile: certificate.keyFile)
        serverTLS.requiresClientCertificate = true
        serverTLS.pinnedSHA256 = [clientCertificate.certificateSHA256]
        let server = try EchoServer(tls: serverTLS)

        func attempt(_ change: (inout PeerSessionConfiguration) -> Void) async -> (String?, (any Error)?) {
            var configuration = PeerSessionConfiguration.ephemeral
            configuration.trustPolicy = .pinned([certificate.certificateSHA256])
            change(&configuration)
            let task = PeerSession(configuration: configuration).streamTask(
                withHostName: "127.0.0.1", port: server.port)
            task.resume()
            defer { task.cancel() }
            do {
                try await withDeadline(20, "TLS") { try await task.secureConnection() }
                try await task.write(Data("?".utf8), timeout: 5)
                let (echo, _) = try await task.readData(ofMinLength: 1, maxLength: 1, timeout: 5)
                return echo == Data("?".utf8) ? (task.connectionDetails?.tls?.protocolVersion, nil) : (nil, nil)
            } catch {
                return (nil, error)
            }
        }
        let identity = PeerTLSIdentity(
            certificateChainFile: clientCertificate.certificateFile, privateKeyFile: clientCertificate.keyFile)
        let (v13, error13) = await attempt { $0.tlsIdentity = identity }
        XCTAssertEqual(v13, "TLSv1.3", "\(String(describing: error13))")
        let (v12, error12) = await attempt {
            $0.tlsIdentity = identity; $0.tlsMaximumSupportedProtocolVersion = .v1_2
        }
        XCTAssertEqual(v12, "TLSv1.2", "\(String(describing: error12))")
        let (anonymous, refused) = await attempt { _ in }
        XCTAssertNil(anonymous, "the server requires a client certificate")
        XCTAssertNotNil(refused)
    }
}

final class SecureTaskTimeoutTests: SalutTestCase {
    func testAPeerThatNeverAnswersTheHandshakeFailsTheTaskAtTheSessionsBound() async throws {
        // A plain listener whose connections are held and never answered.
        let listener = try StreamListener(
            port: 0, limits: ConnectionLimits(handshakeTimeout: nil, firstByteTimeout: nil))
        defer { listener.stop() }
        let held = Locked<[AcceptedConnection]>([])
        listener.accept { connection in held.withLock { $0.append(connection) } }
        defer { held.withLock { $0.removeAll() } }
        var configuration = PeerSessionConfiguration.ephemeral
        configuration.trustPolicy = .acceptAny
        configuration.timeoutIntervalForTLSHandshake = 0.3
        let session = PeerSession(configuration: configuration, delegate: nil)
        let task = session.streamTask(withHostName: "127.0.0.1", port: Int(listener.port))
        task.resume()
        do {
            try await withDeadline(10, "the handshake bound") { try await task.secureConnection() }
            XCTFail("a handshake nobody answered succeeded")
        } catch {
            XCTAssertEqual(
                error as? PeerSessionError, .connection(.limitExceeded("the TLS handshake did not finish within 0.3 s"))
            )
        }
        task.cancel()
    }
}
