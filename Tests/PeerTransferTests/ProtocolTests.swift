import Foundation
import SalutStreams
import XCTest
@testable import PeerTransferCore

/// Frames, paths and manifests: the parts of the protocol that need no connection.
final class ProtocolTests: XCTestCase {
    func testFramesSurviveAnySplitOfTheByteStream() throws {
        let frames = [
            Frame.message(.hello, Hello(protocolVersion: 2, device: "d", name: "ünï")),
            ChunkFrame(index: 7, offset: 1 << 20, data: Data(repeating: 0xab, count: 5000)).frame,
            FileEnd(index: 7, sha256: String(repeating: "0f", count: 32)).frame,
            ChunkFrame(index: 8, offset: 0, data: Data()).frame,
            Frame.message(.done, Done()),
        ]
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
        // As the connection's reader takes them: lent from scratch space that the next read
        // overwrites, a chunk's payload read straight into its memory.
        for piece in [1, 3, 5, 17, 64, 4096, wire.count] {
            var decoder = FrameDecoder()
            var decoded: [Frame] = []
            var offset = 0
            let scratch = UnsafeMutableRawBufferPointer.allocate(byteCount: piece, alignment: 1)
            defer { scratch.deallocate() }
            while true {
                while let frame = try decoder.next() { decoded.append(frame) }
                scratch.initializeMemory(as: UInt8.self, repeating: 0xee)  // the next read
                guard offset < wire.count else { break }
                let target = decoder.directSpace ?? scratch
                let count = min(target.count, piece, wire.count - offset)
                wire.copyBytes(
                    to: UnsafeMutableRawBufferPointer(rebasing: target[0..<count]), from: offset..<offset + count)
                offset += count
                if decoder.directSpace != nil {
                    decoder.directlyFilled(count)
                } else {
                    decoder.lend(UnsafeRawBufferPointer(rebasing: scratch[0..<count]))
                }
            }
            XCTAssertEqual(decoded, frames, "lent in pieces of \(piece) bytes")
            XCTAssertEqual(decoder.bufferedCount, 0)
        }
        let chunk = try ChunkFrame(frames[1])
        XCTAssertEqual(chunk.index, 7)
        XCTAssertEqual(chunk.offset, 1 << 20)
        XCTAssertEqual(chunk.data.count, 5000)
        // A chunk's file bytes start on a 4 KiB (page) boundary.
        var decoder = FrameDecoder()
        decoder.append(wire)
        _ = try decoder.next()
        let decodedChunk = try ChunkFrame(XCTUnwrap(try decoder.next()))
        decodedChunk.data.withUnsafeBytes {
            XCTAssertEqual(Int(bitPattern: $0.baseAddress!) % ChunkFrame.dataAlignment, 0)
        }
        XCTAssertEqual(try FileEnd(XCTUnwrap(try decoder.next())).sha256, String(repeating: "0f", count: 32))
    }

    func testOversizedAndUnknownFramesAreRefusedBeforeTheyAreBuffered() {
        var decoder = FrameDecoder()
        decoder.append(Data([Frame.Kind.manifest.rawValue, 0x7f, 0xff, 0xff, 0xff]))  // 2 GiB announced
        XCTAssertThrowsError(try decoder.next()) { XCTAssertTrue("\($0)".contains("limit"), "\($0)") }
        var chunkDecoder = FrameDecoder()
        chunkDecoder.append(Data([Frame.Kind.chunk.rawValue, 0x00, 0x20, 0x00, 0x00]))  // 2 MiB chunk
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
        longEnd.append(Data([Frame.Kind.fileEnd.rawValue, 0, 0, 0, 37]))  // a fileEnd is 36 bytes
        XCTAssertThrowsError(try longEnd.next()) { XCTAssertTrue("\($0)".contains("limit"), "\($0)") }
    }

