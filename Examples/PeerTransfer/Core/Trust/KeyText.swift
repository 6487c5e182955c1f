import Foundation

/// Key fingerprints as people type them: hex digits (ASCII only: a full-width "０" is not a
/// digit of any key), any case, with colons or spaces between groups allowed.
public enum KeyText {
    /// The shortest start of a key a person may give where a whole key is not needed: 16 hex
    /// digits (64 bits), beyond what anyone can match by making keys until one fits.
    public static let shortestPrefix = 16

    /// `text` as lower-case hex without separators, when it is all hex digits; nil otherwise.
    public static func digits(_ text: String) -> String? {
        let kept = text.unicodeScalars.filter { $0 != ":" && $0 != " " }
        guard !kept.isEmpty, kept.allSatisfy({ isASCIIHexDigit($0) }) else { return nil }
        return String(String.UnicodeScalarView(kept)).lowercased()
    }

    /// A whole key (64 hex digits), normalised; nil otherwise.
    public static func whole(_ text: String) -> String? {
        guard let hex = digits(text), hex.count == 64 else { return nil }
        return hex
    }

    /// The start of a key given to `option`: at least ``shortestPrefix`` hex digits, at most 64.
    /// - Throws: ``PeerTransferError/usage(_:)`` saying what is wrong with it.
    public static func prefix(_ text: String, option: String) throws -> String {
        let kept = text.unicodeScalars.filter { $0 != ":" && $0 != " " }
        if let wrong = kept.firstIndex(where: { !isASCIIHexDigit($0) }) {
            let position = kept.distance(from: kept.startIndex, to: wrong) + 1
            throw PeerTransferError.usage(
                "\(option): \"\(Terminal.escape(text))\" is not a key: character \(position) (\(Terminal.escape(String(kept[wrong])))) is not a hex digit 0-9 or a-f"
            )
        }
        guard let hex = digits(text), hex.count >= shortestPrefix, hex.count <= 64 else {
            throw PeerTransferError.usage(
                "\(option): give the key as `peerxfer identity` prints it, all 64 hex digits or at least the first \(shortestPrefix) (\"\(Terminal.escape(text))\" has \(kept.count))"
            )
        }
        return hex
    }

    static func isASCIIHexDigit(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar.value {
        case 0x30...0x39, 0x41...0x46, 0x61...0x66: return true
        default: return false
        }
    }
}
