import ArgumentParser
import Foundation
import Salut

/// Checks of command-line input that run in `validate()`, before the daemon is contacted, so a
/// usage error is exit 2 whether or not an avahi-daemon runs.
enum Input {
    /// The command-line arguments whose bytes are not UTF-8: the raw bytes, and the string Swift
    /// made of them (`CommandLine.arguments` replaces each bad byte with U+FFFD).
    static let notUTF8: [(bytes: [UInt8], decoded: String)] = {
        var found: [(bytes: [UInt8], decoded: String)] = []
        for index in 0..<Int(CommandLine.argc) {
            guard let pointer = CommandLine.unsafeArgv[index] else { continue }
            let bytes = pointer.withMemoryRebound(to: UInt8.self, capacity: strlen(pointer) + 1) {
                Array(UnsafeBufferPointer(start: $0, count: strlen(pointer)))
            }
            if String(validating: bytes, as: UTF8.self) == nil {
                found.append((bytes, String(decoding: bytes, as: UTF8.self)))
            }
        }
        return found
    }()

    /// Refuses `value` (what the user gave as `what`, for example "the service name") when it
    /// came from an argument that is not UTF-8, instead of using it with U+FFFD in place of the
    /// bad bytes.
    static func requireUTF8(_ value: String, _ what: String) throws {
        guard value.unicodeScalars.contains("\u{FFFD}"),
            let argument = notUTF8.first(where: { $0.decoded.contains(value) })
        else { return }
        throw ValidationError("\(what) is not valid UTF-8: \"\(shown(argument.bytes))\"")
    }

    /// Runs a library check, turning its validation error into a usage error with the library's
    /// message (made safe to print).
    static func check(_ body: () throws -> Void) throws {
        do {
            try body()
        } catch let error as DiscoveryError {
            throw ValidationError(Terminal.escaped(error.description))
        }
    }

    /// Bytes as text: printable ASCII as it is, every other byte as `\xHH`.
    private static func shown(_ bytes: [UInt8]) -> String {
        bytes.map { (0x20..<0x7F).contains($0) ? String(UnicodeScalar($0)) : String(format: "\\x%02X", $0) }.joined()
    }
}

extension Publish {
    /// The TXT arguments as a record: `KEY=VALUE` or `KEY` alone (a boolean attribute). Keys that
    /// repeat, in any case (`a=1 A=2`: TXT keys are case-insensitive), are a usage error.
    func txtRecord() throws -> TXTRecord {
        var record = TXTRecord()
        for item in txt { try Self.add(item, to: &record) }
        if let txtFile {
            // One KEY=VALUE (or KEY) a line, without the spaces around it; blank lines and lines
            // starting with # are skipped.
            let shown = Terminal.escaped(txtFile)
            guard access(txtFile, R_OK) == 0 else {
                throw ValidationError("--txt-file \(shown): \(String(cString: strerror(errno)))")
            }
            var isFolder: ObjCBool = false
            guard FileManager.default.fileExists(atPath: txtFile, isDirectory: &isFolder), !isFolder.boolValue else {
                throw ValidationError("--txt-file \(shown) is a folder; give a file of KEY=VALUE lines")
            }
            guard let data = FileManager.default.contents(atPath: txtFile),
                let text = String(data: data, encoding: .utf8)
            else {
                throw ValidationError("--txt-file \(shown) is not UTF-8 text")
            }
            for (number, line) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
                let item = line.trimmingCharacters(in: .whitespaces)
                guard !item.isEmpty, !item.hasPrefix("#") else { continue }
                do {
                    try Self.add(item, to: &record)
                } catch let error as ValidationError {
                    throw ValidationError("--txt-file \(shown), line \(number + 1): \(error.message)")
                }
            }
        }
        return record
    }

    /// Adds `KEY=VALUE` (or `KEY`, a boolean attribute) to `record`.
    private static func add(_ item: String, to record: inout TXTRecord) throws {
        try Input.requireUTF8(item, "a TXT attribute")
        try Input.check {
            if let eq = item.firstIndex(of: "=") {
                try record.add(String(item[..<eq]), Data(item[item.index(after: eq)...].utf8))
            } else {
                try record.add(item, nil)
            }
        }
    }

    /// Everything `publish` checks before it asks the daemon: UTF-8 arguments, the name, type,
    /// subtypes, domain and port, and the TXT record (keys, and its size against
    /// ``TXTRecord/maximumPublishedSize``).
    func validateInput() throws {
        try Input.requireUTF8(name, "the service name")
        try Input.requireUTF8(type, "the service type")
        try Input.requireUTF8(domain, "--domain")
        for subtype in subtypes { try Input.requireUTF8(subtype, "--subtype") }
        let record = try txtRecord()
        try Input.check {
            try ServiceAdvertisement.validate(
                name: name, type: type, domain: domain, port: port, txtRecord: record,
                subtypes: subtypes)
        }
    }

    /// Warns on stderr when the record is larger than RFC 6763 §6.2 advises.
    static func warnIfLarge(_ record: TXTRecord) {
        guard record.size > TXTRecord.recommendedMaximumSize else { return }
        Output.standardError(
            "netsvc: warning: the TXT record is \(record.size) bytes; RFC 6763 §6.2 "
                + "advises under \(TXTRecord.recommendedMaximumSize) so that it fits in one packet\n")
    }
}