    func testPathsThatWouldLeaveTheInboxOrCannotBeStoredAreRefused() {
        let refused: [(String, String)] = [
            ("", "empty"), ("/etc/passwd", "absolute"), ("../up", "\"..\""), ("a/../../b", "\"..\""),
            ("a/./b", "\".\""),
            ("a//b", "empty component"), ("a/", "empty component"), ("nul\u{0}byte", "control"),
            ("bell\u{7}", "control"),
            ("esc\u{1b}[31m", "control"), (String(repeating: "n", count: 256), "longer than 255"),
            (Array(repeating: "d", count: 65).joined(separator: "/"), "deeper"),
            (String(repeating: "abcdefgh/", count: 460) + "x", "longer than 4096"), ("x.peerxfer-part", "part"),
            ("victim\u{0600}.peerxfer-part", "part"),
            ("csi\u{9b}31m", "control"), ("del\u{7f}", "control"), ("invoice\u{202E}fdp.exe", "bidirectional"),
            ("report\u{3164}.pdf", "invisible"),
            ("rep\u{ad}ort.pdf", "invisible"), ("report.pdf\u{e0041}", "invisible"), ("zwj\u{200d}ok.txt", "invisible"),
            ("dir\u{2067}/x", "bidirectional"), ("mark\u{200F}", "bidirectional"),
            // A "/" followed by a combining mark is one character to Swift, and still a "/" to
            // the file system: out of the inbox through "..", or absolute.
            ("../\u{301}x/f", "\"..\""), ("/\u{301}etc/x", "absolute"), ("a/./\u{200D}b", "\".\""),
        ]
        for (path, why) in refused {
            XCTAssertThrowsError(try RelativePath(validating: path), path) { error in
                XCTAssertTrue("\(error)".contains(why), "\(path): \(error)")
                XCTAssertFalse(
                    "\(error)".unicodeScalars.contains { $0.value == 0x1b || $0.value == 0x9b || $0.value == 0x202e },
                    "the error must not carry raw escapes or overrides")
            }
        }
        for path in ["a", "ünï cödé/файл.txt", "a b/c..d/.hidden", String(repeating: "n", count: 255)] {
            XCTAssertNoThrow(try RelativePath(validating: path), path)
        }
        // Split where the file system splits, whatever follows the "/".
        let joined = try? RelativePath(validating: "d/\u{301}x/\u{308}b")
        XCTAssertEqual(joined?.components, ["d", "\u{301}x", "\u{308}b"])
        XCTAssertEqual(joined?.parent, ["d", "\u{301}x"])
        XCTAssertEqual(joined?.name, "\u{308}b")
        // A zero-width joiner there would be refused: beside ASCII it only hides.
        XCTAssertThrowsError(try RelativePath(validating: "d/\u{200D}b"))
    }

    func testADeepManifestWithDistinctFolderChainsIsChecked() throws {
        // 1,000 paths of 63 folders of 63 bytes each (4 MiB), every folder chain distinct: the
        // check numbers each folder once instead of rebuilding every prefix of every path.
        let entries = (0..<1_000).map { index -> ManifestEntry in
            let folders = (0..<63).map { level in
                String(format: "%05d", index) + String(repeating: "f", count: 56) + String(format: "%02d", level)
            }
            return ManifestEntry(
                path: folders.joined(separator: "/") + "/x", kind: .file, size: 1, mode: 0o644, modified: 0)
        }
        let manifest = Manifest(chunkSize: TransferLimits.chunkSize, entries: entries)
        XCTAssertEqual(try manifest.validate().count, 1_000)
        var clash = manifest
        clash.entries.append(
            ManifestEntry(
                path: entries[7].path.components(separatedBy: "/").prefix(30).joined(separator: "/"),
                kind: .file, size: 1, mode: 0o644, modified: 0))
        XCTAssertThrowsError(try clash.validate()) {
            XCTAssertTrue("\($0)".contains("as a file and as a folder"), "\($0)")
        }
    }

