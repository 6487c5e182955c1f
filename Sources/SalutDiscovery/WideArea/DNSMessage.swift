/// A DNS message (RFC 1035 §4), as Salut sends and reads them for wide-area DNS-SD: queries,
/// and updates (RFC 2136, where the four sections are zone, prerequisites, updates and
/// additional data).
///
/// Encoding writes names uncompressed. Decoding reads whatever a server sends, compressed names
/// included, and treats every byte as hostile: every length is checked against what is left,
/// compression pointers may only point backwards (so they cannot loop), and anything malformed
/// is a ``DNSWireError``, never a crash.
struct DNSMessage: Sendable, Equatable {
    var id: UInt16
    /// QR, opcode, AA, TC, RD, RA, Z, rcode: the 16 bits after the ID.
    var flags: UInt16
    var questions: [DNSQuestion] = []
    var answers: [DNSRecord] = []
    var authorities: [DNSRecord] = []
    var additionals: [DNSRecord] = []

    /// Opcodes Salut uses.
    static let query: UInt16 = 0
    static let update: UInt16 = 5

    init(id: UInt16, opcode: UInt16, recursionDesired: Bool = false) {
        self.id = id
        flags = (opcode & 0xF) << 11 | (recursionDesired ? 0x0100 : 0)
    }

    var isResponse: Bool { flags & 0x8000 != 0 }
    var opcode: UInt16 { flags >> 11 & 0xF }
    var isTruncated: Bool { flags & 0x0200 != 0 }
    /// The response code: the header's 4 bits, extended by the 8 bits an EDNS(0) OPT record
    /// carries in the top of its TTL (RFC 6891 §6.1.3), as BADVERS (16) or BADCOOKIE (23) are.
    var rcode: UInt16 {
        let low = flags & 0xF
        guard let options = additionals.first(where: { $0.type == DNSType.options }) else { return low }
        return UInt16(options.ttl >> 24) << 4 | low
    }

    /// The wire form.
    func encoded() -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(512)
        out.appendUInt16(id)
        out.appendUInt16(flags)
        out.appendUInt16(UInt16(questions.count))
        out.appendUInt16(UInt16(answers.count))
        out.appendUInt16(UInt16(authorities.count))
        out.appendUInt16(UInt16(additionals.count))
        for question in questions { question.encode(into: &out) }
        for record in answers + authorities + additionals { record.encode(into: &out) }
        return out
    }

    /// Reads a message.
    /// - Throws: ``DNSWireError/malformed(_:)`` when the bytes are not a well-formed message.
    init(decoding bytes: [UInt8]) throws(DNSWireError) {
        var reader = DNSReader(bytes)
        id = try reader.uint16()
        flags = try reader.uint16()
        let counts = (try reader.uint16(), try reader.uint16(), try reader.uint16(), try reader.uint16())
        // Each question takes at least 5 bytes and each record 11: counts that cannot fit are
        // refused before anything is reserved for them.
        guard Int(counts.0) * 5 + (Int(counts.1) + Int(counts.2) + Int(counts.3)) * 11 <= reader.remaining else {
            throw .malformed("section counts larger than the message")
        }
        for _ in 0..<counts.0 {
            questions.append(
                DNSQuestion(name: try reader.name(), type: try reader.uint16(), questionClass: try reader.uint16()))
        }
        for _ in 0..<counts.1 { answers.append(try reader.record()) }
        for _ in 0..<counts.2 { authorities.append(try reader.record()) }
        for _ in 0..<counts.3 { additionals.append(try reader.record()) }
    }
}

/// A question (or, in an update, the zone).
struct DNSQuestion: Sendable, Equatable {
    var name: DNSName
    var type: UInt16
    var questionClass: UInt16 = DNSClass.internet

    func encode(into out: inout [UInt8]) {
        name.encode(into: &out)
        out.appendUInt16(type)
        out.appendUInt16(questionClass)
    }
}

