import Foundation
import Salut

/// The code two people compare to know that their devices hold each other's keys: nine
/// digits derived from both keys (the order does not matter), as Bluetooth's numeric
/// comparison and Signal's safety numbers work. The sender shows it when it asks whether to
/// trust a new receiver, the receiver when it asks whether to accept an offer; equal codes
/// mean nobody stands between them.
public enum VerificationCode {
    /// The code of the devices with these two public-key SHA-256s (hex), as "123 456 789".
    public static func between(_ a: String, _ b: String) -> String {
        let keys = [a.lowercased(), b.lowercased()].sorted()
        let digest = SHA256Hasher.hash(Data("peerxfer verification code\n\(keys[0])\n\(keys[1])\n".utf8))
        // 40 bits, reduced to nine digits (the bias, under 0.1 %, is irrelevant here).
        let number = digest.bytes.prefix(5).reduce(UInt64(0)) { $0 << 8 | UInt64($1) } % 1_000_000_000
        let digits = String(number)
        let padded = String(repeating: "0", count: 9 - digits.count) + digits
        let chars = Array(padded)
        return "\(String(chars[0..<3])) \(String(chars[3..<6])) \(String(chars[6..<9]))"
    }
}
