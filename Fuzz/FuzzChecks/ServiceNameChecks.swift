import CAvahi
import Foundation
import SalutDiscovery

/// Properties of Salut's name validation (`ServiceNames`): it never traps, it takes exactly what
/// its rules say, and whatever it accepts reaches Avahi intact and is accepted there too, so
/// that a bad name is always Salut's clear error and never a refusal from the daemon later.
///
/// The input is split at `0xFF` bytes (never part of UTF-8) into an instance name, a service
/// type, a domain and a subtype, each decoded as UTF-8; two more bytes make a port.
public enum ServiceNameChecks {
    /// Checks the four strings and the port the input makes.
    public static func check(_ input: [UInt8]) throws(PropertyViolation) {
        var reader = ByteReader(input)
        let name = string(reader.bytes(upTo: 0xFF))
        let type = string(reader.bytes(upTo: 0xFF))
        let domain = string(reader.bytes(upTo: 0xFF))
        let subtype = string(reader.bytes(upTo: 0xFF))
        let port = (Int(Int8(bitPattern: reader.byte())) << 10) ^ Int(reader.byte())

        let acceptedName = try checkName(name)
        let parsedType = try checkType(type)
        let normalisedDomain = try checkDomain(domain)
        if let parsedType { try checkSubtype(subtype, of: parsedType) }
        try checkPort(port)
        if acceptedName, !name.isEmpty, let parsedType, let normalisedDomain {
            try checkFullName(name: name, type: parsedType.base, domain: normalisedDomain)
        }
    }

    static func string(_ bytes: [UInt8]) -> String { String(decoding: bytes, as: UTF8.self) }

    /// An instance name is accepted exactly when it is 1 to 63 bytes of UTF-8 without NUL or a
    /// Unicode noncharacter (empty only where allowed), it passes to C unchanged, and Avahi
    /// takes it.
    static func checkName(_ name: String) throws(PropertyViolation) -> Bool {
        let bytes = Array(name.utf8)
        let noncharacter = name.unicodeScalars.contains {
            (0xFDD0...0xFDEF).contains($0.value) || $0.value & 0xFFFE == 0xFFFE
        }
        let valid = bytes.count <= 63 && !bytes.contains(0) && !noncharacter
        for allowEmpty in [false, true] {
            let accepted = (try? ServiceNames.checkName(name, allowEmpty: allowEmpty)) != nil
            try require(
                accepted == (valid && (allowEmpty || !bytes.isEmpty)),
                "checkName(\(name.debugDescription), allowEmpty: \(allowEmpty)) \(accepted ? "accepted" : "refused") it"
            )
        }
        guard valid, !bytes.isEmpty else { return valid }
        try require(
            Array(name.withCString { String(cString: $0) }.utf8) == bytes,
            "name \(name.debugDescription) does not survive the C string")
        try require(avahi_is_valid_service_name(name) != 0, "Avahi refuses the accepted name \(name.debugDescription)")
        return true
    }

    /// An accepted type is `_name._tcp` or `_name._udp` (with an optional subtype), parses again
    /// to the same value from its browse form and from its base, and Avahi takes it for
    /// publishing (the base) and for browsing (the browse form).
    static func checkType(_ type: String) throws(PropertyViolation) -> ServiceNames.ParsedType? {
        guard let parsed = try? ServiceNames.parseType(type) else { return nil }
        let labels = parsed.base.split(separator: ".", omittingEmptySubsequences: false)
        try require(
            labels.count == 2 && ["_tcp", "_udp"].contains(labels[1]) && labels[0].hasPrefix("_"),
            "parseType(\(type.debugDescription)) gave the base \(parsed.base.debugDescription)")
        try require(
            (try? ServiceNames.parseType(parsed.browseType)) == parsed,
            "the browse type \(parsed.browseType.debugDescription) of \(type.debugDescription) parses differently")
        for base in [parsed.base, parsed.base + "."] {
            let again = try? ServiceNames.parseType(base)
            try require(
                again?.base == parsed.base && again?.subtype == nil,
                "the base \(base.debugDescription) of \(type.debugDescription) parses as \(String(describing: again))")
        }
        try require(
            avahi_is_valid_service_type_strict(parsed.base) != 0,
            "Avahi refuses the service type \(parsed.base.debugDescription) accepted from \(type.debugDescription)")
        try require(
            avahi_is_valid_service_type_generic(parsed.browseType) != 0,
            "Avahi refuses to browse \(parsed.browseType.debugDescription) accepted from \(type.debugDescription)")
        if parsed.subtype != nil {
            try require(
                avahi_is_valid_service_subtype(parsed.browseType) != 0,
                "Avahi refuses the subtype \(parsed.browseType.debugDescription) accepted from \(type.debugDescription)"
            )
        }
        return parsed
    }

