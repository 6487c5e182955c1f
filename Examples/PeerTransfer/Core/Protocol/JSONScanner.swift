import Foundation

/// Reads the few JSON tokens ``HandReadJSON`` accepts, strictly: no whitespace, strings
/// without escapes or control characters (and valid UTF-8), unsigned integers without leading
/// zeros. Each method takes its token and moves on, or takes nothing and says so.
struct JSONScanner {
    private let bytes: UnsafeRawBufferPointer
    private var position = 0

    /// A scanner at the start of `bytes`, which must outlive it.
    init(_ bytes: UnsafeRawBufferPointer) {
        self.bytes = bytes
    }

    /// True once every byte was taken.
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
        guard
            let text = String(validating: UnsafeRawBufferPointer(rebasing: bytes[(position + 1)..<end]), as: UTF8.self)
        else { return nil }
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
        // A number too small for a Double (1e-400) reads as 0 here; JSONDecoder refuses it.
        if value == 0,
            token.utf8.prefix(while: { $0 != 0x65 && $0 != 0x45 }).contains(where: { (0x31...0x39).contains($0) })
        {
            return nil
        }
        position = end
        return value
    }
}
