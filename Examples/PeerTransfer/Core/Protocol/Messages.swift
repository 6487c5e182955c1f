import Foundation

/// The first message each way: who is speaking and which protocol version.
struct Hello: Codable, Sendable, Equatable {
    var protocolVersion: Int
    var device: String
    var name: String
}

/// One file or folder offered by a sender.
public struct ManifestEntry: Codable, Sendable, Hashable {
    /// A file's bytes, or a folder (possibly empty).
    public enum Kind: String, Codable, Sendable { case file, directory }

    /// The path relative to the receiver's inbox, `/`-separated.
    public var path: String
    public var kind: Kind
    /// Bytes (0 for folders).
    public var size: UInt64
    /// Permission bits (only the 0o777 part is applied).
    public var mode: UInt32
    /// Modification time, seconds since 1970.
    public var modified: Double

    /// Makes an entry; see each property. (A file's SHA-256 is not here: the sender computes it
    /// while it sends the bytes, and sends it after them in a `fileEnd` message.)
    public init(path: String, kind: Kind, size: UInt64, mode: UInt32, modified: Double) {
        self.path = path
        self.kind = kind
        self.size = size
        self.mode = mode
        self.modified = modified
    }
}

/// What the sender offers.
public struct Manifest: Codable, Sendable, Equatable {
    /// Bytes per chunk (``TransferLimits/chunkSize``).
    public var chunkSize: Int
    public var entries: [ManifestEntry]

    /// Total bytes of the files.
    public var totalBytes: UInt64 { entries.reduce(0) { $0 + $1.size } }
    /// How many entries are files.
    public var fileCount: Int { entries.filter { $0.kind == .file }.count }
}

/// The receiver's decision, entry by entry, with what it already has of each accepted file.
struct Answer: Codable, Sendable, Equatable {
    struct Entry: Codable, Sendable, Equatable {
        var index: Int
        /// SHA-256 of each whole chunk of the part file already on disk, in order: the sender
        /// resumes after the longest prefix that matches its own chunks.
        var have: [String]
        /// The SHA-256 of the file the inbox already holds under this entry's name with this
        /// entry's size, if any: a sender whose file has that digest sends no bytes for it,
        /// only its `fileEnd`.
        var existing: String?

        init(index: Int, have: [String] = [], existing: String? = nil) {
            self.index = index
            self.have = have
            self.existing = existing
        }
    }

    /// The accepted entries; every other entry is declined.
    var accepted: [Entry]
    /// Why some or all were declined, for the sender's user.
    var reason: String?
    /// Who declined the entries not accepted, as a failure frame's code names it (`declined`
    /// for a person, `declined-hook` for the accept hook); nil when all were accepted, or from
    /// a receiver that does not say (read as a person).
    var cause: String?
}

/// The receiver's word on one file.
struct FileResult: Codable, Sendable, Equatable {
    var index: Int
    var verified: Bool
    /// The name it was stored under (differs from the offered path when that name was taken).
    var storedAs: String?
    var error: String?
}

/// The end of the sender's data.
struct Done: Codable, Sendable, Equatable {}

/// The receiver's last word.
struct Summary: Codable, Sendable, Equatable {
    var verified: Int
    var failed: Int
}

/// A failure that ends the connection.
struct Failure: Codable, Sendable, Equatable {
    var code: String
    var message: String
}
