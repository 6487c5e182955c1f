import Foundation
import Salut

/// The code two people compare to know that their devices hold each other's keys: twenty
/// digits derived from both keys (the order does not matter), as Signal's safety numbers are.
/// The sender shows it when it asks whether to trust a new receiver, the receiver when it asks
/// whether to accept an offer.
///
/// What it is worth: about 66 bits. Someone relaying between the two devices would have to
/// make a key for each side whose codes match; with both devices' keys known, a birthday search
/// needs about 2^33 keys on each side. Comparing the start of the receiver's key with what
/// `peerxfer identity` prints on it (16 hex digits: 64 bits against a key fixed in advance) is
/// the stronger check, and the one the tools ask for first.
public enum VerificationCode {
    /// The code of the devices with these two public-key SHA-256s (hex), as
    /// "12345 67890 12345 67890".
    public static func between(_ a: String, _ b: String) -> String {
        let keys = [a.lowercased(), b.lowercased()].sorted()
        let digest = SHA256Hasher.hash(Data("peerxfer verification code\n\(keys[0])\n\(keys[1])\n".utf8))
        // Four groups of five digits, each from 40 bits of the digest (the bias of the
        // reduction, under 0.01 %, is irrelevant here).
        return (0..<4).map { group -> String in
            let number = digest.bytes[group * 5..<group * 5 + 5].reduce(UInt64(0)) { $0 << 8 | UInt64($1) } % 100_000
            let digits = String(number)
            return String(repeating: "0", count: 5 - digits.count) + digits
        }.joined(separator: " ")
    }
}