    /// An extra subtype is checked as `ServiceAdvertisement` does (`<subtype>._sub.<base>` must
    /// parse); one that passes is a subtype Avahi publishes.
    static func checkSubtype(_ subtype: String, of type: ServiceNames.ParsedType) throws(PropertyViolation) {
        let full = "\(subtype)._sub.\(type.base)"
        guard let parsed = try? ServiceNames.parseType(full) else { return }
        try require(
            parsed.subtype == subtype && parsed.base == type.base,
            "the subtype \(subtype.debugDescription) of \(type.base.debugDescription) parses as \(parsed)")
        try require(
            avahi_is_valid_service_subtype(full) != 0, "Avahi refuses the accepted subtype \(full.debugDescription)")
    }

    /// An accepted domain normalises to itself, without a trailing dot, within 253 bytes, and
    /// Avahi takes it.
    static func checkDomain(_ domain: String) throws(PropertyViolation) -> String? {
        guard let normalised = try? ServiceNames.normaliseDomain(domain) else { return nil }
        try require(
            !normalised.isEmpty && !normalised.hasSuffix(".") && normalised.utf8.count <= 253,
            "normaliseDomain(\(domain.debugDescription)) gave \(normalised.debugDescription)")
        try require(
            (try? ServiceNames.normaliseDomain(normalised)) == normalised,
            "normaliseDomain is not idempotent on \(normalised.debugDescription)")
        try require(
            avahi_is_valid_domain_name(normalised) != 0,
            "Avahi refuses the domain \(normalised.debugDescription) accepted from \(domain.debugDescription)")
        return normalised
    }

    /// A port is accepted exactly in 0...65535 and keeps its value.
    static func checkPort(_ port: Int) throws(PropertyViolation) {
        let checked = try? ServiceNames.checkPort(port)
        try require(
            checked.map(Int.init) == ((0...65535).contains(port) ? port : nil),
            "checkPort(\(port)) gave \(String(describing: checked))")
    }

    /// An accepted name, type and domain make a full service name (as the TXT monitor builds
    /// with `avahi_service_name_join`) whose labels are the name, then the type's and the
    /// domain's labels. (Splitting it back is not the same: Avahi's split takes any leading
    /// `_label` of the domain as part of the type. Salut never splits.)
    static func checkFullName(name: String, type: String, domain: String) throws(PropertyViolation) {
        var full = [CChar](repeating: 0, count: Int(AVAHI_DOMAIN_NAME_MAX))
        try require(
            avahi_service_name_join(&full, full.count, name, type, domain) >= 0,
            "Avahi cannot join \(name.debugDescription), \(type.debugDescription), \(domain.debugDescription)")
        let text = full.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
        // Avahi cuts a joined name that does not fit its buffer and still reports success; Salut
        // watches no such name (TXTMonitorOperation), so only names that fit are compared.
        guard text.utf8.count < full.count - 1 else { return }
        let joined = labels(text)
        let expected = [Array(name.utf8)] + (labels(type) ?? []) + (labels(domain) ?? [])
        try require(
            joined == expected,
            "the full name of \(name.debugDescription), \(type.debugDescription), \(domain.debugDescription) has the labels "
                + "\((joined ?? []).map(string)), expected \(expected.map(string))")
    }

    /// The labels of a domain name as Avahi reads them (unescaped); nil if it cannot.
    static func labels(_ domain: String) -> [[UInt8]]? {
        domain.withCString { start -> [[UInt8]]? in
            var cursor: UnsafePointer<CChar>? = start
            var result: [[UInt8]] = []
            var label = [CChar](repeating: 0, count: Int(AVAHI_LABEL_MAX))
            while let current = cursor, current.pointee != 0 {
                guard avahi_unescape_label(&cursor, &label, label.count) != nil else { return nil }
                result.append(label.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) })
            }
            return result
        }
    }
}
