import Foundation
import SalutStreams
import XCTest
@testable import PeerTransferCore

/// Frames, paths and manifests: the parts of the protocol that need no connection.
final class ProtocolTests: XCTestCase {
    func testFramesSurviveAnySplitOfTheByteStream() throws {
        let frames = [Frame.message(.hello, Hello(protocolVersion: 2, device: "d", name: "ünï")),
                      ChunkFrame(index: 7, offset: 1 << 20, data: Data(repeating: 0xab, count: 5000)).frame,
                      FileEnd(index: 7, sha256: String(repeating: "0f", count: 32)).frame,
                      ChunkFrame(index: 8, offset: 0, data: Data()).frame,
                      Frame.message(.done, Done())]
        let wire = frames.map(\.encoded).reduce(Data(), +)
        for piece in [1, 2, 3, 5, 7, 64, 4096, wire.count] {
            var decoder = FrameDecoder()
            var decoded: [Frame] = []
            var offset = 0
            while offset < wire.count {
                decoder.append(wire[offset..<min(offset + piece, wire.count)])
                offset += piece
                while let frame = try decoder.next() { decoded.append(frame) }
            }
            XCTAssertEqual(decoded, frames, "pieces of \(piece) bytes")
            XCTAssertEqual(decoder.bufferedCount, 0)
        }
        let chunk = try ChunkFrame(frames[1])
        XCTAssertEqual(chunk.index, 7)
        XCTAssertEqual(chunk.offset, 1 << 20)
        XCTAssertEqual(chunk.data.count, 5000)
        // A chunk's file bytes start on a 4 KiB boundary, for direct I/O.
        var decoder = FrameDecoder()
        decoder.append(wire)
        _ = try decoder.next()
        let decodedChunk = try ChunkFrame(XCTUnwrap(try decoder.next()))
        decodedChunk.data.withUnsafeBytes { XCTAssertEqual(Int(bitPattern: $0.baseAddress!) % ChunkFrame.dataAlignment, 0) }
        XCTAssertEqual(try FileEnd(XCTUnwrap(try decoder.next())).sha256, String(repeating: "0f", count: 32))
    }

    func testOversizedAndUnknownFramesAreRefusedBeforeTheyAreBuffered() {
        var decoder = FrameDecoder()
        decoder.append(Data([Frame.Kind.manifest.rawValue, 0x7f, 0xff, 0xff, 0xff]))   // 2 GiB announced
        XCTAssertThrowsError(try decoder.next()) { XCTAssertTrue("\($0)".contains("limit"), "\($0)") }
        var chunkDecoder = FrameDecoder()
        chunkDecoder.append(Data([Frame.Kind.chunk.rawValue, 0x00, 0x20, 0x00, 0x00]))   // 2 MiB chunk
        XCTAssertThrowsError(try chunkDecoder.next())
        var unknown = FrameDecoder()
        unknown.append(Data([0x42, 0, 0, 0, 0]))
        XCTAssertThrowsError(try unknown.next()) { XCTAssertTrue("\($0)".contains("unknown message kind 66"), "\($0)") }
        XCTAssertThrowsError(try ChunkFrame(Frame(kind: .chunk, payload: Data([1, 2, 3]))))
        // A connection that ends right after a chunk's header ended inside a message.
        var headerOnly = FrameDecoder()
        headerOnly.append(Data([Frame.Kind.chunk.rawValue, 0, 0, 1, 0]))
        XCTAssertNil(try headerOnly.next())
        XCTAssertGreaterThan(headerOnly.bufferedCount, 0)
        var longEnd = FrameDecoder()
        longEnd.append(Data([Frame.Kind.fileEnd.rawValue, 0, 0, 0, 37]))   // a fileEnd is 36 bytes
        XCTAssertThrowsError(try longEnd.next()) { XCTAssertTrue("\($0)".contains("limit"), "\($0)") }
    }

    func testPathsThatWouldLeaveTheInboxOrCannotBeStoredAreRefused() {
        let refused: [(String, String)] = [
            ("", "empty"), ("/etc/passwd", "absolute"), ("../up", "\"..\""), ("a/../../b", "\"..\""), ("a/./b", "\".\""),
            ("a//b", "empty component"), ("a/", "empty component"), ("nul\u{0}byte", "control"), ("bell\u{7}", "control"),
            ("esc\u{1b}[31m", "control"), (String(repeating: "n", count: 256), "longer than 255"),
            (Array(repeating: "d", count: 65).joined(separator: "/"), "deeper"),
            (String(repeating: "abcdefgh/", count: 460) + "x", "longer than 4096"), ("x.peerxfer-part", "part"), ("victim\u{0600}.peerxfer-part", "part"),
            ("csi\u{9b}31m", "control"), ("del\u{7f}", "control"), ("invoice\u{202E}fdp.exe", "bidirectional"),
            ("dir\u{2067}/x", "bidirectional"), ("mark\u{200F}", "bidirectional"),
        ]
        for (path, why) in refused {
            XCTAssertThrowsError(try RelativePath(validating: path), path) { error in
                XCTAssertTrue("\(error)".contains(why), "\(path): \(error)")
                XCTAssertFalse("\(error)".unicodeScalars.contains { $0.value == 0x1b || $0.value == 0x9b || $0.value == 0x202e },
                               "the error must not carry raw escapes or overrides")
            }
        }
        for path in ["a", "ünï cödé/файл.txt", "a b/c..d/.hidden", String(repeating: "n", count: 255)] {
            XCTAssertNoThrow(try RelativePath(validating: path), path)
        }
    }

