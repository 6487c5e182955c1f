@testable import SalutDiscovery
import SalutStreams
import SalutTestSupport
import XCTest

/// DNS names, messages, TSIG and the updates of a service, without a server.
final class DNSWireTests: SalutTestCase {
    func testNamesKeepDotsAndSpacesInsideLabelsAndCompareWithoutCase() throws {
        let name = try DNSName(parsing: #"My\.Printer 2nd.\_http._tcp.Home.Arpa."#)
        XCTAssertEqual(
            name.labels.map { String(decoding: $0, as: UTF8.self) },
            ["My.Printer 2nd", "_http", "_tcp", "Home", "Arpa"])
        XCTAssertEqual(name.description, #"My\.Printer\0322nd._http._tcp.Home.Arpa."#, "as dig writes names")
        XCTAssertEqual(name, try DNSName(parsing: #"my\.printer 2ND._HTTP._tcp.home.arpa"#))
        XCTAssertEqual(try DNSName(parsing: #"a\032b\255.c"#).labels, [[0x61, 0x20, 0x62, 0xFF], [0x63]])
        XCTAssertEqual(try DNSName(labels: [[0x00, 0x0A, 0x5C]]).description, #"\000\010\\."#)
        XCTAssertTrue(try DNSName(parsing: "x.home.arpa").isWithin(try DNSName(parsing: "HOME.arpa.")))
        XCTAssertFalse(try DNSName(parsing: "home.arpa").isWithin(try DNSName(parsing: "x.home.arpa")))
        XCTAssertEqual(DNSName.root.description, ".")
    }

    func testNamesDNSCannotCarryAreRefused() {
        XCTAssertThrowsError(try DNSName(parsing: "a..b"))
        XCTAssertThrowsError(try DNSName(parsing: String(repeating: "x", count: 64) + ".arpa"))
        XCTAssertThrowsError(
            try DNSName(parsing: Array(repeating: String(repeating: "x", count: 63), count: 4).joined(separator: ".")))
        XCTAssertThrowsError(try DNSName(parsing: #"a\25"#))
        XCTAssertThrowsError(try DNSName(parsing: #"a\256"#))
        XCTAssertThrowsError(try DNSName(parsing: "trailing\\"))
    }

    func testAMessageReadsBackAsWritten() throws {
        var message = DNSMessage(id: 0xBEEF, opcode: DNSMessage.update)
        let zone = try DNSName(parsing: "home.arpa")
        message.questions = [DNSQuestion(name: zone, type: DNSType.startOfAuthority)]
        message.answers = [
            DNSRecord(
                name: try DNSName(parsing: "a.home.arpa"), type: DNSType.any, recordClass: DNSClass.none, ttl: 0,
                data: [])
        ]
        message.authorities = [
            .text(try DNSName(parsing: "a.home.arpa"), strings: [Array("k=v".utf8), []], ttl: 60),
            .service(
                try DNSName(parsing: "a.home.arpa"), port: 8080, target: try DNSName(parsing: "h.home.arpa"), ttl: 60),
        ]
        let read = try DNSMessage(decoding: message.encoded())
        XCTAssertEqual(read, message)
        XCTAssertEqual(read.opcode, DNSMessage.update)
        XCTAssertEqual(read.authorities[0].strings, [Array("k=v".utf8), []])
        XCTAssertEqual(read.authorities[1].service?.port, 8080)
        XCTAssertEqual(read.authorities[1].service?.target, try DNSName(parsing: "h.home.arpa"))
    }

    func testCompressedNamesAreFollowedBackwardsOnly() throws {
        // Header, one question `a.b.` at offset 12, one PTR answer whose owner points at it and
        // whose target is `c` + a pointer to `b.` (offset 14).
        var bytes: [UInt8] = [0, 1, 0x81, 0x80, 0, 1, 0, 1, 0, 0, 0, 0]
        bytes += [1, 0x61, 1, 0x62, 0, 0, 12, 0, 1]
        bytes += [0xC0, 12, 0, 12, 0, 1, 0, 0, 0, 60, 0, 4, 1, 0x63, 0xC0, 14]
        let message = try DNSMessage(decoding: bytes)
        XCTAssertEqual(message.answers.first?.name, try DNSName(parsing: "a.b"))
        XCTAssertEqual(message.answers.first?.target, try DNSName(parsing: "c.b"))

        var loop: [UInt8] = [0, 1, 0x81, 0x80, 0, 1, 0, 0, 0, 0, 0, 0]
        loop += [0xC0, 12, 0, 1, 0, 1]  // a name pointing at itself
        XCTAssertThrowsError(try DNSMessage(decoding: loop)) { XCTAssertTrue("\($0)".contains("backwards")) }
        var forward: [UInt8] = [0, 1, 0x81, 0x80, 0, 1, 0, 0, 0, 0, 0, 0]
        forward += [0xC0, 20, 0, 1, 0, 1, 0, 0, 1, 0x61, 0]
        XCTAssertThrowsError(try DNSMessage(decoding: forward))
    }

    func testHostileMessagesAreErrorsNotCrashes() {
        let header: [UInt8] = [0, 1, 0x81, 0x80]
        XCTAssertThrowsError(try DNSMessage(decoding: Array(header.prefix(3))))
        XCTAssertThrowsError(
            try DNSMessage(decoding: header + [0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF]),
            "counts far past the end")
        XCTAssertThrowsError(
            try DNSMessage(decoding: header + [0, 0, 0, 1, 0, 0, 0, 0] + [0, 0, 1, 0, 1, 0, 0, 0, 1, 0, 9, 1]),
            "RDATA past the end")
        XCTAssertThrowsError(
            try DNSMessage(decoding: header + [0, 1, 0, 0, 0, 0, 0, 0] + [0x40, 0, 1, 0, 1]), "an unknown label type")
        // Random bytes: whatever they are, decoding returns or throws.
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<2_000 {
            let bytes = (0..<Int.random(in: 0...80, using: &generator)).map { _ in
                UInt8.random(in: 0...255, using: &generator)
            }
            _ = try? DNSMessage(decoding: header + bytes)
        }
    }

    func testTSIGSignsAMessageAsRFC8945Says() throws {
        let key = try SalutTSIGKey(name: "salut-publisher", secret: Array("0123456789abcdef0123456789abcdef".utf8))
        var message = DNSMessage(id: 7, opcode: DNSMessage.update)
        message.questions = [DNSQuestion(name: try DNSName(parsing: "home.arpa"), type: DNSType.startOfAuthority)]
        let (bytes, mac) = TSIG(key: key).sign(message, at: 1_700_000_000)
        let (unsignedMessage, unsignedBytes, tsig) = try TSIG.split(bytes)
        XCTAssertEqual(unsignedMessage, message)
        XCTAssertEqual(unsignedBytes, message.encoded())
        let record = try XCTUnwrap(tsig)
        XCTAssertEqual(record.name, key.wireName)
        XCTAssertEqual(record.recordClass, DNSClass.any)
        let fields = try TSIGFields(record.data)
        XCTAssertEqual(fields.algorithm, TSIG.algorithm)
        XCTAssertEqual(fields.timeSigned, 1_700_000_000)
        XCTAssertEqual(fields.fudge, 300)
        XCTAssertEqual(fields.originalID, 7)
        XCTAssertEqual(fields.mac, mac)
        // The MAC covers the message and the TSIG variables (RFC 8945 §4.3.3), computed here by hand.
        var variables = Array("\u{0F}salut-publisher\u{00}".utf8)
        variables += [0, 255, 0, 0, 0, 0]
        variables += Array("\u{0B}hmac-sha256\u{00}".utf8)
        variables += [0, 0, 0x65, 0x53, 0xF1, 0x00, 0x01, 0x2C, 0, 0, 0, 0]
        XCTAssertEqual(mac, HMACSHA256.mac(key: key.secret, message: message.encoded() + variables))
    }

    func testHMACSHA256MatchesRFC4231() {
        // RFC 4231, test case 2.
        let mac = HMACSHA256.mac(key: Array("Jefe".utf8), message: Array("what do ya want for nothing?".utf8))
        XCTAssertEqual(
            mac.map { String(format: "%02x", $0) }.joined(),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843")
    }

    func testKeyFilesInBINDFormat() throws {
        let key = try SalutTSIGKey(
            parsing: """
                # made by tsig-keygen
                key "salut-publisher" {
                \talgorithm hmac-sha256; // the only one
                \tsecret "c2VjcmV0IGJ5dGVz";
                };
                """)
        XCTAssertEqual(key.name, "salut-publisher.")
        XCTAssertEqual(key.secret, Array("secret bytes".utf8))
        XCTAssertFalse("\(key)".contains("c2Vj"), "the secret is never printed")
        XCTAssertThrowsError(try SalutTSIGKey(parsing: #"key "k" { algorithm hmac-md5; secret "c2VjcmV0"; };"#)) {
            XCTAssertEqual(($0 as? DiscoveryError)?.code, .invalidKey)
            XCTAssertTrue("\($0)".contains("hmac-sha256"))
        }
        XCTAssertThrowsError(try SalutTSIGKey(parsing: #"key "k" { algorithm hmac-sha256; secret "not base64!"; };"#))
        XCTAssertThrowsError(try SalutTSIGKey(parsing: "nothing here"))
        // Two keys: which one would sign is a guess, so neither does.
        XCTAssertThrowsError(
            try SalutTSIGKey(
                parsing: #"""
                    key "first" { algorithm hmac-sha256; secret "c2VjcmV0"; };
                    key "second" { algorithm hmac-sha256; secret "c2VjcmV0"; };
                    """#)
        ) {
            XCTAssertTrue(
                "\($0)".contains("2 keys (first., second.)") || "\($0)".contains("2 keys (first, second)"), "\($0)")
        }
        XCTAssertThrowsError(try SalutTSIGKey(contentsOfFile: "/nonexistent/key")) {
            XCTAssertTrue("\($0)".contains("/nonexistent/key"))
        }
    }

    func testTheUpdatesOfAServiceHoldEveryRecordAndNothingElse() throws {
        let updates = try ServiceUpdates(
            name: "Lab Printer", type: "_ipp._tcp", subtypes: ["_universal"], zone: "home.arpa",
            host: "printer", addresses: [[198, 18, 0, 1]], port: 631, txt: [Array("rp=ipp".utf8)])
        let instance = try DNSName(parsing: #"Lab Printer._ipp._tcp.home.arpa"#)
        let register = updates.registration(id: 1)
        XCTAssertEqual(register.opcode, DNSMessage.update)
        XCTAssertEqual(
            register.questions, [DNSQuestion(name: try DNSName(parsing: "home.arpa"), type: DNSType.startOfAuthority)])
        XCTAssertEqual(
            register.answers,
            [DNSRecord(name: instance, type: DNSType.any, recordClass: DNSClass.none, ttl: 0, data: [])],
            "on condition that the name is not in use")
        let added = register.authorities
        XCTAssertEqual(
            added.map(\.type), [DNSType.pointer, DNSType.pointer, DNSType.service, DNSType.text, DNSType.ipv4Address])
        XCTAssertEqual(added[0].name, try DNSName(parsing: "_ipp._tcp.home.arpa"))
        XCTAssertEqual(added[0].target, instance)
        XCTAssertEqual(added[1].name, try DNSName(parsing: "_universal._sub._ipp._tcp.home.arpa"))
        XCTAssertEqual(added[2].service?.target, try DNSName(parsing: "printer.home.arpa"))
        XCTAssertEqual(added[2].service?.port, 631)
        XCTAssertEqual(added[4].data, [198, 18, 0, 1])
        let lease = try XCTUnwrap(register.additionals.first)
        XCTAssertEqual(lease.type, DNSType.options)
        XCTAssertEqual(lease.data, [0, 2, 0, 8, 0, 0, 0x0E, 0x10, 0, 0, 0x0E, 0x10], "Update Lease option: one hour")

        let remove = updates.removal(id: 2)
        XCTAssertTrue(remove.answers.isEmpty)
        XCTAssertEqual(
            remove.authorities.first,
            DNSRecord(name: instance, type: DNSType.any, recordClass: DNSClass.any, ttl: 0, data: []))
        XCTAssertTrue(
            remove.authorities.dropFirst().allSatisfy { $0.recordClass == DNSClass.none && $0.ttl == 0 },
            "only this service's PTRs, one record each")
        XCTAssertFalse(
            remove.authorities.contains { $0.type == DNSType.ipv4Address },
            "the host's addresses are the host's: they stay")
        XCTAssertEqual(
            try updates.renamed("Lab Printer (2)").instance,
            try DNSName(parsing: #"Lab Printer (2)._ipp._tcp.home.arpa"#))
    }

    func testAUnicastBrowseReportsChangesWaitsAtTheTTLAndOutlastsASilentServer() {
        var state = WideAreaBrowsing.StateMachine(type: "_http._tcp", domain: "home.arpa")
        func service(_ name: String) -> DiscoveredService {
            DiscoveredService(name: name, type: "_http._tcp", domain: "home.arpa")
        }
        func step(_ look: Result<(names: Set<UnicastBrowser.InstanceName>, ttl: UInt32), any Error>) -> String {
            switch state.looked(look) {
            case .report(let update, let ttl):
                return "report \(update.changes) \(update.services.count) \(update.isComplete) \(ttl)"
            case .wait(let ttl): return "wait \(ttl)"
            case .retry(let after): return "retry \(after)"
            case .fail(let error): return "fail \((error as? DiscoveryError)?.code.description ?? "?")"
            }
        }
        let silent = DiscoveryError.serverUnreachable("no answer")
        // A first look that fails ends the browse (nothing was ever listed).
        var fresh = WideAreaBrowsing.StateMachine(type: "_http._tcp", domain: "home.arpa")
        guard case .fail = fresh.looked(.failure(silent)) else {
            return XCTFail("the first failure must end the browse")
        }
        // The first look is reported even when empty; later ones only when something changed.
        XCTAssertEqual(step(.success(([], 30))), "report [] 0 true 30")
        XCTAssertEqual(step(.success((["A"], 30))), "report \([BrowseChange.added(service("A"))]) 1 true 30")
        XCTAssertEqual(step(.success((["A"], 20))), "wait 20")
        // Later failures keep the list and back off: 2, 4, 8 … 60 s.
        XCTAssertEqual(step(.failure(silent)), "retry 2.0 seconds")
        XCTAssertEqual(step(.failure(silent)), "retry 4.0 seconds")
        for _ in 0..<6 { _ = step(.failure(silent)) }
        XCTAssertEqual(step(.failure(silent)), "retry 60.0 seconds")
        XCTAssertEqual(
            step(.success((["B"], 10))),
            "report \([BrowseChange.added(service("B")), .removed(service("A"))]) 1 true 10")
        XCTAssertEqual(step(.failure(silent)), "retry 2.0 seconds", "a success resets the back-off")
    }

    func testAnOPTRecordExtendsTheResponseCode() throws {
        var answer = DNSMessage(id: 7, opcode: DNSMessage.update)
        answer.flags |= 0x8000
        XCTAssertEqual(answer.rcode, DNSResponseCode.noError)
        // EDNS(0): the OPT record's TTL carries the upper 8 bits of the code; 1 there is 16, BADVERS.
        answer.additionals = [DNSRecord(name: .root, type: DNSType.options, recordClass: 1232, ttl: 1 << 24, data: [])]
        let decoded = try DNSMessage(decoding: answer.encoded())
        XCTAssertEqual(decoded.rcode, 16)
        XCTAssertEqual(DNSResponseCode.messageName(decoded.rcode), "BADVERS")
        XCTAssertEqual(DNSResponseCode.name(16), "BADSIG", "in a TSIG record's error field, 16 is BADSIG")
    }

    func testBrowseChangesAreTheDifferenceOfTwoLooks() {
        let changes = UnicastBrowser.Changes(from: ["A", "B"], to: ["B", "C", "D"])
        XCTAssertEqual(changes.added, ["C", "D"])
        XCTAssertEqual(changes.removed, ["A"])
        XCTAssertEqual(UnicastBrowser.Changes(from: ["A"], to: ["A"]), UnicastBrowser.Changes(from: [], to: []))
        // A look-alike (a Kelvin sign for the K) is another name: listed, and gone, on its own.
        let twin = UnicastBrowser.Changes(from: ["Kitchen"], to: ["Kitchen", "\u{212a}itchen"])
        XCTAssertEqual(twin.added.map { Array($0.utf8) }, [Array("\u{212a}itchen".utf8)])
        XCTAssertEqual(UnicastBrowser.Changes(from: ["Kitchen", "\u{212a}itchen"], to: ["Kitchen"]).removed.count, 1)
        XCTAssertEqual(UnicastBrowser.pollInterval(ttl: 0), .seconds(1))
        XCTAssertEqual(UnicastBrowser.pollInterval(ttl: 120), .seconds(120))
        XCTAssertEqual(UnicastBrowser.pollInterval(ttl: 86_400), .seconds(3600))
    }

    func testTheLeaseAServerGrantsIsReadFromItsAnswer() {
        var answer = DNSMessage(id: 1, opcode: DNSMessage.update)
        XCTAssertNil(WideAreaPublisher.grantedLease(in: answer), "no OPT: nothing granted")
        // OPT with an unknown option (code 10, 2 bytes), then Update Lease 1800 s and key lease 3600 s.
        let options: [UInt8] = [0, 10, 0, 2, 0xAA, 0xBB, 0, 2, 0, 8, 0, 0, 0x07, 0x08, 0, 0, 0x0E, 0x10]
        answer.additionals = [DNSRecord(name: .root, type: DNSType.options, recordClass: 1232, ttl: 0, data: options)]
        XCTAssertEqual(WideAreaPublisher.grantedLease(in: answer), 1800)
        answer.additionals[0].data = [0, 2, 0, 8, 0, 0]  // cut short
        XCTAssertNil(WideAreaPublisher.grantedLease(in: answer))
    }

    /// A message of questions whose names point at the name before them: the question at
    /// `index` follows `index` pointers. `lastPointsAt` makes every question from there on
    /// point at that one's name instead (many long chains in one message).
    private func chained(_ count: Int, lastPointsAt: Int? = nil) -> [UInt8] {
        var bytes: [UInt8] = [0, 1, 0, 0, UInt8(count >> 8), UInt8(count & 0xFF), 0, 0, 0, 0, 0, 0]
        var starts: [Int] = []
        for index in 0..<count {
            starts.append(bytes.count)
            if index == 0 {
                bytes += [1, 0x61, 0]
            } else {
                let target = lastPointsAt.map { index > $0 ? starts[$0] : starts[index - 1] } ?? starts[index - 1]
                bytes += [0xC0 | UInt8(target >> 8), UInt8(target & 0xFF)]
            }
            bytes += [0, 33, 0, 1]
        }
        return bytes
    }

    func testPointerChainsAreBoundedPerNameAndPerMessage() throws {
        XCTAssertNoThrow(try DNSMessage(decoding: chained(DNSReader.pointersPerName + 1)), "64 pointers in a name")
        XCTAssertThrowsError(try DNSMessage(decoding: chained(DNSReader.pointersPerName + 2))) { error in
            XCTAssertTrue("\(error)".contains("too many pointers"), "\(error)")
        }
        // Many names of 64 pointers each: past the message's budget of steps, refused.
        let bomb = chained(400, lastPointsAt: DNSReader.pointersPerName - 1)
        XCTAssertThrowsError(try DNSMessage(decoding: bomb)) { error in
            XCTAssertTrue("\(error)".contains("too many steps"), "\(error)")
        }
        XCTAssertLessThan(bomb.count, 3_000, "a small message")
    }

    /// A large wide-area answer, compressed as servers compress (each owner a pointer to the
    /// first, each target an instance label and a pointer): 1,500 PTR records, about 40 KB,
    /// decode whole (more steps than the 20,000 of a small message, under 4 a byte).
    func testALargeCompressedAnswerIsStillRead() throws {
        let count = 1_500
        var bytes: [UInt8] = [0, 1, 0x84, 0, 0, 0, UInt8(count >> 8), UInt8(count & 0xFF), 0, 0, 0, 0]
        let owner = bytes.count
        for label in ["_http", "_tcp", "lab-a", "home", "example", "arpa"] {
            bytes.append(UInt8(label.utf8.count))
            bytes += Array(label.utf8)
        }
        bytes.append(0)
        for index in 0..<count {
            if index > 0 { bytes += [0xC0 | UInt8(owner >> 8), UInt8(owner & 0xFF)] }
            let instance = Array("instance\(index)".utf8)
            bytes += [0, 12, 0, 1, 0, 0, 0x11, 0x94, 0, UInt8(instance.count + 3)]
            bytes.append(UInt8(instance.count))
            bytes += instance
            bytes += [0xC0 | UInt8(owner >> 8), UInt8(owner & 0xFF)]
        }
        XCTAssertGreaterThan(bytes.count, 30_000)
        let message = try DNSMessage(decoding: bytes)
        XCTAssertEqual(message.answers.count, count)
        XCTAssertEqual(
            message.answers.last?.target, try DNSName(parsing: "instance1499._http._tcp.lab-a.home.example.arpa"))
    }
}