/// A resource record. `data` is the RDATA as it is on the wire, except that names inside the
/// RDATA of records read from a message are expanded (so ``DNSRecord/target`` and friends can
/// read them without the message).
struct DNSRecord: Sendable, Equatable {
    var name: DNSName
    var type: UInt16
    var recordClass: UInt16 = DNSClass.internet
    var ttl: UInt32
    var data: [UInt8]

    func encode(into out: inout [UInt8]) {
        name.encode(into: &out)
        out.appendUInt16(type)
        out.appendUInt16(recordClass)
        out.appendUInt32(ttl)
        out.appendUInt16(UInt16(data.count))
        out += data
    }

    // MARK: Making records

    static func pointer(_ name: DNSName, to target: DNSName, ttl: UInt32) -> DNSRecord {
        var data: [UInt8] = []
        target.encode(into: &data)
        return DNSRecord(name: name, type: DNSType.pointer, ttl: ttl, data: data)
    }

    static func service(
        _ name: DNSName, priority: UInt16 = 0, weight: UInt16 = 0, port: UInt16, target: DNSName, ttl: UInt32
    ) -> DNSRecord {
        var data: [UInt8] = []
        data.appendUInt16(priority)
        data.appendUInt16(weight)
        data.appendUInt16(port)
        target.encode(into: &data)
        return DNSRecord(name: name, type: DNSType.service, ttl: ttl, data: data)
    }

    /// A TXT record from its strings (each at most 255 bytes; none gives the one empty string
    /// RFC 6763 §6.1 asks for).
    static func text(_ name: DNSName, strings: [[UInt8]], ttl: UInt32) -> DNSRecord {
        var data: [UInt8] = []
        for string in strings.isEmpty ? [[]] : strings {
            data.append(UInt8(min(string.count, 255)))
            data += string.prefix(255)
        }
        return DNSRecord(name: name, type: DNSType.text, ttl: ttl, data: data)
    }

    static func address(_ name: DNSName, bytes: [UInt8], ttl: UInt32) -> DNSRecord {
        DNSRecord(
            name: name, type: bytes.count == 16 ? DNSType.ipv6Address : DNSType.ipv4Address, ttl: ttl, data: bytes)
    }

    // MARK: Reading records

    /// The name a PTR, CNAME or NS record points to.
    var target: DNSName? {
        guard type == DNSType.pointer || type == DNSType.canonicalName || type == DNSType.nameServer else { return nil }
        var reader = DNSReader(data)
        return try? reader.name()
    }

    /// An SRV record's priority, weight, port and target.
    var service: (priority: UInt16, weight: UInt16, port: UInt16, target: DNSName)? {
        guard type == DNSType.service else { return nil }
        var reader = DNSReader(data)
        guard let priority = try? reader.uint16(), let weight = try? reader.uint16(), let port = try? reader.uint16(),
            let target = try? reader.name()
        else { return nil }
        return (priority, weight, port, target)
    }

    /// A TXT record's strings.
    var strings: [[UInt8]]? {
        guard type == DNSType.text else { return nil }
        return Self.strings(inTextData: data)
    }

    /// The length-prefixed strings of TXT data (RFC 1035 §3.3.14); nil when one runs past the end.
    static func strings(inTextData data: [UInt8]) -> [[UInt8]]? {
        var strings: [[UInt8]] = []
        var index = 0
        while index < data.count {
            let length = Int(data[index])
            guard index + 1 + length <= data.count else { return nil }
            strings.append(Array(data[index + 1..<index + 1 + length]))
            index += 1 + length
        }
        return strings
    }

    /// An SOA record's serial (which a server changes with every change to its zone).
    var serial: UInt32? {
        guard type == DNSType.startOfAuthority, data.count >= 20 else { return nil }
        return data[data.count - 20..<data.count - 16].reduce(0) { $0 << 8 | UInt32($1) }
    }

