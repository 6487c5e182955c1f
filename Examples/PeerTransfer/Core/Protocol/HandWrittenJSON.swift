import Foundation

/// A message whose JSON is written by hand: those sent large or often (a manifest or an
/// answer of 10,000 entries, a result per file), for which `JSONEncoder` cost several
/// microseconds an entry on both ends' critical path. The text is plain JSON with sorted keys
/// and nil values left out, as `JSONEncoder` writes it, so `JSONDecoder` reads it back as the
/// same `Codable` value (the tests check that for each type).
protocol HandWrittenJSON {
    /// The message as JSON.
    var json: String { get }
}

extension FileResult: HandWrittenJSON {
    var json: String {
        var out = "{"
        if let error { out += "\"error\":" + JSONLine.string(error) + "," }
        out += "\"index\":" + String(index)
        if let storedAs { out += ",\"storedAs\":" + JSONLine.string(storedAs) }
        return out + ",\"verified\":" + (verified ? "true" : "false") + "}"
    }
}

extension Answer: HandWrittenJSON {
    var json: String {
        var out = "{\"accepted\":["
        for (position, entry) in accepted.enumerated() {
            if position > 0 { out += "," }
            out += "{"
            if let existing = entry.existing { out += "\"existing\":" + JSONLine.string(existing) + "," }
            out += "\"have\":[" + entry.have.map(JSONLine.string).joined(separator: ",") + "]"
            out += ",\"index\":" + String(entry.index) + "}"
        }
        out += "]"
        if let cause { out += ",\"cause\":" + JSONLine.string(cause) }
        if let reason { out += ",\"reason\":" + JSONLine.string(reason) }
        return out + "}"
    }
}

extension Manifest: HandWrittenJSON {
    var json: String {
        var out = "{\"chunkSize\":" + String(chunkSize) + ",\"entries\":["
        out.reserveCapacity(out.utf8.count + entries.count * 120)
        for (position, entry) in entries.enumerated() {
            if position > 0 { out += "," }
            out += "{\"kind\":\"" + entry.kind.rawValue + "\",\"mode\":" + String(entry.mode)
            // A time from stat(2) is always finite; anything else goes as 0, which JSON can hold.
            out += ",\"modified\":" + (entry.modified.isFinite ? String(entry.modified) : "0")
            out += ",\"path\":" + JSONLine.string(entry.path) + ",\"size\":" + String(entry.size) + "}"
        }
        return out + "]}"
    }
}
