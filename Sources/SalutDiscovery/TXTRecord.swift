import Foundation

/// A DNS-SD TXT record: an ordered list of `key=value` attributes (RFC 6763 §6).
///
/// Keys are printable ASCII without `=` and case-insensitive in ASCII (RFC 6763 §6.4): `Path` and `path`
/// name the same attribute, so a record holds each key once whatever its case. ``set(_:to:)``
/// replaces an attribute whose key differs only in case, ``add(_:_:)`` refuses it, and
/// lookups ignore case. Values are raw bytes. A key with no `=` at all is a boolean attribute
/// (`value == nil`); `key=` has an empty value. Each encoded attribute is at most 255 bytes.
/// Building a record validates every entry and throws ``DiscoveryError/invalidTXTRecord(reason:)``;
/// decoding data from the network never throws in the lenient form (``init(parsingLeniently:)``),
/// skipping what is malformed.
///
/// Size: a record of any size up to 65,535 bytes can be built and parsed, but publishing checks
/// the whole record against ``maximumPublishedSize`` (what one mDNS packet can carry); RFC 6763
/// §6.2 recommends staying under ``recommendedMaximumSize``.
public struct TXTRecord: Sendable, Hashable, CustomStringConvertible {
    /// The largest record, in wire bytes (``size``), that Salut publishes: 8,800 bytes.
    ///
    /// An mDNS packet, IP and UDP headers included, is at most 9,000 bytes (RFC 6762 §17), and
    /// the TXT record must share it with an IPv6 and UDP header (48 bytes), the DNS header (12),
    /// the record's own name (up to 93 bytes for a 63-byte instance name in `local`) and its
    /// type, class, TTL and length (10). Larger records are refused with
    /// ``DiscoveryError/invalidTXTRecord(reason:)`` rather than published where peers cannot
    /// receive them.
    public static let maximumPublishedSize = 8_800

    /// The size RFC 6763 §6.2 advises staying under (1,300 bytes), so that the record fits in
    /// one Ethernet packet with the service's other records. Larger records work on most
    /// networks but are not recommended.
    public static let recommendedMaximumSize = 1_300

    /// One attribute.
    public struct Entry: Sendable, Hashable {
        /// The key as written (lookups ignore case).
        public var key: String
        /// The value bytes; nil for a boolean attribute written without `=`.
        public var value: Data?
    }

    /// The attributes, in order. Keys are unique (ignoring case).
    public private(set) var entries: [Entry] = []

    /// An empty record.
    public init() {}

    /// A record from string values, in key order. Throws when a key or value does not fit, or
    /// when two keys differ only in case (`a` and `A`: keys are case-insensitive).
    public init(_ attributes: [String: String]) throws {
        for key in attributes.keys.sorted() {
            try add(key, Data(attributes[key]!.utf8))
        }
    }

    /// A record from raw values (nil value: boolean attribute), in key order. Throws as
    /// ``init(_:)``.
    public init(data attributes: [String: Data?]) throws {
        for key in attributes.keys.sorted() {
            try add(key, attributes[key]!)
        }
    }

    /// Decodes wire-format TXT data strictly: throws on a zero-length or overlong string, a
    /// string that runs past the end, an empty key, or a key that is not printable ASCII.
    /// Empty data, or a single zero byte (the usual encoding of an empty record), is an empty record.
    public init(parsing data: Data) throws {
        let bytes = [UInt8](data)
        if bytes == [0] { return }
        var index = 0
        while index < bytes.count {
            let length = Int(bytes[index])
            index += 1
            guard length > 0 else {
                throw DiscoveryError.invalidTXTRecord(reason: "zero-length string at byte \(index - 1)")
            }
            guard index + length <= bytes.count else {
                throw DiscoveryError.invalidTXTRecord(reason: "string at byte \(index - 1) runs past the end")
            }
            let entry = try Self.decode(bytes[index..<index + length])
            index += length
            if !contains(entry.key) { entries.append(entry) }
        }
    }

