import CAvahi
import Foundation
import SalutStreams

/// Conversions between Avahi's C values and Salut's Swift ones. Call on the context's queue (the
/// TXT conversions touch no shared state and are `package` for the fuzz checks).
package enum AvahiValues {
    /// Builds an `AvahiStringList` that Avahi publishes with the record's attributes in order
    /// (Avahi's parser of the wire format gives exactly that). The caller frees it with
    /// `avahi_string_list_free`. Nil for an empty record (Avahi's empty list).
    ///
    /// Avahi's own helpers disagree about list order (`avahi_string_list_serialize` reverses the
    /// list it is given), so the order here was settled on the wire: a packet capture, and
    /// `AsyncDiscoveryTests.testTXTOrderOnTheWire`, which reads the raw TXT rdata.
    package static func stringList(_ txt: TXTRecord) -> UnsafeMutablePointer<AvahiStringList>? {
        let wire = txt.data
        guard !wire.isEmpty else { return nil }
        var list: UnsafeMutablePointer<AvahiStringList>?
        let result = wire.withUnsafeBytes { avahi_string_list_parse($0.baseAddress, $0.count, &list) }
        // The record was validated when built, so Avahi cannot refuse it.
        precondition(result >= 0, "Avahi refused a validated TXT record")
        return list
    }

    /// Reads an `AvahiStringList` handed to a resolver callback (head first is wire order) as a
    /// TXT record, leniently.
    package static func txtRecord(_ list: UnsafeMutablePointer<AvahiStringList>?) -> TXTRecord {
        var data = Data()
        var node = list
        while let current = node {
            let size = avahi_string_list_get_size(current)
            if size <= 255, let text = avahi_string_list_get_text(current) {
                data.append(UInt8(size))
                data.append(text, count: size)
            }
            node = avahi_string_list_get_next(current)
        }
        return TXTRecord(parsingLeniently: data)
    }

    /// An `AvahiAddress` with a port as a socket address; IPv6 link-local addresses carry the
    /// interface index as scope id.
    static func socketAddress(
        _ address: UnsafePointer<AvahiAddress>, port: UInt16, interface: AvahiIfIndex
    ) -> SocketAddress? {
        switch address.pointee.proto {
        case AvahiProtocol(AVAHI_PROTO_INET):
            var raw = address.pointee.data.ipv4.address  // network byte order
            let bytes = withUnsafeBytes(of: &raw) { Array($0) }
            return SocketAddress(ipv4: bytes, port: port)
        case AvahiProtocol(AVAHI_PROTO_INET6):
            var raw = address.pointee.data.ipv6.address
            let bytes = withUnsafeBytes(of: &raw) { Array($0) }
            let linkLocal = bytes[0] == 0xFE && (bytes[1] & 0xC0) == 0x80
            return SocketAddress(ipv6: bytes, port: port, scopeID: linkLocal && interface > 0 ? UInt32(interface) : 0)
        default:
            return nil
        }
    }

    /// Whether Avahi reads `domain` as a domain name (its escapes well formed, each label 1 to 63
    /// bytes once unescaped, and UTF-8).
    static func isValidDomain(_ domain: String) -> Bool {
        avahi_is_valid_domain_name(domain) != 0
    }

    static func string(_ text: UnsafePointer<CChar>?) -> String {
        text.map { String(cString: $0) } ?? ""
    }
}