    /// An SOA record's primary server (MNAME).
    var primaryServer: DNSName? {
        guard type == DNSType.startOfAuthority else { return nil }
        var reader = DNSReader(data)
        return try? reader.name()
    }
}

/// Record types Salut reads or writes.
enum DNSType {
    static let ipv4Address: UInt16 = 1
    static let nameServer: UInt16 = 2
    static let canonicalName: UInt16 = 5
    static let startOfAuthority: UInt16 = 6
    static let pointer: UInt16 = 12
    static let text: UInt16 = 16
    static let ipv6Address: UInt16 = 28
    static let service: UInt16 = 33
    static let options: UInt16 = 41
    static let transactionSignature: UInt16 = 250
    static let any: UInt16 = 255
}

/// Classes: IN, and the two RFC 2136 gives meaning in updates.
enum DNSClass {
    static let internet: UInt16 = 1
    /// In a prerequisite, "not in use"; in an update, "delete this record".
    static let none: UInt16 = 254
    /// In a prerequisite, "in use"; in an update, "delete the whole set"; TSIG's class.
    static let any: UInt16 = 255
}

/// Response codes.
enum DNSResponseCode {
    static let noError: UInt16 = 0
    static let formatError: UInt16 = 1
    static let serverFailure: UInt16 = 2
    static let nameError: UInt16 = 3
    static let notImplemented: UInt16 = 4
    static let refused: UInt16 = 5
    static let nameExists: UInt16 = 6
    static let recordSetExists: UInt16 = 7
    static let recordSetMissing: UInt16 = 8
    static let notAuthoritative: UInt16 = 9
    static let notZone: UInt16 = 10
    static let badSignature: UInt16 = 16
    static let badKey: UInt16 = 17
    static let badTime: UInt16 = 18
    static let badCookie: UInt16 = 23

    /// The mnemonic of a message's response code (``DNSMessage/rcode``, OPT-extended), where 16
    /// is BADVERS; ``name(_:)`` names TSIG errors, where 16 is BADSIG.
    static func messageName(_ code: UInt16) -> String {
        code == 16 ? "BADVERS" : name(code)
    }

    /// The mnemonic RFCs and `dig` use (`REFUSED`, `NOTAUTH`, …).
    static func name(_ code: UInt16) -> String {
        switch code {
        case noError: "NOERROR"
        case formatError: "FORMERR"
        case serverFailure: "SERVFAIL"
        case nameError: "NXDOMAIN"
        case notImplemented: "NOTIMP"
        case refused: "REFUSED"
        case nameExists: "YXDOMAIN"
        case recordSetExists: "YXRRSET"
        case recordSetMissing: "NXRRSET"
        case notAuthoritative: "NOTAUTH"
        case notZone: "NOTZONE"
        case badSignature: "BADSIG"
        case badKey: "BADKEY"
        case badTime: "BADTIME"
        case badCookie: "BADCOOKIE"
        default: "RCODE\(code)"
        }
    }
}

/// What is wrong with a name or a message on the wire.
enum DNSWireError: Error, Equatable, CustomStringConvertible {
    case invalidName(String)
    case malformed(String)

    var description: String {
        switch self {
        case .invalidName(let why): "not a valid DNS name: \(why)"
        case .malformed(let why): "a malformed DNS message: \(why)"
        }
    }
}

/// Reads a message from the front, checking every length.
struct DNSReader {
    private let bytes: [UInt8]
    private(set) var offset = 0
    /// Labels and pointers followed so far in this message: bounded, so that a message of
    /// names that each walk a long chain of pointers (a few kilobytes can ask for a million
    /// steps) is refused rather than read.
    private var steps = 0
    /// A name follows at most this many pointers (a name has at most 127 labels; encoders
    /// point once or twice).
    static let pointersPerName = 64
    /// The labels and pointers one message may make the reader follow in all: 4 a byte, and
    /// 20,000 at least (a real answer takes under 1 a byte: a record's 2-byte owner pointer
    /// and its target's labels; a name bomb takes up to 64 pointers for each 2 bytes).
    let stepsAllowed: Int