    /// Decodes wire-format TXT data from the network without throwing: zero-length strings and
    /// invalid attributes are skipped, a string running past the end ends the record, and the
    /// first of two attributes with the same key wins (RFC 6763 §6.4).
    public init(parsingLeniently data: Data) {
        let bytes = [UInt8](data)
        var index = 0
        while index < bytes.count {
            let length = Int(bytes[index])
            index += 1
            guard index + length <= bytes.count else { break }
            defer { index += length }
            guard length > 0, let entry = try? Self.decode(bytes[index..<index + length]) else { continue }
            if !contains(entry.key) { entries.append(entry) }
        }
    }

    /// The value for `key` (any case): nil when absent or boolean; check ``contains(_:)`` to tell.
    public subscript(key: String) -> Data? {
        entries.first { Self.sameKey($0.key, key) }?.value
    }

    /// Whether the record has `key` (any case), with or without a value.
    public func contains(_ key: String) -> Bool {
        entries.contains { Self.sameKey($0.key, key) }
    }

    /// The value for `key` as UTF-8 text, or nil when absent, boolean, or not UTF-8. Every byte
    /// counts: a leading byte-order mark stays (`String(data:encoding:)` would drop it).
    public func string(for key: String) -> String? {
        self[key].flatMap { String(validating: $0, as: UTF8.self) }
    }

    /// Sets an attribute: replaces, in place, the one whose key equals `key` ignoring case (the
    /// record then spells the key as `key` does), or else appends it.
    /// - Throws: ``DiscoveryError/invalidTXTRecord(reason:)`` for an empty key, a key holding
    ///   `=` or non-printable-ASCII characters, or an attribute over 255 bytes.
    public mutating func set(_ key: String, to value: Data?) throws {
        try Self.validate(key: key, value: value)
        let entry = Entry(key: key, value: value)
        if let index = entries.firstIndex(where: { Self.sameKey($0.key, key) }) {
            entries[index] = entry
        } else {
            entries.append(entry)
        }
    }

    /// Appends an attribute whose key is not in the record yet, in any case.
    /// - Throws: ``DiscoveryError/invalidTXTRecord(reason:)`` when the record already has `key`
    ///   or a key that differs from it only in case (the reason names both), and for a key or
    ///   value that does not fit, as ``set(_:to:)``.
    public mutating func add(_ key: String, _ value: Data?) throws {
        try Self.validate(key: key, value: value)
        if let existing = entries.first(where: { Self.sameKey($0.key, key) }) {
            throw DiscoveryError.invalidTXTRecord(
                reason: existing.key == key
                    ? "key \"\(key)\" appears twice"
                    : "keys \"\(existing.key)\" and \"\(key)\" are the same key (TXT keys are case-insensitive, RFC 6763 §6.4)"
            )
        }
        entries.append(Entry(key: key, value: value))
    }

    /// Checks that the record can be published: at most ``maximumPublishedSize`` bytes in all.
    /// Publishing (``ServiceAdvertisement``, ``NetService``) makes this check itself.
    /// - Throws: ``DiscoveryError/invalidTXTRecord(reason:)`` naming the size and the limit.
    public func validateForPublishing() throws {
        let size = self.size
        guard size <= Self.maximumPublishedSize else {
            throw DiscoveryError.invalidTXTRecord(
                reason: "the record is \(size) bytes; at most \(Self.maximumPublishedSize) fit in one mDNS packet "
                    + "(RFC 6762 §17), and RFC 6763 §6.2 advises under \(Self.recommendedMaximumSize)")
        }
    }

    /// The size of the record on the wire, in bytes: each attribute and its length byte (0 for
    /// an empty record, which goes out as a single empty string).
    public var size: Int {
        entries.reduce(0) { $0 + 1 + $1.key.utf8.count + ($1.value.map { $0.count + 1 } ?? 0) }
    }

