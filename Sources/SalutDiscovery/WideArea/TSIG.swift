import SalutStreams

/// Signs DNS messages and checks signed answers with a TSIG key (RFC 8945, `hmac-sha256`).
///
/// A request's MAC covers the message as sent (before the TSIG record is added) and the TSIG
/// variables; an answer's MAC also covers the request's MAC, so an answer cannot be replayed
/// for another request. Time is an argument, so tests sign at a fixed instant.
struct TSIG {
    let key: SalutTSIGKey
    /// How far apart the two clocks may be (RFC 8945 recommends 300 s).
    var fudge: UInt16 = 300

    static let algorithm = try! DNSName(parsing: "hmac-sha256.")

    /// `message` on the wire with a TSIG record appended, and the MAC (to check the answer with).
    func sign(_ message: DNSMessage, at time: UInt64) -> (bytes: [UInt8], mac: [UInt8]) {
        let unsigned = message.encoded()
        let variables = self.variables(time: time, error: 0, other: [])
        let mac = HMACSHA256.mac(key: key.secret, message: unsigned + variables)
        var signed = message
        signed.additionals.append(record(time: time, mac: mac, originalID: message.id))
        return (signed.encoded(), mac)
    }

    /// Checks a signed answer to the request whose MAC was `requestMAC`, and returns it without
    /// its TSIG record.
    /// - Throws: ``TSIGFailure`` when the answer is unsigned, signed with another key, or its
    ///   MAC or time is wrong; ``DNSWireError`` when it is malformed.
    func verify(answer bytes: [UInt8], requestMAC: [UInt8], at now: UInt64) throws -> DNSMessage {
        let (message, unsignedBytes, tsig) = try Self.split(bytes)
        guard let tsig else { throw TSIGFailure.unsigned(rcode: message.rcode) }
        let fields = try TSIGFields(tsig.data)
        guard tsig.name == key.wireName else { throw TSIGFailure.otherKey(tsig.name.description) }
        // An answer whose TSIG carries an error (BADSIG, BADKEY, BADTIME) is the server refusing
        // our signature; such answers are unsigned (MAC size 0).
        guard fields.error == 0 else { throw TSIGFailure.refusedByServer(fields.error) }
        guard fields.algorithm == Self.algorithm else { throw TSIGFailure.otherKey("algorithm \(fields.algorithm)") }
        var covered: [UInt8] = []
        covered.appendUInt16(UInt16(requestMAC.count))
        covered += requestMAC
        // The MAC covers the message with the original ID and without the TSIG record.
        var original = unsignedBytes
        original[0] = UInt8(fields.originalID >> 8)
        original[1] = UInt8(fields.originalID & 0xFF)
        covered += original
        covered += variables(time: fields.timeSigned, error: fields.error, other: fields.other)
        let expected = HMACSHA256.mac(key: key.secret, message: covered)
        guard fields.mac.count == expected.count, Self.constantTimeEqual(fields.mac, expected) else {
            throw TSIGFailure.badMAC
        }
        let skew = now > fields.timeSigned ? now - fields.timeSigned : fields.timeSigned - now
        guard skew <= UInt64(fields.fudge) else { throw TSIGFailure.badTime(skew: skew) }
        return message
    }

    /// The message decoded, its bytes without a final TSIG record (ARCOUNT lowered), and that
    /// record if there was one.
    static func split(_ bytes: [UInt8]) throws(DNSWireError) -> (DNSMessage, [UInt8], DNSRecord?) {
        var message = try DNSMessage(decoding: bytes)
        guard let last = message.additionals.last, last.type == DNSType.transactionSignature else {
            return (message, bytes, nil)
        }
        message.additionals.removeLast()
        // Find where the last record starts: walk the message again.
        var reader = DNSReader(bytes)
        _ = try reader.take(12)
        for _ in message.questions { _ = try reader.name(); _ = try reader.take(4) }
        for _ in 0..<message.answers.count + message.authorities.count + message.additionals.count {
            _ = try reader.record()
        }
        var unsigned = Array(bytes[..<reader.offset])
        let count = UInt16(message.additionals.count)
        unsigned[10] = UInt8(count >> 8)
        unsigned[11] = UInt8(count & 0xFF)
        return (message, unsigned, last)
    }

    private func record(time: UInt64, mac: [UInt8], originalID: UInt16) -> DNSRecord {
        var data: [UInt8] = []
        Self.algorithm.encode(into: &data)
        data += Self.time48(time)
        data.appendUInt16(fudge)
        data.appendUInt16(UInt16(mac.count))
        data += mac
        data.appendUInt16(originalID)
        data.appendUInt16(0)  // error
        data.appendUInt16(0)  // other length
        return DNSRecord(
            name: key.wireName, type: DNSType.transactionSignature, recordClass: DNSClass.any, ttl: 0, data: data)
    }

    /// The TSIG variables the MAC covers (RFC 8945 §4.3.3).
    private func variables(time: UInt64, error: UInt16, other: [UInt8]) -> [UInt8] {
        var out = key.wireName.canonicalWire
        out.appendUInt16(DNSClass.any)
        out.appendUInt32(0)
        out += Self.algorithm.canonicalWire
        out += Self.time48(time)
        out.appendUInt16(fudge)
        out.appendUInt16(error)
        out.appendUInt16(UInt16(other.count))
        out += other
        return out
    }

    private static func time48(_ time: UInt64) -> [UInt8] {
        (0..<6).reversed().map { UInt8(truncatingIfNeeded: time >> (8 * UInt64($0))) }
    }

    private static func constantTimeEqual(_ a: [UInt8], _ b: [UInt8]) -> Bool {
        zip(a, b).reduce(0) { $0 | ($1.0 ^ $1.1) } == 0
    }
}

/// The fields of a TSIG record's data.
struct TSIGFields {
    let algorithm: DNSName
    let timeSigned: UInt64
    let fudge: UInt16
    let mac: [UInt8]
    let originalID: UInt16
    let error: UInt16
    let other: [UInt8]

    init(_ data: [UInt8]) throws(DNSWireError) {
        var reader = DNSReader(data)
        algorithm = try reader.name()
        let high = UInt64(try reader.uint16()), low = UInt64(try reader.uint32())
        timeSigned = high << 32 | low
        fudge = try reader.uint16()
        mac = try reader.take(Int(try reader.uint16()))
        originalID = try reader.uint16()
        error = try reader.uint16()
        other = try reader.take(Int(try reader.uint16()))
    }
}

/// Why a signed answer was not accepted.
enum TSIGFailure: Error, Equatable {
    /// The answer carries no signature (the header's response code is given).
    case unsigned(rcode: UInt16)
    /// Signed with another key or algorithm.
    case otherKey(String)
    /// The server refused our signature: BADSIG, BADKEY or BADTIME.
    case refusedByServer(UInt16)
    /// The answer's MAC is wrong.
    case badMAC
    /// The answer was signed too far from our clock.
    case badTime(skew: UInt64)
}
