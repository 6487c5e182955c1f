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
            if scanner.take("true") {
                verified = true
            } else if scanner.take("false") {
                verified = false
            } else {
                return nil
            }
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
                scanner.take(",\"entries\":[")
            else { return nil }
            var entries: [ManifestEntry] = []
            if !scanner.take("]") {
                repeat {
                    guard scanner.take("{\"kind\":") else { return nil }
                    let kind: ManifestEntry.Kind
                    if scanner.take("\"file\"") {
                        kind = .file
                    } else if scanner.take("\"directory\"") {
                        kind = .directory
                    } else {
                        return nil
                    }
                    guard scanner.take(",\"mode\":"), let mode = scanner.unsigned(below: UInt64(UInt32.max) + 1),
                        scanner.take(",\"modified\":"), let modified = scanner.number(),
                        scanner.take(",\"path\":"), let path = scanner.string(),
                        scanner.take(",\"size\":"), let size = scanner.unsigned(below: UInt64.max),
                        scanner.take("}")
                    else { return nil }
                    entries.append(
                        ManifestEntry(path: path, kind: kind, size: size, mode: UInt32(mode), modified: modified))
                } while scanner.take(",")
                guard scanner.take("]") else { return nil }
            }
            guard scanner.take("}"), scanner.isAtEnd else { return nil }
            return Manifest(chunkSize: Int(chunkSize), entries: entries)
        }
    }
}

extension Answer: HandReadJSON {
    static func quickly(from payload: Data) -> Answer? {
        payload.withUnsafeBytes { bytes -> Answer? in
            var scanner = JSONScanner(bytes)
            guard scanner.take("{\"accepted\":[") else { return nil }
            var accepted: [Entry] = []
            if !scanner.take("]") {
                repeat {
                    guard scanner.take("{") else { return nil }
                    var existing: String?
                    if scanner.take("\"existing\":") {
                        guard let text = scanner.string(), scanner.take(",") else { return nil }
                        existing = text
                    }
                    guard scanner.take("\"have\":[") else { return nil }
                    var have: [String] = []
                    if !scanner.take("]") {
                        repeat {
                            guard let digest = scanner.string() else { return nil }
                            have.append(digest)
                        } while scanner.take(",")
                        guard scanner.take("]") else { return nil }
                    }
                    guard scanner.take(",\"index\":"), let index = scanner.unsigned(below: UInt64(Int.max)),
                        scanner.take("}")
                    else { return nil }
                    accepted.append(Entry(index: Int(index), have: have, existing: existing))
                } while scanner.take(",")
                guard scanner.take("]") else { return nil }
            }
            var cause: String?
            if scanner.take(",\"cause\":") {
                guard let text = scanner.string() else { return nil }
                cause = text
            }
            var reason: String?
            if scanner.take(",\"reason\":") {
                guard let text = scanner.string() else { return nil }
                reason = text
            }
            guard scanner.take("}"), scanner.isAtEnd else { return nil }
            return Answer(accepted: accepted, reason: reason, cause: cause)
        }
    }
}
