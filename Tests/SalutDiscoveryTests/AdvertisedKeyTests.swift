import Foundation
import Salut
import SalutTestSupport
import XCTest

/// `DiscoveredService.connect(pinningAdvertisedKey:trustedKey:…)`: TLS pinned to the key a
/// service advertises in its TXT record, trusted on first use, against real listeners
/// published through the avahi-daemon.
final class AdvertisedKeyTests: XCTestCase {
    func server(_ certificate: TestCertificate) -> TLSConfiguration {
        .server(certificateChainFile: certificate.certificateFile, privateKeyFile: certificate.keyFile)
    }

    /// Publishes an echoing TLS service named `name` with `fp` in its TXT record.
    func publish(
        _ name: String, type: String, fp: String, holding certificate: TestCertificate
    ) async throws
        -> (ServiceAdvertisement, Task<Void, Never>)
    {
        let ad = try await ServiceAdvertisement.listen(
            name: name, type: type, txtRecord: try TXTRecord(["fp": fp]), tls: server(certificate), allowRename: false)
        let accepting = Task { for await connection in ad.connections { Task { await echo(connection) } } }
        return (ad, accepting)
    }

    /// The error a refused connection gives, or a failure when it connected.
    func refusal(_ connect: @escaping @Sendable () async throws -> BoundStreamPair) async -> TLSError? {
        do {
            let pair = try await withDeadline(20, "connect") { try await connect() }
            pair.input.close(); pair.output.close()
            XCTFail("connected")
            return nil
        } catch let error as SocketStreamError {
            return error.tlsError
        } catch {
            XCTFail("\(error)")
            return nil
        }
    }

    func testTheAdvertisedKeyIsPinnedTrustedOnFirstUseAndAnotherIsRefused() async throws {
        let real = try TestCertificate.make()
        let other = try TestCertificate.make()
        let type = uniqueType("k")
        // Advertised in capitals: any case is the same key.
        let (realAd, realAccepting) = try await publish(
            "Real", type: type, fp: real.publicKeySHA256.uppercased(), holding: real)
        defer { realAccepting.cancel() }
        let service = DiscoveredService(name: realAd.name, type: type)

        // First use: nothing trusted yet; the key proven is the advertised one, and bytes flow.
        let first = try await withDeadline(20, "first use") { try await service.connect(pinningAdvertisedKey: "fp") }
        XCTAssertEqual(first.peerTrust?.publicKeySHA256, real.publicKeySHA256)
        try await first.output.write(Data("salut\n".utf8))
        first.output.close()
        let echoed = try await withDeadline(20, "echo") { try await readAll(first.input) }
        XCTAssertEqual(String(decoding: echoed, as: UTF8.self), "salut\n")
        first.input.close()

        // Later, with the remembered key (written with colons): connects.
        let remembered = stride(from: 0, to: 64, by: 2).map { offset -> String in
            let start = real.publicKeySHA256.index(real.publicKeySHA256.startIndex, offsetBy: offset)
            return String(real.publicKeySHA256[start..<real.publicKeySHA256.index(start, offsetBy: 2)])
        }.joined(separator: ":")
        let again = try await withDeadline(20, "trusted") {
            try await service.connect(pinningAdvertisedKey: "fp", trustedKey: remembered)
        }
        XCTAssertEqual(again.peerTrust?.publicKeySHA256, real.publicKeySHA256)
        again.input.close(); again.output.close()

        // An impostor under a name we trusted the real key for, advertising its own key:
        // refused before anything is connected, saying which key it advertises.
        let (impostorAd, impostorAccepting) = try await publish(
            "Impostor", type: type, fp: other.publicKeySHA256, holding: other)
        defer { impostorAccepting.cancel() }
        let impostor = DiscoveredService(name: impostorAd.name, type: type)
        let changed = await refusal {
            try await impostor.connect(pinningAdvertisedKey: "fp", trustedKey: real.publicKeySHA256)
        }
        XCTAssertEqual(changed?.code, .advertisedKeyChanged, "\(String(describing: changed))")
        XCTAssertEqual(changed?.advertisedPublicKeyFingerprint, other.publicKeySHA256)
        XCTAssertTrue("\(String(describing: changed))".contains("not connected"))

        // A liar advertising the real key while holding another: the handshake's pin refuses it.
        let (liarAd, liarAccepting) = try await publish("Liar", type: type, fp: real.publicKeySHA256, holding: other)
        defer { liarAccepting.cancel() }
        let liar = DiscoveredService(name: liarAd.name, type: type)
        let mismatch = await refusal { try await liar.connect(pinningAdvertisedKey: "fp") }
        XCTAssertEqual(mismatch?.code, .pinMismatch, "\(String(describing: mismatch))")
        XCTAssertEqual(mismatch?.presentedPublicKeyFingerprint, other.publicKeySHA256)

        // A server-role configuration given by mistake still connects as a client, pinned.
        let serverRole = server(real)
        let asServer = await refusal { try await liar.connect(pinningAdvertisedKey: "fp", tls: serverRole) }
        XCTAssertEqual(asServer?.code, .pinMismatch, "\(String(describing: asServer))")
        // A service advertising its certificate's hash, not its key's: refused, for the key
        // remembered from such a connection would never match what it advertises.
        let (certAd, certAccepting) = try await publish("Cert", type: type, fp: real.certificateSHA256, holding: real)
        defer { certAccepting.cancel() }
        let byCertificate = await refusal {
            try await DiscoveredService(name: certAd.name, type: type).connect(pinningAdvertisedKey: "fp")
        }
        XCTAssertEqual(byCertificate?.code, .pinMismatch, "\(String(describing: byCertificate))")

        // No key, or something that is not one (escaped in the message): refused, typed.
        let (bareAd, bareAccepting) = try await publish("Bare", type: type, fp: "\u{1b}[2Jnot-a-key", holding: real)
        defer { bareAccepting.cancel() }
        let bare = DiscoveredService(name: bareAd.name, type: type)
        let missing = await refusal { try await bare.connect(pinningAdvertisedKey: "fp") }
        XCTAssertEqual(missing?.code, .advertisedKeyMissing, "\(String(describing: missing))")
        XCTAssertFalse("\(String(describing: missing))".contains("\u{1b}"), "nothing from the network unescaped")
        let otherEntry = await refusal { try await service.connect(pinningAdvertisedKey: "key") }
        XCTAssertEqual(otherEntry?.code, .advertisedKeyMissing)
        XCTAssertTrue("\(String(describing: otherEntry))".contains("\"key\""))

        // A trusted key that is no fingerprint is the caller's mistake, said as such.
        let wrong = await refusal { try await service.connect(pinningAdvertisedKey: "fp", trustedKey: "kitchen") }
        XCTAssertEqual(wrong?.code, .invalidConfiguration)

        for ad in [realAd, impostorAd, liarAd, certAd, bareAd] { await ad.withdraw() }
    }

