import CAvahi
import Foundation
import SalutDiscovery

/// Properties of ``TXTRecord``, checked on any input twice: once read as TXT wire data, once as a
/// program of edits.
///
/// As wire data: the strict and lenient parsers agree with an independent reading of RFC 6763
/// §6 (framing, then `key[=value]` with a non-empty printable-ASCII key, first of a repeated key
/// wins); the lenient parser never fails and what it returns re-encodes to data both parsers
/// read back unchanged; a strict parse that succeeds re-encodes to the input byte for byte,
/// except as documented (a lone zero byte is the empty record; a repeated key is dropped).
///
/// As a program: `set`, `remove`, lookups and `init(data:)` behave as a model (an array of
/// entries) says, each rejected edit is exactly one the rules reject, and the built record
/// survives its wire encoding, both parsers and Avahi's string list unchanged.
public enum TXTRecordChecks {
    /// Runs both readings of `input`.
    public static func check(_ input: [UInt8]) throws(PropertyViolation) {
        try checkParsing(input)
        try checkBuilding(input)
    }

    // MARK: Parsing

    static func checkParsing(_ input: [UInt8]) throws(PropertyViolation) {
        let data = Data(input)
        let reference = Reference(input)

        let lenient = TXTRecord(parsingLeniently: data)
        try require(
            lenient.entries.map(Attribute.init) == reference.lenientAttributes,
            "lenient parse \(lenient.entries.map(Attribute.init)) differs from the reference \(reference.lenientAttributes)"
        )
        try checkSurvivesEncoding(lenient, "the lenient parse")

        let strict: TXTRecord?
        do { strict = try TXTRecord(parsing: data) } catch { strict = nil }
        try require(
            (strict != nil) == reference.isWellFormed,
            "strict parse \(strict == nil ? "failed" : "succeeded") on \(reference.isWellFormed ? "well-formed" : "malformed") data"
        )
        guard let strict else { return }
        try require(
            strict == lenient, "strict parse \(strict) differs from lenient parse \(lenient) of well-formed data")
        // Byte for byte, unless the input is the lone zero byte (the empty record) or repeats a key.
        let documentedChange = input == [0] || reference.strings.count != strict.entries.count
        try require(
            documentedChange || strict.data == data,
            "strict parse re-encodes to \(Array(strict.data)), not the input \(input)")
    }

    /// A record's encoding parses back (strictly and leniently) to the same record and the same
    /// bytes, and Avahi's string list of it reads back the same.
    static func checkSurvivesEncoding(_ record: TXTRecord, _ what: String) throws(PropertyViolation) {
        let data = record.data
        let again: TXTRecord
        do { again = try TXTRecord(parsing: data) } catch {
            throw PropertyViolation(
                "\(what) \(record) encodes to \(Array(data)), which the strict parser refuses: \(error)")
        }
        try require(again == record, "\(what) \(record) re-parses strictly as \(again)")
        try require(again.data == data, "\(what) \(record) re-encodes differently")
        try require(TXTRecord(parsingLeniently: data) == record, "\(what) \(record) re-parses leniently differently")
        // `stringList` traps if Avahi refuses the record. Its list holds the attributes last
        // first (the order Avahi publishes in wire order); a resolver's list, which `txtRecord`
        // reads, holds them first first.
        let list = avahi_string_list_reverse(AvahiValues.stringList(record))
        defer { avahi_string_list_free(list) }
        let fromAvahi = AvahiValues.txtRecord(list)
        try require(fromAvahi == record, "\(what) \(record) comes back from Avahi's string list as \(fromAvahi)")
        _ = record.description
        try require(
            record.dictionary.count == record.entries.count, "\(what) \(record) has keys that collide in `dictionary`")
    }

    // MARK: Building

    /// Edits a record as the input says and checks it against a model after every step.
    static func checkBuilding(_ input: [UInt8]) throws(PropertyViolation) {
        var reader = ByteReader(input)
        var record = TXTRecord()
        var model: [Attribute] = []
        while !reader.isAtEnd {
            switch reader.byte() % 4 {
            case 0:
                let (key, value) = keyAndValue(&reader)
                let expected = Attribute.validity(key: key, value: value)
                do {
                    try record.set(key, to: value)
                    try require(
                        expected == nil,
                        "set(\(key.debugDescription), \(describe(value))) succeeded; expected: \(expected ?? "")")
                    let attribute = Attribute(key: Array(key.utf8), value: value.map(Array.init))
                    if let index = model.firstIndex(where: { Attribute.sameKey($0.key, attribute.key) }) {
                        model[index] = attribute
                    } else {
                        model.append(attribute)
                    }
                } catch let error as PropertyViolation {
                    throw error
                } catch {
                    try require(
                        expected != nil,
                        "set(\(key.debugDescription), \(describe(value))) threw \(error) for a valid attribute")
                }
            case 1:
                let key = string(reader.bytes(Int(reader.byte() % 32)))
                record.remove(key)
                model.removeAll { Attribute.sameKey($0.key, Array(key.utf8)) }
            case 2:
                let key = string(reader.bytes(Int(reader.byte() % 32)))
                let found = model.first { Attribute.sameKey($0.key, Array(key.utf8)) }
                try require(
                    record.contains(key) == (found != nil),
                    "contains(\(key.debugDescription)) is \(record.contains(key)) in \(record)")
                try require(
                    record[key].map(Array.init) == found?.value,
                    "record[\(key.debugDescription)] is \(describe(record[key])) in \(record)")
                let text = found?.value.flatMap { String(validating: $0, as: UTF8.self) }
                try require(
                    record.string(for: key) == text, "string(for: \(key.debugDescription)) is wrong in \(record)")
            default:
                try checkDictionaryInit(&reader)
            }
            try require(
                record.entries.map(Attribute.init) == model,
                "record \(record.entries.map(Attribute.init)) differs from the model \(model)")
        }
        try checkSurvivesEncoding(record, "the built record")
    }

