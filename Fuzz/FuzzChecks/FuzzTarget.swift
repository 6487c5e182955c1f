#if FUZZING
import CLibFuzzer
#endif
import Foundation

/// The fuzz targets, each a property check over one input of arbitrary bytes.
///
/// The same checks run in three places: under libFuzzer (`Scripts/fuzz`, where a violated
/// property traps and libFuzzer keeps the input), in each target's corpus replayer (the target
/// built without the fuzzer, given files or directories), and in the XCTest replay tests, which
/// run every committed seed and regression input (`Fuzz/Corpus/<Target>/`,
/// `Fuzz/Regressions/<Target>/`).
public enum FuzzTarget: String, CaseIterable, Sendable {
    /// TXT record parsing (strict and lenient) and building (``TXTRecordChecks``).
    case txtRecord = "FuzzTXTRecord"
    /// Service name, type, subtype, domain and port validation (``ServiceNameChecks``).
    case serviceNames = "FuzzServiceNames"
    /// A bound stream pair under a program of opens, reads, writes and closes (``BoundPairChecks``).
    case boundPair = "FuzzBoundPair"
    /// Pin parsing: ASCII hex or base64 only (``PinChecks``).
    case pins = "FuzzPins"

    /// Runs the target's checks on `input`.
    /// - Throws: ``PropertyViolation`` naming the property the input breaks.
    public func check(_ input: [UInt8]) throws(PropertyViolation) {
        switch self {
        case .txtRecord: try TXTRecordChecks.check(input)
        case .serviceNames: try ServiceNameChecks.check(input)
        case .boundPair: try BoundPairChecks.check(input)
        case .pins: try PinChecks.check(input)
        }
    }

    /// libFuzzer's `LLVMFuzzerTestOneInput` body: checks the input and traps on a violation, so
    /// that libFuzzer reports it as a crash and saves the input. Always returns 0 (keep the input
    /// in the corpus if it is interesting).
    public func fuzz(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
        let input = Array(UnsafeBufferPointer(start: data, count: data == nil ? 0 : size))
        do {
            try check(input)
        } catch {
            fatalError("\(rawValue): \(error)")
        }
        return 0
    }

    /// The fuzz target's `main`. In a build with `-sanitize=fuzzer -D FUZZING` it hands the
    /// command line and `entry` (the target's `LLVMFuzzerTestOneInput`) to libFuzzer's driver:
    /// SwiftPM gives every executable a `main` of its own, so libFuzzer's cannot be used.
    /// Otherwise it is the replayer (``replayMain(_:)``).
    public func main(fuzzing entry: @convention(c) (UnsafePointer<UInt8>?, Int) -> CInt) -> Never {
        #if FUZZING
        var argc = CommandLine.argc
        var argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>? = CommandLine.unsafeArgv
        exit(LLVMFuzzerRunDriver(&argc, &argv, entry))
        #else
        replayMain(Array(CommandLine.arguments.dropFirst()))
        #endif
    }

    // MARK: Saved inputs

    /// The `Fuzz/` directory of the source tree (found from this file's path, so that tests run
    /// from any directory find the committed inputs).
    public static var fuzzDirectory: URL {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
    }

    /// The committed seed corpus, `Fuzz/Corpus/<Target>/`.
    public var corpusDirectory: URL {
        Self.fuzzDirectory.appendingPathComponent("Corpus").appendingPathComponent(rawValue)
    }

    /// Crashing inputs found by fuzzing, kept as regression tests: `Fuzz/Regressions/<Target>/`.
    public var regressionsDirectory: URL {
        Self.fuzzDirectory.appendingPathComponent("Regressions").appendingPathComponent(rawValue)
    }

    /// Every committed input of this target (seeds, then regressions), sorted by path.
    public var savedInputs: [URL] {
        [corpusDirectory, regressionsDirectory].flatMap(Self.files(in:))
    }