    func testManifestChecksDuplicatesAndFilesUnderFiles() throws {
        func manifest(_ entries: [ManifestEntry]) -> Manifest {
            Manifest(chunkSize: TransferLimits.chunkSize, entries: entries)
        }
        let file = { (path: String) in ManifestEntry(path: path, kind: .file, size: 1, mode: 0o644, modified: 0) }
        let folder = { (path: String) in ManifestEntry(path: path, kind: .directory, size: 0, mode: 0o755, modified: 0)
        }
        XCTAssertNoThrow(try manifest([folder("d"), file("d/x"), folder("d/empty")]).validate())
        XCTAssertThrowsError(try manifest([file("x"), file("x")]).validate()) {
            XCTAssertTrue("\($0)".contains("twice"), "\($0)")
        }
        XCTAssertThrowsError(try manifest([file("x"), file("x/y")]).validate()) {
            XCTAssertTrue("\($0)".contains("as a file and as a folder"), "\($0)")
        }
        XCTAssertThrowsError(try manifest([file("a/b/c/d"), file("a/b")]).validate()) {
            XCTAssertTrue("\($0)".contains("\"a/b\" is offered as a file and as a folder"), "\($0)")
        }
        XCTAssertNoThrow(
            try manifest([file("a/b-c"), file("a/b/c"), file("ab/c"), folder("a/b")]).validate(),
            "near names are not clashes")
        // Two spellings of "é" are one name as a person reads it: received in the composed
        // form (NFC), they are one path offered twice, or a file where a folder goes.
        XCTAssertThrowsError(try manifest([file("u\u{e9}/a.txt"), file("ue\u{301}/a.txt")]).validate()) {
            XCTAssertTrue("\($0)".contains("offered twice (perhaps spelt two ways"), "\($0)")
        }
        XCTAssertThrowsError(try manifest([file("u\u{e9}"), file("ue\u{301}/a.txt")]).validate()) {
            XCTAssertTrue("\($0)".contains("as a file and as a folder"), "\($0)")
        }
        let decomposed = try RelativePath(validating: "cafe\u{301}/re\u{301}sume\u{301}.txt")
        XCTAssertEqual(
            Array(decomposed.description.utf8), Array("caf\u{e9}/r\u{e9}sum\u{e9}.txt".utf8), "stored composed")
        XCTAssertEqual(decomposed.name.utf8.count, "r\u{e9}sum\u{e9}.txt".utf8.count)
        XCTAssertThrowsError(try manifest([file("u\u{e9}"), file("u\u{e9}/a.txt")]).validate())
        XCTAssertThrowsError(try Manifest(chunkSize: 4096, entries: [file("x")]).validate())
        // A file name the part file's sender tag and suffix would push past 255 bytes: refused
        // up front, with the limit, instead of failing after the answer; 216 bytes still fit.
        XCTAssertThrowsError(try manifest([file(String(repeating: "n", count: 217))]).validate()) {
            XCTAssertTrue("\($0)".contains("at most 216"), "\($0)")
        }
        XCTAssertNoThrow(try manifest([file(String(repeating: "n", count: 216))]).validate())
        // The part-file suffix in any ASCII case: one file to vfat, exFAT or a case-folding folder.
        XCTAssertThrowsError(try manifest([file("a.PeerXfer-Part")]).validate()) {
            XCTAssertTrue("\($0)".contains("keeps for files still arriving"), "\($0)")
        }
        XCTAssertNoThrow(
            try manifest([folder(String(repeating: "n", count: 255))]).validate(), "folders have no part file")
        let tooMany = (0...TransferLimits.maximumEntries).map { folder("d\($0)") }
        XCTAssertThrowsError(try manifest(tooMany).validate()) {
            XCTAssertTrue("\($0)".contains("entries offered"), "\($0)")
        }
    }

