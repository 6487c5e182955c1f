import COpenSSL

/// HMAC-SHA256 (RFC 2104) through OpenSSL: the MAC that signs DNS updates (TSIG,
/// `hmac-sha256`).
package enum HMACSHA256 {
    /// The MAC of `message` under `key` (32 bytes).
    package static func mac(key: [UInt8], message: [UInt8]) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: 32)
        var length: UInt32 = 0
        // An empty array may have no storage: OpenSSL still wants a valid pointer (it reads none).
        let storage = key.isEmpty ? [0] : key
        let made = storage.withUnsafeBytes { keyBytes in
            message.withUnsafeBufferPointer { data in
                HMAC(EVP_sha256(), keyBytes.baseAddress, Int32(key.count), data.baseAddress, data.count, &out, &length)
            }
        }
        // Fails only when OpenSSL cannot allocate: as elsewhere in Swift, out of memory is a crash.
        guard made != nil, length == 32 else { fatalError("HMAC-SHA256 failed in OpenSSL") }
        return out
    }
}
