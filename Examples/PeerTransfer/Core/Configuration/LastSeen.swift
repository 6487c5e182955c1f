import Foundation
import Salut

/// When this device last reached each receiver it sent to (`CONFIG/last-seen.json`, name →
/// seconds since 1970), to tell a person that a paired receiver that does not answer now was
/// there five minutes ago. A view, not a record of trust: a file that cannot be read is empty,
/// and it is rewritten without being synced to disk.
public enum LastSeen {
    /// The file in `configuration`'s folder.
    static func file(in configuration: PeerConfiguration) -> String {
        (configuration.directory as NSString).appendingPathComponent("last-seen.json")
    }

    /// When `name` (compared without letter case) was last reached, if ever.
    public static func date(of name: String, in configuration: PeerConfiguration) -> Date? {
        let seen = read(file(in: configuration))
        let time = seen[name] ?? seen.first { ServiceNames.sameIgnoringASCIICase($0.key, name) }?.value
        return time.map { Date(timeIntervalSince1970: $0) }
    }

    /// Records that `name` was reached now (the file keeps the 200 latest names).
    static func record(_ name: String, in configuration: PeerConfiguration) {
        let path = file(in: configuration)
        var seen = read(path)
        seen[name] = Date().timeIntervalSince1970
        if seen.count > 200 {
            for (old, _) in seen.sorted(by: { $0.value < $1.value }).prefix(seen.count - 200) { seen[old] = nil }
        }
        if let data = try? JSONEncoder().encode(seen) {
            try? ConfigFile.write(data, to: path, mode: 0o600, durable: false)
        }
    }

    private static func read(_ path: String) -> [String: Double] {
        guard let data = FileManager.default.contents(atPath: path) else { return [:] }
        return (try? JSONDecoder().decode([String: Double].self, from: data)) ?? [:]
    }
}