    /// Removes the attribute named `key` (any case), if present.
    public mutating func remove(_ key: String) {
        entries.removeAll { Self.sameKey($0.key, key) }
    }

    /// The wire format: each attribute as a length byte and `key[=value]`. An empty record
    /// encodes as empty data.
    public var data: Data {
        var out = Data()
        for entry in entries {
            let encoded = Self.encode(entry)
            out.append(UInt8(encoded.count))
            out.append(contentsOf: encoded)
        }
        return out
    }

    /// The attributes as `[key: value]`, boolean attributes with empty data (as Apple's
    /// `NetService.dictionary(fromTXTRecord:)`).
    public var dictionary: [String: Data] {
        var out: [String: Data] = [:]
        for entry in entries { out[entry.key] = entry.value ?? Data() }
        return out
    }

    /// Each attribute encoded as `key=value` bytes (for Avahi string lists).
    var encodedStrings: [[UInt8]] { entries.map(Self.encode) }

    public var description: String {
        entries.map { entry in
            guard let value = entry.value else { return entry.key }
            if let text = String(data: value, encoding: .utf8), !text.contains(where: \.isASCIIControl) {
                return "\(entry.key)=\(text)"
            }
            return "\(entry.key)=0x" + value.map { String(format: "%02x", $0) }.joined()
        }.joined(separator: " ")
    }

    // MARK: Private

    /// Whether two keys are the same ignoring ASCII case only (RFC 6763 §6.4): Foundation's
    /// case-insensitive comparison folds Unicode too, so that looking up or removing "ß" or "K"
    /// (the Kelvin sign) would find the attribute "ss" or "k".
    private static func sameKey(_ a: String, _ b: String) -> Bool {
        ServiceNames.sameIgnoringASCIICase(a, b)
    }

    private static func encode(_ entry: Entry) -> [UInt8] {
        var bytes = Array(entry.key.utf8)
        if let value = entry.value {
            bytes.append(UInt8(ascii: "="))
            bytes.append(contentsOf: value)
        }
        return bytes
    }

    private static func decode(_ bytes: ArraySlice<UInt8>) throws -> Entry {
        let keyEnd = bytes.firstIndex(of: UInt8(ascii: "=")) ?? bytes.endIndex
        let keyBytes = bytes[bytes.startIndex..<keyEnd]
        guard !keyBytes.isEmpty else { throw DiscoveryError.invalidTXTRecord(reason: "attribute with an empty key") }
        guard keyBytes.allSatisfy({ $0 >= 0x20 && $0 <= 0x7E }) else {
            throw DiscoveryError.invalidTXTRecord(reason: "key is not printable ASCII")
        }
        let key = String(decoding: keyBytes, as: UTF8.self)
        let value = keyEnd == bytes.endIndex ? nil : Data(bytes[(keyEnd + 1)...])
        return Entry(key: key, value: value)
    }

    private static func validate(key: String, value: Data?) throws {
        guard !key.isEmpty else { throw DiscoveryError.invalidTXTRecord(reason: "empty key") }
        guard !key.contains("=") else { throw DiscoveryError.invalidTXTRecord(reason: "key \"\(key)\" contains '='") }
        guard key.utf8.allSatisfy({ $0 >= 0x20 && $0 <= 0x7E }) else {
            throw DiscoveryError.invalidTXTRecord(reason: "key \"\(key)\" is not printable ASCII")
        }
        let size = key.utf8.count + (value.map { $0.count + 1 } ?? 0)
        guard size <= 255 else {
            throw DiscoveryError.invalidTXTRecord(reason: "attribute \"\(key)\" is \(size) bytes; at most 255 fit")
        }
    }
}

private extension Character {
    var isASCIIControl: Bool { asciiValue.map { $0 < 0x20 || $0 == 0x7F } ?? false }
}
