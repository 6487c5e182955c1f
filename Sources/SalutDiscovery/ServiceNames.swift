import Glibc
import SalutStreams

/// Validation and comparison of DNS-SD names, so that bad input is a clear error before it
/// reaches the daemon, and two names are told apart as DNS does. The checks an app needs are
/// public; the parsing the library and its fuzz checks (`Fuzz/FuzzChecks`) share is `package`.
public enum ServiceNames {
    /// A service type split into its base type (`_http._tcp`) and optional subtype label
    /// (`_printer` from `_printer._sub._http._tcp`).
    package struct ParsedType: Sendable, Hashable {
        package var base: String
        package var subtype: String?
        /// The form Avahi browses: `_printer._sub._http._tcp` or `_http._tcp`.
        package var browseType: String { subtype.map { "\($0)._sub.\(base)" } ?? base }
    }

    /// The longest service name (after its '_') RFC 6335 allows; longer ones fit in a DNS
    /// label and mDNSResponder and avahi-daemon take them on `.local`.
    package static let standardServiceNameLength = 15

    /// Long types already logged: a warning once per type and process, not per call.
    private static let warnedLongTypes = Locked<Set<String>>([])

    /// Parses `_name._tcp`, `_name._udp` (trailing dot allowed) or `_sub._sub._name._tcp`.
    /// A service name over 15 characters (RFC 6335's limit) is taken in `domain` "local", as
    /// mDNSResponder and avahi-daemon take it, and refused in any other domain, as
    /// mDNSResponder refuses it.
    package static func parseType(_ raw: String, domain: String = "local") throws -> ParsedType {
        let type = raw.hasSuffix(".") ? String(raw.dropLast()) : raw
        let labels = type.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
        func bad(_ reason: String) -> DiscoveryError { .invalidServiceType(raw, reason: reason) }
        var subtype: String?
        let baseLabels: [String]
        switch labels.count {
        case 2: baseLabels = labels
        case 4 where labels[1] == "_sub":
            subtype = labels[0]
            baseLabels = Array(labels[2...])
            // At least 3 bytes: Avahi refuses a shorter label in a service type.
            guard let sub = subtype, sub.hasPrefix("_"), (3...63).contains(sub.utf8.count),
                sub.dropFirst().allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "-" || $0 == "_") })
            else {
                throw bad("the subtype must be '_' and 2 to 62 letters, digits, '-' or '_' (for example _printer)")
            }
        default:
            throw bad("expected _name._tcp or _name._udp (optionally _subtype._sub._name._tcp)")
        }
        let (service, proto) = (baseLabels[0], baseLabels[1])
        guard proto == "_tcp" || proto == "_udp" else { throw bad("the protocol must be _tcp or _udp") }
        guard service.hasPrefix("_") else { throw bad("the service name must start with '_'") }
        let name = service.dropFirst()
        // RFC 6335 allows one character, but Avahi refuses a type label shorter than 3 bytes;
        // the label ('_' and the name) fits in 63 bytes.
        let local = ["", "local", "local."].contains(domain.lowercased())
        guard name.count >= 2, name.count <= (local ? 62 : standardServiceNameLength) else {
            throw bad(
                name.count >= 2 && name.count <= 62
                    ? "\"\(name)\" in \(service).\(proto) must be at most 15 characters outside .local (it has \(name.count))"
                    : "\"\(name)\" in \(service).\(proto) must be 2 to 62 characters on .local (2 to 15 in other domains; it has \(name.count))"
            )
        }
        guard name.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "-") }) else {
            throw bad("the service name may hold only letters, digits and '-'")
        }
        guard name.contains(where: { $0.isLetter }), name.first != "-", name.last != "-",
            !name.contains("--")
        else {
            throw bad("the service name needs a letter and no leading, trailing or double '-'")
        }
        return ParsedType(base: baseLabels.joined(separator: "."), subtype: subtype)
    }

    /// Logs a warning when the application publishes or browses a type whose service name is
    /// longer than RFC 6335's 15 characters: taken, as mDNSResponder takes it on .local, and
    /// logged, as it logs it. Once per type, and only by a logger that shows warnings, so that a
    /// type seen while logging is off is still warned about once it is on. Not for types that come
    /// from the network (a found service being resolved): the application did not choose them.
    package static func noteIfLong(_ parsed: ParsedType) {
        let service = parsed.base.split(separator: ".").first.map { $0.dropFirst() } ?? ""
        guard service.count > standardServiceNameLength else { return }
        let logger = SalutLogging.logger
        guard logger.logLevel <= .warning, warnedLongTypes.withLock({ $0.insert(parsed.base.lowercased()).inserted })
        else { return }
        logger.warning(
            "service type \(parsed.base): its service name has \(service.count) characters; RFC 6335 allows 15, and DNS-SD software that keeps to that may refuse the type"
        )
    }

    /// Checks an instance name: at most 63 bytes of UTF-8, no NUL, no Unicode noncharacter
    /// (U+FDD0 to U+FDEF, or U+FFFE and U+FFFF in any plane: Avahi writes such a name into a
    /// service's full name as byte escapes it then cannot read back). Empty is allowed only
    /// where `allowEmpty` (publishing uses the host's name then).
    /// - Throws: ``DiscoveryError/invalidServiceName(_:reason:)`` saying what is wrong.
    public static func checkName(_ name: String, allowEmpty: Bool) throws {
        if name.isEmpty {
            guard allowEmpty else { throw DiscoveryError.invalidServiceName(name, reason: "the name is empty") }
            return
        }
        guard name.utf8.count <= 63 else {
            throw DiscoveryError.invalidServiceName(name, reason: "\(name.utf8.count) bytes of UTF-8; at most 63 fit")
        }
        guard !name.utf8.contains(0) else {
            throw DiscoveryError.invalidServiceName(name, reason: "contains a NUL byte")
        }
        if let scalar = name.unicodeScalars.first(where: { isNoncharacter($0) }) {
            let code = String(scalar.value, radix: 16, uppercase: true)
            throw DiscoveryError.invalidServiceName(
                name,
                reason:
                    "contains U+\(String(repeating: "0", count: max(0, 4 - code.count)))\(code), a Unicode noncharacter, which Avahi cannot carry in a service's full name"
            )
        }
    }

    /// Whether `scalar` is one of Unicode's 66 noncharacters (never meant for interchange).
    private static func isNoncharacter(_ scalar: Unicode.Scalar) -> Bool {
        (0xFDD0...0xFDEF).contains(scalar.value) || scalar.value & 0xFFFE == 0xFFFE
    }

    /// Whether two names are the same to DNS: equal once ASCII letters are folded to one case
    /// (RFC 6762 section 16), every other byte as it is. Not Foundation's case-insensitive
    /// comparison, which folds Unicode too ("K", the Kelvin sign, would match "k").
    public static func sameIgnoringASCIICase(_ a: String, _ b: String) -> Bool {
        ASCIICase.same(a, b)
    }

    /// True for a domain that mDNS serves on the link (`local` and names under it), as opposed
    /// to a wide-area domain in unicast DNS. `domain` as ``normaliseDomain(_:)`` returns it.
    package static func isOnTheLink(_ domain: String) -> Bool {
        let lowered = domain.lowercased()
        return lowered == "local" || lowered.hasSuffix(".local")
    }

    /// Normalises a domain for Avahi: "" and "local." become "local"; others are checked label by
    /// label (1 to 63 bytes each, 253 in all, no spaces or control characters), and must be a
    /// domain Avahi reads (where `\` escapes `.`, `\` or a three-digit byte value).
    package static func normaliseDomain(_ raw: String) throws -> String {
        var domain = raw
        if domain.hasSuffix(".") { domain.removeLast() }
        if domain.isEmpty { return "local" }
        guard domain.utf8.count <= 253 else { throw DiscoveryError.invalidDomain(raw) }
        for label in domain.split(separator: ".", omittingEmptySubsequences: false) {
            guard (1...63).contains(label.utf8.count),
                label.unicodeScalars.allSatisfy({ $0.value > 0x20 && $0.value != 0x7F })
            else {
                throw DiscoveryError.invalidDomain(raw)
            }
        }
        guard AvahiValues.isValidDomain(domain) else { throw DiscoveryError.invalidDomain(raw) }
        return domain
    }

    /// Checks a host name to look up, as Avahi would before refusing it with a bare error
    /// number: at most 253 bytes, at least two labels (`myhost.local`, not `myhost`) of 1 to 63
    /// bytes each, no backslash (Avahi reads one as an escape) and not an IP address. Returns the
    /// name without a trailing dot.
    static func checkHostName(_ raw: String) throws -> String {
        let name = raw.hasSuffix(".") ? String(raw.dropLast()) : raw
        func bad(_ reason: String) -> DiscoveryError { .invalidHostName(raw, reason: reason) }
        guard !name.isEmpty else { throw bad("the name is empty") }
        guard name.utf8.count <= 253 else { throw bad("\(name.utf8.count) bytes; at most 253 fit") }
        if isIPAddress(name) {
            throw bad("that is an IP address; look up a name such as myhost.local")
        }
        let labels = name.split(separator: ".", omittingEmptySubsequences: false)
        guard labels.allSatisfy({ (1...63).contains($0.utf8.count) }) else {
            throw bad("each dot-separated label must be 1 to 63 bytes")
        }
        guard labels.count >= 2 else { throw bad("give the full name with its domain, for example \(name).local") }
        guard !name.contains("\\") else { throw bad("a host name cannot contain a backslash") }
        guard !name.unicodeScalars.contains(where: { $0.value < 0x20 || $0.value == 0x7F }) else {
            throw bad("a host name cannot contain control characters")
        }
        return name
    }

    /// Whether `text` is an IPv4 or IPv6 address (`[…]` and a `%scope` allowed).
    static func isIPAddress(_ text: String) -> Bool {
        var bare = Substring(text)
        if bare.hasPrefix("["), bare.hasSuffix("]") { bare = bare.dropFirst().dropLast() }
        if let percent = bare.firstIndex(of: "%") { bare = bare[..<percent] }
        var v4 = in_addr(), v6 = in6_addr()
        return inet_pton(AF_INET, String(bare), &v4) == 1 || inet_pton(AF_INET6, String(bare), &v6) == 1
    }

    /// Checks a port number.
    package static func checkPort(_ port: Int) throws -> UInt16 {
        guard (0...65535).contains(port) else { throw DiscoveryError.invalidPort(port) }
        return UInt16(port)
    }
}