    init(_ bytes: [UInt8]) {
        self.bytes = bytes
        stepsAllowed = max(20_000, 4 * bytes.count)
    }

    var remaining: Int { bytes.count - offset }

    mutating func uint8() throws(DNSWireError) -> UInt8 {
        guard offset < bytes.count else { throw .malformed("it ends early") }
        defer { offset += 1 }
        return bytes[offset]
    }

    mutating func uint16() throws(DNSWireError) -> UInt16 {
        UInt16(try uint8()) << 8 | UInt16(try uint8())
    }

    mutating func uint32() throws(DNSWireError) -> UInt32 {
        UInt32(try uint16()) << 16 | UInt32(try uint16())
    }

    mutating func take(_ count: Int) throws(DNSWireError) -> [UInt8] {
        guard count >= 0, count <= remaining else { throw .malformed("a length past its end") }
        defer { offset += count }
        return Array(bytes[offset..<offset + count])
    }

    /// A name, following compression pointers (each must point before the one that led to it,
    /// so a chain always ends).
    mutating func name() throws(DNSWireError) -> DNSName {
        var labels: [[UInt8]] = []
        var position = offset
        var resumeAt: Int?
        var limit = position  // a pointer must point before this
        var pointers = 0
        while true {
            guard position < bytes.count else { throw .malformed("a name runs past the end") }
            steps += 1
            guard steps <= stepsAllowed else { throw .malformed("names that take too many steps to read") }
            let length = Int(bytes[position])
            switch length & 0xC0 {
            case 0:
                if length == 0 {
                    offset = resumeAt ?? position + 1
                    return try DNSName(labels: labels)
                }
                guard position + 1 + length <= bytes.count else { throw .malformed("a label runs past the end") }
                labels.append(Array(bytes[position + 1...position + length]))
                guard labels.count <= 127 else { throw .malformed("a name of too many labels") }
                position += 1 + length
            case 0xC0:
                guard position + 1 < bytes.count else { throw .malformed("a pointer runs past the end") }
                let target = (length & 0x3F) << 8 | Int(bytes[position + 1])
                guard target < limit else { throw .malformed("a compression pointer that does not point backwards") }
                if resumeAt == nil { resumeAt = position + 2 }
                pointers += 1
                guard pointers <= Self.pointersPerName else { throw .malformed("a name of too many pointers") }
                limit = target
                position = target
            default:
                throw .malformed("an unknown label type")
            }
        }
    }

    /// A resource record; names inside the RDATA of PTR, CNAME, NS, SRV and SOA are expanded.
    mutating func record() throws(DNSWireError) -> DNSRecord {
        let name = try name()
        let type = try uint16()
        let recordClass = try uint16()
        let ttl = try uint32()
        let length = Int(try uint16())
        guard length <= remaining else { throw .malformed("record data past the end") }
        let end = offset + length
        var data: [UInt8]
        switch type {
        case DNSType.pointer, DNSType.canonicalName, DNSType.nameServer:
            data = []
            try self.name().encode(into: &data)
        case DNSType.service:
            data = try take(6)
            try self.name().encode(into: &data)
        case DNSType.startOfAuthority:
            data = []
            try self.name().encode(into: &data)
            try self.name().encode(into: &data)
            data += try take(20)
        default:
            data = try take(length)
        }
        guard offset == end else { throw .malformed("record data of the wrong length") }
        return DNSRecord(name: name, type: type, recordClass: recordClass, ttl: ttl, data: data)
    }
}

extension Array where Element == UInt8 {
    mutating func appendUInt16(_ value: UInt16) {
        append(UInt8(value >> 8))
        append(UInt8(value & 0xFF))
    }

    mutating func appendUInt32(_ value: UInt32) {
        appendUInt16(UInt16(value >> 16))
        appendUInt16(UInt16(value & 0xFFFF))
    }
}