    /// `init(data:)` from up to four attributes: the same as adding them in key order, and
    /// throws exactly when one of them is invalid or two keys differ only in ASCII case (TXT
    /// keys are case-insensitive, so such a dictionary names one key twice).
    static func checkDictionaryInit(_ reader: inout ByteReader) throws(PropertyViolation) {
        var attributes: [String: Data?] = [:]
        for _ in 0..<Int(reader.byte() % 5) {
            let (key, value) = keyAndValue(&reader)
            attributes[key] = value
        }
        var expected = TXTRecord()
        var valid = true
        for key in attributes.keys.sorted() {
            do { try expected.set(key, to: attributes[key]!) } catch { valid = false }
        }
        let folded = Set(
            attributes.keys.map {
                String($0.unicodeScalars.map { $0.isASCII ? Character($0).lowercased() : String($0) }.joined())
            })
        if folded.count < attributes.count { valid = false }
        do {
            let record = try TXTRecord(data: attributes)
            try require(
                valid && record == expected,
                "init(data:) gave \(record); setting in key order gives \(valid ? "\(expected)" : "an error")")
        } catch let error as PropertyViolation {
            throw error
        } catch {
            try require(!valid, "init(data:) threw \(error) though every attribute is valid")
        }
    }

    /// A key (up to 31 bytes, any bytes, decoded as UTF-8) and a value (nil, or up to 255 bytes).
    static func keyAndValue(_ reader: inout ByteReader) -> (String, Data?) {
        let key = string(reader.bytes(Int(reader.byte() % 32)))
        let length = reader.byte()
        let value = length == 0xFF ? nil : Data(reader.bytes(Int(length)))
        return (key, value)
    }

    static func string(_ bytes: [UInt8]) -> String { String(decoding: bytes, as: UTF8.self) }

    static func describe(_ value: Data?) -> String { value.map { "\(Array($0))" } ?? "nil" }

    // MARK: The reference

    /// One attribute as bytes, for comparisons that do not go through `TXTRecord`'s own code.
    struct Attribute: Equatable, CustomStringConvertible {
        var key: [UInt8]
        var value: [UInt8]?

        init(key: [UInt8], value: [UInt8]?) {
            self.key = key
            self.value = value
        }

        init(_ entry: TXTRecord.Entry) {
            self.init(key: Array(entry.key.utf8), value: entry.value.map(Array.init))
        }

        /// RFC 6763 §6.4: keys compare ignoring ASCII case.
        static func sameKey(_ a: [UInt8], _ b: [UInt8]) -> Bool {
            a.count == b.count && zip(a, b).allSatisfy { lower($0) == lower($1) }
        }

        static func lower(_ byte: UInt8) -> UInt8 { (0x41...0x5A).contains(byte) ? byte + 0x20 : byte }

        /// Why `set` must refuse this attribute, or nil when it must take it.
        static func validity(key: String, value: Data?) -> String? {
            let bytes = Array(key.utf8)
            if bytes.isEmpty { return "an empty key" }
            if bytes.contains(UInt8(ascii: "=")) { return "a key with '='" }
            if !bytes.allSatisfy({ (0x20...0x7E).contains($0) }) { return "a key that is not printable ASCII" }
            if bytes.count + (value.map { $0.count + 1 } ?? 0) > 255 { return "an attribute over 255 bytes" }
            return nil
        }

        var description: String {
            let key = String(decoding: self.key, as: UTF8.self).debugDescription
            return value.map { "\(key)=\($0)" } ?? key
        }
    }

    /// An independent reading of TXT wire data.
    struct Reference {
        /// The length-prefixed strings, up to the first that runs past the end.
        var strings: [[UInt8]] = []
        /// Whether a string runs past the end.
        var overruns = false
        /// What the lenient parser must return: the valid attributes, first of each key.
        var lenientAttributes: [Attribute] = []
        /// Whether the strict parser must accept the data.
        var isWellFormed: Bool

        init(_ bytes: [UInt8]) {
            var index = 0
            while index < bytes.count {
                let length = Int(bytes[index])
                guard index + 1 + length <= bytes.count else { overruns = true; break }
                strings.append(Array(bytes[index + 1..<index + 1 + length]))
                index += 1 + length
            }
            let parsed = strings.map(Self.attribute)
            for case let attribute? in parsed
            where !lenientAttributes.contains(where: { Attribute.sameKey($0.key, attribute.key) }) {
                lenientAttributes.append(attribute)
            }
            isWellFormed = bytes == [0] || (!overruns && !parsed.contains(nil))
        }

        /// One string as an attribute, or nil when it is empty or its key is empty or not
        /// printable ASCII.
        static func attribute(_ string: [UInt8]) -> Attribute? {
            let equals = string.firstIndex(of: UInt8(ascii: "="))
            let key = Array(string[..<(equals ?? string.endIndex)])
            guard !key.isEmpty, key.allSatisfy({ (0x20...0x7E).contains($0) }) else { return nil }
            return Attribute(key: key, value: equals.map { Array(string[($0 + 1)...]) })
        }
    }
}