    func testADeepManifestWithDistinctFolderChainsIsChecked() throws {
        // 1,000 paths of 63 folders of 63 bytes each (4 MiB), every folder chain distinct: the
        // check numbers each folder once instead of rebuilding every prefix of every path.
        let entries = (0..<1_000).map { index -> ManifestEntry in
            let folders = (0..<63).map { level in String(format: "%05d", index) + String(repeating: "f", count: 56) + String(format: "%02d", level) }
            return ManifestEntry(path: folders.joined(separator: "/") + "/x", kind: .file, size: 1, mode: 0o644, modified: 0)
        }
        let manifest = Manifest(chunkSize: TransferLimits.chunkSize, entries: entries)
        XCTAssertEqual(try manifest.validate().count, 1_000)
        var clash = manifest
        clash.entries.append(ManifestEntry(path: entries[7].path.components(separatedBy: "/").prefix(30).joined(separator: "/"),
                                           kind: .file, size: 1, mode: 0o644, modified: 0))
        XCTAssertThrowsError(try clash.validate()) { XCTAssertTrue("\($0)".contains("as a file and as a folder"), "\($0)") }
    }

    func testManifestChecksDuplicatesAndFilesUnderFiles() {
        func manifest(_ entries: [ManifestEntry]) -> Manifest { Manifest(chunkSize: TransferLimits.chunkSize, entries: entries) }
        let file = { (path: String) in ManifestEntry(path: path, kind: .file, size: 1, mode: 0o644, modified: 0) }
        let folder = { (path: String) in ManifestEntry(path: path, kind: .directory, size: 0, mode: 0o755, modified: 0) }
        XCTAssertNoThrow(try manifest([folder("d"), file("d/x"), folder("d/empty")]).validate())
        XCTAssertThrowsError(try manifest([file("x"), file("x")]).validate()) { XCTAssertTrue("\($0)".contains("twice"), "\($0)") }
        XCTAssertThrowsError(try manifest([file("x"), file("x/y")]).validate()) { XCTAssertTrue("\($0)".contains("as a file and as a folder"), "\($0)") }
        XCTAssertThrowsError(try manifest([file("a/b/c/d"), file("a/b")]).validate()) { XCTAssertTrue("\($0)".contains("\"a/b\" is offered as a file and as a folder"), "\($0)") }
        XCTAssertNoThrow(try manifest([file("a/b-c"), file("a/b/c"), file("ab/c"), folder("a/b")]).validate(), "near names are not clashes")
        XCTAssertThrowsError(try Manifest(chunkSize: 4096, entries: [file("x")]).validate())
        // A file name the part file's sender tag and suffix would push past 255 bytes: refused
        // up front, with the limit, instead of failing after the answer; 228 bytes still fit.
        XCTAssertThrowsError(try manifest([file(String(repeating: "n", count: 229))]).validate()) {
            XCTAssertTrue("\($0)".contains("at most 228"), "\($0)")
        }
        XCTAssertNoThrow(try manifest([file(String(repeating: "n", count: 228))]).validate())
        XCTAssertNoThrow(try manifest([folder(String(repeating: "n", count: 255))]).validate(), "folders have no part file")
        let tooMany = (0...TransferLimits.maximumEntries).map { folder("d\($0)") }
        XCTAssertThrowsError(try manifest(tooMany).validate()) { XCTAssertTrue("\($0)".contains("entries offered"), "\($0)") }
    }