    /// The regular files in `directory` (not hidden), sorted; none when it does not exist.
    static func files(in directory: URL) -> [URL] {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: directory.path)) ?? []
        return names.filter { !$0.hasPrefix(".") }.sorted().map { directory.appendingPathComponent($0) }.filter {
            var isDirectory: ObjCBool = false
            return FileManager.default.fileExists(atPath: $0.path, isDirectory: &isDirectory) && !isDirectory.boolValue
        }
    }

    // MARK: Replaying

    /// The replayer's `main` (the target built without `-sanitize=fuzzer`): checks each file
    /// named in `arguments` (a directory stands for the files in it; no arguments: the committed
    /// inputs), prints one line per failing input and a summary, and exits with status 1 when
    /// any input fails.
    public func replayMain(_ arguments: [String]) -> Never {
        if arguments.contains("--help") || arguments.contains("-h") {
            print(
                """
                usage: \(rawValue) [FILE|DIRECTORY ...]
                Checks each input with \(rawValue)'s properties (this is the replayer: the target \
                built without -sanitize=fuzzer). No arguments: the committed inputs under \
                Fuzz/Corpus/\(rawValue) and Fuzz/Regressions/\(rawValue). Scripts/fuzz runs the fuzzer.
                """)
            exit(0)
        }
        let inputs =
            arguments.isEmpty
            ? savedInputs
            : arguments.flatMap { argument -> [URL] in
                let url = URL(fileURLWithPath: argument)
                var isDirectory: ObjCBool = false
                let exists = FileManager.default.fileExists(atPath: url.path, isDirectory: &isDirectory)
                return exists && isDirectory.boolValue ? Self.files(in: url) : [url]
            }
        let failures = failures(replaying: inputs)
        failures.forEach { print($0) }
        print("\(rawValue): \(inputs.count) inputs, \(failures.count) failed")
        exit(failures.isEmpty ? 0 : 1)
    }

    /// Checks each input file; one line (path and violation) per file that fails or cannot be read.
    public func failures(replaying inputs: [URL]) -> [String] {
        inputs.compactMap { url in
            guard let data = FileManager.default.contents(atPath: url.path) else { return "\(url.path): cannot read" }
            do {
                try check([UInt8](data))
                return nil
            } catch {
                return "\(url.path): \(error)"
            }
        }
    }
}

/// A property a fuzz input breaks, in words.
public struct PropertyViolation: Error, CustomStringConvertible, Sendable {
    /// What went wrong, with the values involved.
    public let description: String

    /// A violation described by `description`.
    public init(_ description: String) { self.description = description }
}

/// Throws a ``PropertyViolation`` saying `message` unless `condition` holds.
func require(_ condition: Bool, _ message: @autoclosure () -> String) throws(PropertyViolation) {
    if !condition { throw PropertyViolation(message()) }
}

/// Reads the fuzz input as a stream of small values; past the end every read gives zeros, so
/// any input is a complete program.
struct ByteReader {
    private let bytes: [UInt8]
    private var index = 0

    init(_ bytes: [UInt8]) { self.bytes = bytes }

    /// Whether every byte has been read.
    var isAtEnd: Bool { index >= bytes.count }

    /// The next byte, or 0 past the end.
    mutating func byte() -> UInt8 {
        guard index < bytes.count else { return 0 }
        defer { index += 1 }
        return bytes[index]
    }

    /// The next `count` bytes (fewer at the end).
    mutating func bytes(_ count: Int) -> [UInt8] {
        let end = min(bytes.count, index + max(0, count))
        defer { index = end }
        return Array(bytes[min(index, end)..<end])
    }

    /// The bytes up to (not including) the next `separator`, which is skipped; the rest when
    /// there is none.
    mutating func bytes(upTo separator: UInt8) -> [UInt8] {
        let start = min(index, bytes.count)
        let end = bytes[start...].firstIndex(of: separator) ?? bytes.count
        index = end + 1
        return Array(bytes[start..<end])
    }
}