    func testNumberedNamesKeepTheExtensionAndTheLengthLimit() {
        XCTAssertEqual(PartFile.numbered("report.pdf", 1), "report (1).pdf")
        XCTAssertEqual(PartFile.numbered("archive.tar.gz", 2), "archive.tar (2).gz")
        XCTAssertEqual(PartFile.numbered(".bashrc", 3), ".bashrc (3)")
        XCTAssertEqual(PartFile.numbered("README", 4), "README (4)")
        let long = String(repeating: "é", count: 120) + ".txt"  // 244 bytes
        let numbered = PartFile.numbered(long, 12)
        XCTAssertLessThanOrEqual(numbered.utf8.count, 255)
        XCTAssertTrue(numbered.hasSuffix(" (12).txt"), numbered)
        // An extension too long to keep whole (the name is taken, so a number is due): cut,
        // never a crash, and always a valid name.
        let longExtension = "a." + String(repeating: "é", count: 126)  // 254 bytes
        let cut = PartFile.numbered(longExtension, 3)
        XCTAssertLessThanOrEqual(cut.utf8.count, TransferLimits.maximumNameBytes)
        XCTAssertTrue(cut.hasSuffix(" (3)"), cut)
        XCTAssertNoThrow(try RelativePath(validating: cut))
        let wide = String(repeating: "é", count: 127) + ".x"  // 256 bytes, multi-byte cut
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
        // Invisible letters and format characters: "Kitchen" with a Hangul filler, a soft
        // hyphen or a word joiner in it must not look like "Kitchen".
        XCTAssertEqual(Terminal.escape("Kit\u{3164}chen"), "Kit\\u{3164}chen")
        XCTAssertEqual(Terminal.escape("Kit\u{ad}chen"), "Kit\\u{00ad}chen")
        XCTAssertEqual(Terminal.escape("Kit\u{2060}chen\u{1d173}"), "Kit\\u{2060}chen\\u{1d173}")
        // Beside ASCII, or at an end, the joiners and emoji's selector only hide; so do tag
        // characters and other variation selectors anywhere.
        XCTAssertEqual(Terminal.escape("Kit\u{200d}chen"), "Kit\\u{200d}chen")
        XCTAssertEqual(Terminal.escape("Kitchen\u{200c}"), "Kitchen\\u{200c}")
        XCTAssertEqual(Terminal.escape("K\u{fe0f}itchen"), "K\\u{fe0f}itchen")
        XCTAssertEqual(Terminal.escape("Kitchen\u{e0041}\u{fe01}"), "Kitchen\\u{e0041}\\u{fe01}")
        // What real names need stays: the zero-width non-joiner (Persian), joiner and
        // variation selector (emoji), and a keycap's.
        XCTAssertEqual(Terminal.escape("Room 1\u{fe0f}\u{20e3}"), "Room 1\u{fe0f}\u{20e3}")
        XCTAssertEqual(Terminal.escape("می\u{200c}خواهم 👩\u{200d}💻 ❤\u{fe0f}"), "می\u{200c}خواهم 👩\u{200d}💻 ❤\u{fe0f}")
    }

    func testAPartFileIsTaggedWithTheSendersFirstHexDigits() {
        XCTAssertEqual(
            TransferLimits.partName(of: "x.bin", from: "ABCDEF0123456789abcdef0123456789"),
            "x.bin.abcdef0123456789abcdef01.peerxfer-part",
            "24 hex digits: 96 bits")
        XCTAssertEqual(TransferLimits.partName(of: "x.bin", from: "zz12-q3"), "x.bin.123.peerxfer-part")
        XCTAssertEqual(TransferLimits.partName(of: "x.bin", from: "k"), "x.bin.unknown.peerxfer-part")
    }

    func testPlainASCIINamesAreShownAsTheyAre() {
        XCTAssertEqual(Terminal.escape("small/d000/f00001.bin"), "small/d000/f00001.bin")
        XCTAssertEqual(Terminal.escape("a\u{7f}b"), "a\\x7fb")
        XCTAssertEqual(JSONLine.string("plain name.txt"), "\"plain name.txt\"")
        XCTAssertEqual(JSONLine.string("q\"b\\\u{7f}"), "\"q\\\"b\\\\\\u007f\"")
    }

