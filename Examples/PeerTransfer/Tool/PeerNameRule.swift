import ArgumentParser
import Foundation
import PeerTransferCore
import SalutDiscovery
import SalutStreams

/// What a peer's name given on the command line may be: what DNS-SD carries (1 to 63 bytes of
/// UTF-8), without the characters a terminal cannot show as they are (controls, DEL, C1,
/// bidirectional and invisible format characters), and not `.` or `..`. Such a name could
/// never be told apart from another on a screen, so it is refused at once (exit 2) rather than
/// looked up and waited for.
enum PeerNameRule {
    /// Why `name` cannot be a peer's name given to `option`; nil when it can.
    static func problem(_ name: String, option: String) -> String? {
        if name.isEmpty { return "\(option) needs a name" }
        if name == "." || name == ".." { return "\(option) \"\(name)\" is not a name" }
        do {
            try ServiceNames.checkName(name, allowEmpty: false)
        } catch {
            return "\(option): \(Terminal.escape("\(error)"))"
        }
        if let first = name.unicodeScalars.first, let last = name.unicodeScalars.last,
            first.properties.isWhitespace || last.properties.isWhitespace
        {
            return
                "\(option) \"\(Terminal.escape(name))\" begins or ends with a space, which no one could see on a screen"
        }
        let scalars = Array(name.unicodeScalars)
        if scalars.indices.contains(where: { DisguisingScalars.mustEscape(scalars, at: $0) }) {
            return
                "\(option) \"\(Terminal.escape(name))\" holds control or invisible characters (shown escaped), which no one could tell apart on a screen"
        }
        return nil
    }

    /// Throws a usage error for a name that cannot be a peer's.
    /// - Throws: `ValidationError` saying why.
    static func check(_ name: String, option: String) throws {
        if let problem = problem(name, option: option) { throw ValidationError(problem) }
    }
}

/// Arguments that are not valid UTF-8: Swift would read them with U+FFFD in place of the bad
/// bytes, and a name or path would silently become another. Found in the raw `argv`.
enum RawArguments {
    /// The first argument that is not valid UTF-8, escaped for the terminal, with its position.
    static func firstInvalid() -> (position: Int, shown: String)? {
        for index in 1..<Int(CommandLine.argc) {
            guard let pointer = CommandLine.unsafeArgv[index] else { continue }
            if String(validatingCString: pointer) == nil {
                let bytes = UnsafeBufferPointer(
                    start: UnsafeRawPointer(pointer).assumingMemoryBound(to: UInt8.self), count: strlen(pointer))
                let shown = bytes.map {
                    $0 < 0x80 && $0 >= 0x20 && $0 != 0x7f ? String(UnicodeScalar($0)) : String(format: "\\x%02x", $0)
                }.joined()
                return (index, shown)
            }
        }
        return nil
    }
}