    /// With a book of trusted keys: the first connection's key is written to it under the
    /// service's name, later ones need it, and a book holding another key for the name refuses.
    func testABookOfTrustedKeysTrustsOnFirstUseAndRefusesAnotherKeyLater() async throws {
        let real = try TestCertificate.make()
        let other = try TestCertificate.make()
        let type = uniqueType("kb")
        let (ad, accepting) = try await publish("Booked", type: type, fp: real.publicKeySHA256, holding: real)
        defer { accepting.cancel() }
        let service = DiscoveredService(name: ad.name, type: type)
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("book-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: folder) }

        let book = try TrustedKeys(path: folder + "/known")
        let first = try await withDeadline(20, "first use") {
            try await service.connect(pinningAdvertisedKey: "fp", trustedKeys: book)
        }
        first.close()
        XCTAssertEqual(book.entries, [ad.name: real.publicKeySHA256], "the first key, under the service's name")
        XCTAssertEqual(try TrustedKeys(path: folder + "/known").key(for: ad.name), real.publicKeySHA256, "on disk")
        let again = try await withDeadline(20, "trusted") {
            try await service.connect(pinningAdvertisedKey: "fp", trustedKeys: book)
        }
        again.close()

        // Another key trusted for the name (the service's key changed since, say): refused.
        let wary = try TrustedKeys(path: folder + "/other")
        XCTAssertTrue(try wary.trustOnFirstUse(other.publicKeySHA256, for: ad.name))
        let changed = await refusal { try await service.connect(pinningAdvertisedKey: "fp", trustedKeys: wary) }
        XCTAssertEqual(changed?.code, .advertisedKeyChanged, "\(String(describing: changed))")
        XCTAssertEqual(wary.entries, [ad.name: other.publicKeySHA256], "the book is unchanged")
        await ad.withdraw()
    }

    func testAResolvedRecordGivesItsAdvertisedKeyOnlyWhenItIsOne() throws {
        let key = String(repeating: "aB", count: 32)
        func resolved(_ txt: [String: String]) throws -> ResolvedService {
            ResolvedService(
                service: DiscoveredService(name: "x", type: "_x._tcp"), hostName: "x.local", port: 1,
                txtRecord: try TXTRecord(txt), addresses: [])
        }
        XCTAssertEqual(try resolved(["fp": key]).advertisedPublicKeySHA256(forTXTKey: "fp"), key.lowercased())
        XCTAssertNil(try resolved(["fp": String(key.dropLast())]).advertisedPublicKeySHA256(forTXTKey: "fp"))
        XCTAssertNil(try resolved(["fp": key + "0"]).advertisedPublicKeySHA256(forTXTKey: "fp"))
        XCTAssertNil(try resolved(["fp": String(repeating: "g", count: 64)]).advertisedPublicKeySHA256(forTXTKey: "fp"))
        XCTAssertNil(try resolved(["other": key]).advertisedPublicKeySHA256(forTXTKey: "fp"))
    }
}
