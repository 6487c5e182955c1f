import COpenSSL
import Foundation

/// SHA-256 over bytes fed in pieces (OpenSSL's implementation, with the CPU's SHA extensions
/// where it has them).
///
/// ```swift
/// let hasher = SHA256Hasher()
/// hasher.update(firstPart)
/// hasher.update(secondPart)
/// print(hasher.finish().hex)
/// ```
///
/// One hasher is fed from one thread or task at a time (it is not `Sendable`).
public final class SHA256Hasher {
    private let context: OpaquePointer
    private var finished = false

    /// A hasher with nothing fed yet.
    public init() {
        // Only allocation failure makes these fail; a hasher that cannot hash is a crash, as
        // running out of memory is everywhere else in Swift.
        guard let context = EVP_MD_CTX_new() else { fatalError("EVP_MD_CTX_new failed: out of memory") }
        guard EVP_DigestInit_ex(context, EVP_sha256(), nil) == 1 else {
            fatalError("SHA-256 is not available in OpenSSL")
        }
        self.context = context
    }

    deinit { EVP_MD_CTX_free(context) }

    /// Feeds `bytes`.
    public func update(_ bytes: UnsafeRawBufferPointer) {
        precondition(!finished, "SHA256Hasher fed after finish()")
        guard let base = bytes.baseAddress, bytes.count > 0 else { return }
        guard EVP_DigestUpdate(context, base, bytes.count) == 1 else { fatalError("EVP_DigestUpdate failed") }
    }

    /// Feeds the bytes of `data`.
    public func update<D: DataProtocol>(_ data: D) {
        for region in data.regions { region.withUnsafeBytes { update($0) } }
    }

    /// The digest of everything fed; the hasher cannot be fed afterwards.
    public func finish() -> SHA256Digest {
        precondition(!finished, "SHA256Hasher finished twice")
        finished = true
        var digest = [UInt8](repeating: 0, count: 32)
        var length: UInt32 = 0
        guard EVP_DigestFinal_ex(context, &digest, &length) == 1, length == 32 else {
            fatalError("EVP_DigestFinal_ex failed")
        }
        return SHA256Digest(bytes: digest)
    }

    /// The digest of `data` in one call.
    public static func hash<D: DataProtocol>(_ data: D) -> SHA256Digest {
        let hasher = SHA256Hasher()
        hasher.update(data)
        return hasher.finish()
    }
}

/// A SHA-256 digest: 32 bytes.
public struct SHA256Digest: Sendable, Hashable, CustomStringConvertible {
    /// The 32 bytes.
    public let bytes: [UInt8]

    /// The digest in `bytes`, which must be 32 bytes long.
    public init(bytes: [UInt8]) {
        precondition(bytes.count == 32, "a SHA-256 digest is 32 bytes")
        self.bytes = bytes
    }

    /// Parses 64 hexadecimal digits (either case); nil for anything else.
    public init?(hex: String) {
        guard hex.utf8.count == 64,
            hex.utf8.allSatisfy({ (48...57).contains($0) || (65...70).contains($0) || (97...102).contains($0) })
        else { return nil }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(32)
        var index = hex.startIndex
        while index < hex.endIndex {
            let next = hex.index(index, offsetBy: 2)
            guard let byte = UInt8(hex[index..<next], radix: 16) else { return nil }
            bytes.append(byte)
            index = next
        }
        self.bytes = bytes
    }

    /// Lower-case hexadecimal, 64 digits.
    public var hex: String { Fingerprint.hex(bytes) }

    public var description: String { hex }
}