    /// The hand-written JSON of the large and frequent messages reads back as what was sent,
    /// whatever their strings hold, and as what JSONEncoder's text reads back as.
    func testHandWrittenMessagesDecodeToWhatWasSent() throws {
        let odd = ["plain.txt", "q\"uote", "back\\slash", "new\nline", "ctl\u{01}\u{1f}\u{7f}", "ünï 😀 \u{202e}", ""]
        let results =
            odd.enumerated().map {
                FileResult(
                    index: $0.offset, verified: $0.offset % 2 == 0, storedAs: $0.element,
                    error: $0.offset % 3 == 0 ? nil : "failed: " + $0.element)
            }
            + [FileResult(index: Int.max, verified: true, storedAs: nil, error: nil)]
        let answer = Answer(
            accepted: [
                Answer.Entry(index: 0), Answer.Entry(index: 7, have: ["ab", "cd"]),
                Answer.Entry(index: 9, existing: "ef"),
            ], reason: odd[3])
        let noReason = Answer(accepted: [], reason: nil)
        let times: [Double] = [0, 1_732_545_600.123_456_7, -1.5, 1e-7, 1e16, 99_999_999_999.999]
        let manifest = Manifest(
            chunkSize: TransferLimits.chunkSize,
            entries: odd.enumerated().map {
                ManifestEntry(
                    path: $0.element, kind: $0.offset % 2 == 0 ? .file : .directory,
                    size: $0.offset == 0 ? UInt64.max : UInt64($0.offset),
                    mode: 0o644, modified: times[$0.offset % times.count])
            })
        func check<M: Codable & Equatable & HandWrittenJSON>(_ message: M, _ kind: Frame.Kind) throws {
            let frame = Frame.message(kind, message)
            XCTAssertEqual(frame.payload, Data(message.json.utf8), "the hand-written text is what goes out")
            XCTAssertEqual(try frame.decode(M.self), message)
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.sortedKeys]
            XCTAssertEqual(try JSONDecoder().decode(M.self, from: encoder.encode(message)), try frame.decode(M.self))
        }
        for result in results { try check(result, .fileResult) }
        try check(answer, .answer)
        try check(noReason, .answer)
        try check(manifest, .manifest)
    }

    /// The hand-read shapes are read without JSONDecoder, and whatever they accept JSONDecoder
    /// reads as the same value: hundreds of damaged messages, each read both ways.
    func testHandReadMessagesAgreeWithJSONDecoderEvenWhenDamaged() throws {
        let manifest = Manifest(
            chunkSize: TransferLimits.chunkSize,
            entries: [
                ManifestEntry(
                    path: "a/b c.txt", kind: .file, size: 1234, mode: 0o644, modified: 1_732_545_600.123_456_7),
                ManifestEntry(path: "ünï/😀", kind: .directory, size: 0, mode: 0o755, modified: -2.5e-7),
                ManifestEntry(path: "z", kind: .file, size: 0, mode: 0, modified: 0),
            ])
        let result = FileResult(index: 42, verified: true, storedAs: "a/b (1).txt", error: nil)
        let failed = FileResult(index: 7, verified: false, storedAs: nil, error: "its SHA-256 differs")
        let answer = Answer(
            accepted: [
                Answer.Entry(index: 0, have: [String(repeating: "ab", count: 32), String(repeating: "0f", count: 32)]),
                Answer.Entry(index: 2, existing: String(repeating: "9c", count: 32)),
                Answer.Entry(index: 3),
            ],
            reason: "the receiver declined 1 of 4 entries")
        XCTAssertEqual(Manifest.quickly(from: Data(manifest.json.utf8)), manifest, "read by hand")
        XCTAssertEqual(Answer.quickly(from: Data(answer.json.utf8)), answer)
        XCTAssertEqual(
            Answer.quickly(from: Data(Answer(accepted: [], reason: nil).json.utf8)), Answer(accepted: [], reason: nil))
        XCTAssertNil(Answer.quickly(from: Data(#"{"accepted":[],"reason":"a\nb"}"#.utf8)), "escapes go to JSONDecoder")
        XCTAssertEqual(
            Manifest.quickly(from: Data(Manifest(chunkSize: 5, entries: []).json.utf8)),
            Manifest(chunkSize: 5, entries: []))
        XCTAssertEqual(FileResult.quickly(from: Data(result.json.utf8)), result)
        XCTAssertEqual(FileResult.quickly(from: Data(failed.json.utf8)), failed)
        XCTAssertNil(
            FileResult.quickly(from: Data(#"{"index":1,"storedAs":"q\"x","verified":true}"#.utf8)),
            "escapes go to JSONDecoder")
        XCTAssertNil(FileResult.quickly(from: Data(#"{ "index":1,"verified":true}"#.utf8)), "so does whitespace")
        XCTAssertNil(FileResult.quickly(from: Data(#"{"index":01,"verified":true}"#.utf8)))

        XCTAssertNil(
            Manifest.quickly(
                from: Data(
                    #"{"chunkSize":1,"entries":[{"kind":"file","mode":0,"modified":1e-400,"path":"a","size":0}]}"#.utf8)
            ),
            "too small for a Double: JSONDecoder refuses it, so the hand reader leaves it to JSONDecoder")
        let zero = Data(
            #"{"chunkSize":1,"entries":[{"kind":"file","mode":0,"modified":0.0e-400,"path":"a","size":0}]}"#.utf8)
        XCTAssertNotNil(Manifest.quickly(from: zero))
        XCTAssertEqual(Manifest.quickly(from: zero), try JSONDecoder().decode(Manifest.self, from: zero))
        let seed = UInt64.random(in: 0...UInt64.max)
        var generator = SplitMix64(seed: seed)
        var acceptedDamaged = 0
        for sample in [
            Data(manifest.json.utf8), Data(result.json.utf8), Data(failed.json.utf8), Data(answer.json.utf8),
        ] {
            for _ in 0..<400 {
                var bytes = [UInt8](sample)
                for _ in 0..<Int.random(in: 1...3, using: &generator) {
                    let at = Int.random(in: 0..<bytes.count, using: &generator)
                    let byte = "0123456789-+.eE\"{}[],:\\ tfa\u{00}\u{ff}".utf8.randomElement(using: &generator)!
                    switch Int.random(in: 0..<3, using: &generator) {
                    case 0: bytes[at] = byte
                    case 1: bytes.insert(byte, at: at)
                    default: if bytes.count > 1 { bytes.remove(at: at) }
                    }
                }
                let damaged = Data(bytes)
                if let quick = Manifest.quickly(from: damaged) {
                    acceptedDamaged += 1
                    XCTAssertEqual(
                        try? JSONDecoder().decode(Manifest.self, from: damaged), quick,
                        "seed \(seed): " + String(decoding: damaged, as: UTF8.self))
                }
                if let quick = FileResult.quickly(from: damaged) {
                    acceptedDamaged += 1
                    XCTAssertEqual(
                        try? JSONDecoder().decode(FileResult.self, from: damaged), quick,
                        "seed \(seed): " + String(decoding: damaged, as: UTF8.self))
                }
                if let quick = Answer.quickly(from: damaged) {
                    acceptedDamaged += 1
                    XCTAssertEqual(
                        try? JSONDecoder().decode(Answer.self, from: damaged), quick,
                        "seed \(seed): " + String(decoding: damaged, as: UTF8.self))
                }
            }
        }
        // Some damage leaves a valid message (a digit for another): those are compared too.
        XCTAssertGreaterThan(acceptedDamaged, 0)
    }

    func testSHA256HasherMatchesKnownDigestsAcrossPieces() {
        XCTAssertEqual(
            SHA256Hasher.hash(Data()).hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
        let hasher = SHA256Hasher()
        hasher.update(Data("ab".utf8))
        hasher.update(Data("c".utf8))
        XCTAssertEqual(hasher.finish().hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        XCTAssertEqual(
            SHA256Digest(hex: "BA7816BF8F01CFEA414140DE5DAE2223B00361A396177A9CB410FF61F20015AD")?.hex,
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        XCTAssertNil(SHA256Digest(hex: "+a" + String(repeating: "0", count: 62)))
    }

    func testAFirstRunCutBetweenKeyAndCertificateGetsAWholeIdentityNextTime() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("px-half-\(UUID().uuidString)")
            .path
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let first = try TLSIdentity.loadOrCreate(directory: directory, commonName: "test")
        // As if the process died after writing the key and before the certificate.
        try FileManager.default.removeItem(atPath: first.certificateFile)
        let again = try TLSIdentity.loadOrCreate(directory: directory, commonName: "test")
        XCTAssertEqual(try TLSIdentity.publicKeySHA256(ofCertificateFile: again.certificateFile), again.publicKeySHA256)
    }

    func testIdentityIsMadeOnceWithAPrivateKeyFileAndAStableFingerprint() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
            "px-identity-\(UUID().uuidString)"
        ).path
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let first = try TLSIdentity.loadOrCreate(directory: directory, commonName: "test")
        let again = try TLSIdentity.loadOrCreate(directory: directory, commonName: "other")
        XCTAssertEqual(first.publicKeySHA256, again.publicKeySHA256)
        XCTAssertEqual(first.publicKeySHA256.count, 64)
        let keyMode = try FileManager.default.attributesOfItem(atPath: first.privateKeyFile)[.posixPermissions] as? Int
        XCTAssertEqual(keyMode, 0o600)
        // A key others can read is refused, with the command that fixes it.
        XCTAssertEqual(chmod(first.privateKeyFile, 0o644), 0)
        XCTAssertThrowsError(try TLSIdentity.loadOrCreate(directory: directory, commonName: "test")) { error in
            XCTAssertTrue("\(error)".contains("chmod 600 '\(first.privateKeyFile)'"), "\(error)")
        }
        XCTAssertEqual(chmod(first.privateKeyFile, 0o600), 0)
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
        XCTAssertThrowsError(
            try TLSIdentity(certificateFile: first.certificateFile, privateKeyFile: other.privateKeyFile))
    }
}

/// A small seeded generator (SplitMix64), so a failing run of a randomized test can be repeated
/// from the seed it prints.
struct SplitMix64: RandomNumberGenerator {
    private var state: UInt64

    init(seed: UInt64) { state = seed }

    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