    func testNumberedNamesKeepTheExtensionAndTheLengthLimit() {
        XCTAssertEqual(PartFile.numbered("report.pdf", 1), "report (1).pdf")
        XCTAssertEqual(PartFile.numbered("archive.tar.gz", 2), "archive.tar (2).gz")
        XCTAssertEqual(PartFile.numbered(".bashrc", 3), ".bashrc (3)")
        XCTAssertEqual(PartFile.numbered("README", 4), "README (4)")
        let long = String(repeating: "é", count: 120) + ".txt"   // 244 bytes
        let numbered = PartFile.numbered(long, 12)
        XCTAssertLessThanOrEqual(numbered.utf8.count, 255)
        XCTAssertTrue(numbered.hasSuffix(" (12).txt"), numbered)
        // An extension too long to keep whole (the name is taken, so a number is due): cut,
        // never a crash, and always a valid name.
        let longExtension = "a." + String(repeating: "é", count: 126)   // 254 bytes
        let cut = PartFile.numbered(longExtension, 3)
        XCTAssertLessThanOrEqual(cut.utf8.count, TransferLimits.maximumNameBytes)
        XCTAssertTrue(cut.hasSuffix(" (3)"), cut)
        XCTAssertNoThrow(try RelativePath(validating: cut))
        let wide = String(repeating: "é", count: 127) + ".x"   // 256 bytes, multi-byte cut
        XCTAssertLessThanOrEqual(PartFile.numbered(wide, 12).utf8.count, TransferLimits.maximumNameBytes)
    }

    func testTerminalEscapingDefusesControlAndBidiCharacters() {
        XCTAssertEqual(Terminal.escape("a\u{1b}[2Jb\u{7}\r\n"), "a\\x1b[2Jb\\x07\\x0d\\x0a")
        XCTAssertEqual(Terminal.escape("evil\u{202e}fdp.exe"), "evil\\u{202e}fdp.exe")
        XCTAssertEqual(Terminal.escape("\u{9b}31m"), "\\x9b31m")
        XCTAssertEqual(Terminal.escape("ünï cödé"), "ünï cödé")
        // A backslash in the text is doubled: "\x9b" typed as text never reads as U+009B.
        XCTAssertEqual(Terminal.escape("ok\\x9b"), "ok\\\\x9b")
        XCTAssertNotEqual(Terminal.escape("ok\\x9b"), Terminal.escape("ok\u{9b}"))
    }

    func testSHA256HasherMatchesKnownDigestsAcrossPieces() {
        XCTAssertEqual(SHA256Hasher.hash(Data()).hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
        let hasher = SHA256Hasher()
        hasher.update(Data("ab".utf8))
        hasher.update(Data("c".utf8))
        XCTAssertEqual(hasher.finish().hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        XCTAssertEqual(SHA256Digest(hex: "BA7816BF8F01CFEA414140DE5DAE2223B00361A396177A9CB410FF61F20015AD")?.hex,
                       "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        XCTAssertNil(SHA256Digest(hex: "+a" + String(repeating: "0", count: 62)))
    }

    func testAFirstRunCutBetweenKeyAndCertificateGetsAWholeIdentityNextTime() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("px-half-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let first = try TLSIdentity.loadOrCreate(directory: directory, commonName: "test")
        // As if the process died after writing the key and before the certificate.
        try FileManager.default.removeItem(atPath: first.certificateFile)
        let again = try TLSIdentity.loadOrCreate(directory: directory, commonName: "test")
        XCTAssertEqual(try TLSIdentity.publicKeySHA256(ofCertificateFile: again.certificateFile), again.publicKeySHA256)
    }

    func testIdentityIsMadeOnceWithAPrivateKeyFileAndAStableFingerprint() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("px-identity-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let first = try TLSIdentity.loadOrCreate(directory: directory, commonName: "test")
        let again = try TLSIdentity.loadOrCreate(directory: directory, commonName: "other")
        XCTAssertEqual(first.publicKeySHA256, again.publicKeySHA256)
        XCTAssertEqual(first.publicKeySHA256.count, 64)
        let keyMode = try FileManager.default.attributesOfItem(atPath: first.privateKeyFile)[.posixPermissions] as? Int
        XCTAssertEqual(keyMode, 0o600)
        XCTAssertEqual(try TLSIdentity.publicKeySHA256(ofCertificateFile: first.certificateFile), first.publicKeySHA256)
        // The certificate is one OpenSSL itself accepts, and its key is the one we pin.
        let pipe = Pipe()
        let openssl = Process()
        openssl.executableURL = URL(fileURLWithPath: "/usr/bin/openssl")
        openssl.arguments = ["x509", "-in", first.certificateFile, "-noout", "-pubkey"]
        openssl.standardOutput = pipe
        try openssl.run()
        openssl.waitUntilExit()
        XCTAssertEqual(openssl.terminationStatus, 0)
        let pem = String(decoding: pipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        let base64 = pem.split(separator: "\n").filter { !$0.hasPrefix("-----") }.joined()
        XCTAssertEqual(SHA256Hasher.hash(Data(base64Encoded: base64)!).hex, first.publicKeySHA256)
        // A key that does not belong to the certificate is refused.
        let otherDirectory = directory + "-other"
        defer { try? FileManager.default.removeItem(atPath: otherDirectory) }
        let other = try TLSIdentity.loadOrCreate(directory: otherDirectory, commonName: "other")
        XCTAssertThrowsError(try TLSIdentity(certificateFile: first.certificateFile, privateKeyFile: other.privateKeyFile))
    }
}
