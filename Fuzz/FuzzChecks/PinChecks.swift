import Foundation
import SalutStreams

/// Properties of pin parsing (`TLSConfiguration.pinnedSHA256`, as `netsvc --pin` and apps that
/// pin a TXT value give it): it never traps, and it takes a pin exactly when the pin is 64 ASCII
/// hex digits (colons and spaces between them allowed, `sha256/` before them allowed) or base64
/// of 32 bytes. Full-width and other non-ASCII digits are refused, not taken for hex (they once
/// passed a `Character.isHexDigit` check and then trapped in the conversion).
///
/// The input is the pin's text, decoded as UTF-8.
public enum PinChecks {
    /// Checks the pin the input makes.
    public static func check(_ input: [UInt8]) throws(PropertyViolation) {
        let text = String(decoding: input, as: UTF8.self)
        let accepted = (try? TLSConfiguration(pinnedSHA256: [text]).validate()) != nil
        var body = text.trimmingCharacters(in: .whitespaces)
        if body.lowercased().hasPrefix("sha256/") { body = String(body.dropFirst(7)) }
        let digits = Array(body.utf8.filter { $0 != UInt8(ascii: ":") && $0 != UInt8(ascii: " ") })
        let hex = digits.count == 64 && digits.allSatisfy(isASCIIHexDigit)
        let base64 = Data(base64Encoded: body)?.count == 32
        try require(
            accepted == (hex || base64),
            "pin \(text.debugDescription) was \(accepted ? "accepted" : "refused"); ASCII hex: \(hex), base64: \(base64)"
        )
        if let digest = SHA256Digest(hex: text) {
            try require(
                digest.hex == text.lowercased(),
                "SHA256Digest(hex: \(text.debugDescription)) reads back as \(digest.hex)")
        }
    }

    static func isASCIIHexDigit(_ byte: UInt8) -> Bool {
        (48...57).contains(byte) || (65...70).contains(byte) || (97...102).contains(byte)
    }
}
