import Foundation

/// A message read by hand when it has exactly the shape ``HandWrittenJSON`` writes and needs
/// no escapes: a manifest of 10,000 entries, or a result per file, cost `JSONDecoder` several
/// microseconds an entry on the critical path. Anything else (other key orders, escapes,
/// whitespace, a malformed or hostile message) is left to `JSONDecoder`, which reads it or
/// refuses it as before: this only ever takes the first of two ways to the same value.
protocol HandReadJSON {
    /// The message, when `payload` has the hand-written shape; nil to let `JSONDecoder` read it.
    static func quickly(from payload: Data) -> Self?
}

extension FileResult: HandReadJSON {
    static func quickly(from payload: Data) -> FileResult? {
        payload.withUnsafeBytes { bytes -> FileResult? in
            var scanner = JSONScanner(bytes)
            guard scanner.take("{") else { return nil }
            var error: String?
            if scanner.take("\"error\":") {
                guard let text = scanner.string(), scanner.take(",") else { return nil }
                error = text
            }
            guard scanner.take("\"index\":"), let index = scanner.unsigned(below: UInt64(Int.max)) else { return nil }
            var storedAs: String?
            if scanner.take(",\"storedAs\":") {
                guard let text = scanner.string() else { return nil }
                storedAs = text
            }
            guard scanner.take(",\"verified\":") else { return nil }
            let verified: Bool
            if scanner.take("true") { verified = true } else if scanner.take("false") { verified = false } else { return nil }
            guard scanner.take("}"), scanner.isAtEnd else { return nil }
            return FileResult(index: Int(index), verified: verified, storedAs: storedAs, error: error)
        }
    }
}

extension Manifest: HandReadJSON {
    static func quickly(from payload: Data) -> Manifest? {
        payload.withUnsafeBytes { bytes -> Manifest? in
            var scanner = JSONScanner(bytes)
            guard scanner.take("{\"chunkSize\":"), let chunkSize = scanner.unsigned(below: UInt64(Int.max)),
                  scanner.take(",\"entries\":[") else { return nil }
            var entries: [ManifestEntry] = []
            if !scanner.take("]") {
                repeat {
                    guard scanner.take("{\"kind\":") else { return nil }
                    let kind: ManifestEntry.Kind
                    if scanner.take("\"file\"") { kind = .file } else if scanner.take("\"directory\"") { kind = .directory } else { return nil }
                    guard scanner.take(",\"mode\":"), let mode = scanner.unsigned(below: UInt64(UInt32.max) + 1),
                          scanner.take(",\"modified\":"), let modified = scanner.number(),
                          scanner.take(",\"path\":"), let path = scanner.string(),
                          scanner.take(",\"size\":"), let size = scanner.unsigned(below: UInt64.max),
                          scanner.take("}") else { return nil }
                    entries.append(ManifestEntry(path: path, kind: kind, size: size, mode: UInt32(mode), modified: modified))
                } while scanner.take(",")
                guard scanner.take("]") else { return nil }
            }
            guard scanner.take("}"), scanner.isAtEnd else { return nil }
            return Manifest(chunkSize: Int(chunkSize), entries: entries)
        }
    }
}

/// Reads the few JSON tokens ``HandReadJSON`` accepts, strictly: no whitespace, strings
/// without escapes or control characters (and valid UTF-8), unsigned integers without leading
/// zeros. Each method takes its token and moves on, or takes nothing and says so.
struct JSONScanner {
    private let bytes: UnsafeRawBufferPointer
    private var position = 0

    init(_ bytes: UnsafeRawBufferPointer) {
        self.bytes = bytes
    }

    var isAtEnd: Bool { position == bytes.count }

    /// Takes `literal` if the text goes on with it.
    mutating func take(_ literal: StaticString) -> Bool {
        let count = literal.utf8CodeUnitCount
        guard bytes.count - position >= count else { return false }
        let start = literal.utf8Start
        for offset in 0..<count where bytes[position + offset] != start[offset] { return false }
        position += count
        return true
    }

    /// A string without escapes, control characters or invalid UTF-8.
    mutating func string() -> String? {
        guard position < bytes.count, bytes[position] == 0x22 else { return nil }
        var end = position + 1
        while end < bytes.count {
            let byte = bytes[end]
            if byte == 0x22 { break }
            if byte < 0x20 || byte == 0x5c || byte == 0x7f { return nil }
            end += 1
        }
        guard end < bytes.count else { return nil }
        guard let text = String(validating: UnsafeRawBufferPointer(rebasing: bytes[(position + 1)..<end]), as: UTF8.self) else { return nil }
        position = end + 1
        return text
    }

    /// An unsigned integer below `limit`, without sign or leading zeros.
    mutating func unsigned(below limit: UInt64) -> UInt64? {
        var end = position
        var value: UInt64 = 0
        while end < bytes.count, (0x30...0x39).contains(bytes[end]) {
            let (times, overflowed) = value.multipliedReportingOverflow(by: 10)
            let (sum, overflowedAgain) = times.addingReportingOverflow(UInt64(bytes[end] - 0x30))
            guard !overflowed, !overflowedAgain else { return nil }
            value = sum
            end += 1
        }
        let digits = end - position
        guard digits > 0, digits == 1 || bytes[position] != 0x30, value < limit else { return nil }
        position = end
        return value
    }

    /// A JSON number as a finite `Double`: an optional minus, digits without leading zeros,
    /// an optional fraction and an optional exponent.
    mutating func number() -> Double? {
        var end = position
        func digits() -> Int {
            let start = end
            while end < bytes.count, (0x30...0x39).contains(bytes[end]) { end += 1 }
            return end - start
        }
        if end < bytes.count, bytes[end] == 0x2d { end += 1 }
        let integerStart = end
        let integerDigits = digits()
        guard integerDigits > 0, integerDigits == 1 || bytes[integerStart] != 0x30 else { return nil }
        if end < bytes.count, bytes[end] == 0x2e {
            end += 1
            guard digits() > 0 else { return nil }
        }
        if end < bytes.count, bytes[end] == 0x65 || bytes[end] == 0x45 {
            end += 1
            if end < bytes.count, bytes[end] == 0x2b || bytes[end] == 0x2d { end += 1 }
            guard digits() > 0 else { return nil }
        }
        let token = String(decoding: UnsafeRawBufferPointer(rebasing: bytes[position..<end]), as: UTF8.self)
        guard let value = Double(token), value.isFinite else { return nil }
        position = end
        return value
    }
}
