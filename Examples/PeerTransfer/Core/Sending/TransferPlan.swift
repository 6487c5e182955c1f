import Foundation
import SalutStreams

/// What a sender offers: the manifest, and where each file's bytes come from.
public struct TransferPlan: Sendable {
    /// The manifest to send.
    public var manifest: Manifest
    /// The local file behind each manifest entry (nil for folders), by index.
    public var sources: [String?]
    /// Things left out, for the user (symlinks, sockets, entries that cannot be listed, names
    /// the protocol cannot carry).
    public var skipped: [Skipped]

    /// A local entry left out of the offer, and why.
    public struct Skipped: Sendable, CustomStringConvertible {
        /// Its path, as the walk found it (not escaped).
        public var path: String
        /// Why it is left out ("a symlink (not followed)", "not sent, its path contains …").
        public var reason: String
        /// "PATH: REASON" (not escaped).
        public var description: String { "\(path): \(reason)" }
    }

    /// Walks `paths` (files and folders; each lands in the receiver's inbox under its last
    /// component). Files are hashed later, as they are sent. Inside a folder, an entry whose
    /// name the protocol cannot carry is left out and listed in ``skipped``.
    /// - Throws: ``PeerTransferError/usage(_:)`` for a path that does not exist, two arguments
    ///   with the same last component, or an argument whose own name the protocol cannot carry;
    ///   ``PeerTransferError/limit(_:)`` beyond the protocol's limits;
    ///   ``PeerTransferError/runtime(_:)`` when a file cannot be opened for reading.
    public static func make(paths: [String]) throws -> TransferPlan {
        var plan = TransferPlan(
            manifest: Manifest(chunkSize: TransferLimits.chunkSize, entries: []), sources: [], skipped: [])
        for argument in try checkArguments(paths) {
            try plan.add(argument.path, as: argument.name, info: argument.info)
            guard plan.manifest.entries.count <= TransferLimits.maximumEntries else {
                throw PeerTransferError.limit("more than \(TransferLimits.maximumEntries) files and folders")
            }
        }
        do {
            _ = try plan.manifest.validate()
        } catch let error as PeerTransferError {
            throw PeerTransferError.usage(error.message)
        }
        return plan
    }

    /// Checks the arguments themselves, without walking any folder (a typo fails at once):
    /// each exists, is not the root, and no two share a last component.
    /// - Returns: each argument's absolute path, the name it lands under, and its `lstat`.
    /// - Throws: ``PeerTransferError/usage(_:)`` for the first bad argument.
    @discardableResult
    public static func checkArguments(_ paths: [String]) throws -> [(path: String, name: String, info: stat)] {
        var roots = Set<String>()
        var checked: [(path: String, name: String, info: stat)] = []
        for argument in paths {
            let url = URL(fileURLWithPath: argument).standardizedFileURL
            var info = stat()
            guard lstat(url.path, &info) == 0 else {
                throw PeerTransferError.usage("\(argument): \(String(cString: strerror(errno)))")
            }
            let rootName = url.lastPathComponent
            guard rootName != "/" && !rootName.isEmpty else {
                throw PeerTransferError.usage("cannot send the root folder itself")
            }
            guard roots.insert(rootName).inserted else {
                throw PeerTransferError.usage(
                    "two arguments are named \"\(rootName)\"; they would land on the same path")
            }
            checked.append((url.path, rootName, info))
        }
        return checked
    }

    /// ``make(paths:)`` on a thread outside Swift's cooperative pool: walking a large tree
    /// takes blocking calls, which must not hold up a daemon's other tasks.
    /// - Throws: what ``make(paths:)`` throws.
    public static func prepare(paths: [String]) async throws -> TransferPlan {
        try await onThreadOfItsOwn { Result { try make(paths: paths) } }.get()
    }

    /// A file's modification time as the manifest carries it (seconds since 1970); the sender
    /// compares it again when it opens the file, so both sides compute it here.
    static func modificationTime(_ info: stat) -> Double {
        Double(info.st_mtim.tv_sec) + Double(info.st_mtim.tv_nsec) / 1e9
    }

    /// Why the protocol cannot carry an entry at `relative` (its last component `name`), or nil.
    /// Judged in the composed form (NFC) the receiver stores it in, which can be longer.
    private static func unsendable(_ relative: String, name: String, isFile: Bool) -> String? {
        if let why = RelativePath.problem(with: composed(relative)) { return why }
        // A file arrives as NAME.<24 hex>.peerxfer-part first, which must fit in a name too.
        let room = TransferLimits.maximumReceivedNameBytes
        let size = composed(name).utf8.count
        let form = size == name.utf8.count ? "" : " (in composed form, NFC)"
        if isFile && size > room { return "has a file name of \(size) bytes\(form); at most \(room) can be received" }
        return nil
    }

    /// How `name` is spelt beyond ASCII, to tell apart two names that look the same:
    /// "with U+0065 U+0301" (the non-ASCII characters, and the letter each mark follows).
    static func spelled(_ name: String) -> String {
        let scalars = Array(name.unicodeScalars)
        var shown: [String] = []
        for (index, scalar) in scalars.enumerated() where !scalar.isASCII {
            if index > 0, scalars[index - 1].isASCII, scalar.properties.generalCategory == .nonspacingMark {
                shown.append(String(format: "U+%04X", scalars[index - 1].value))
            }
            shown.append(String(format: "U+%04X", scalar.value))
        }
        guard !shown.isEmpty else { return "all ASCII" }
        return "with " + shown.prefix(8).joined(separator: " ") + (shown.count > 8 ? " …" : "")
    }

    /// `text` in Unicode's composed form (NFC), as the receiver stores names (ASCII as it is).
    static func composed(_ text: String) -> String {
        text.utf8.allSatisfy { $0 < 0x80 } ? text : text.precomposedStringWithCanonicalMapping
    }

    private mutating func add(_ path: String, as relative: String, info: stat) throws {
        let kind = info.st_mode & S_IFMT
        let modified = Self.modificationTime(info)
        switch kind {
        case S_IFREG:
            // Unreadable files fail the plan now, with their names, not the transfer half way.
            let fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC)
            guard fd >= 0 else {
                throw PeerTransferError.runtime("cannot read \(path): \(String(cString: strerror(errno)))")
            }
            close(fd)
            manifest.entries.append(
                ManifestEntry(
                    path: relative, kind: .file, size: UInt64(info.st_size),
                    mode: UInt32(info.st_mode & 0o777), modified: modified))
            sources.append(path)
        case S_IFDIR:
            manifest.entries.append(
                ManifestEntry(
                    path: relative, kind: .directory, size: 0,
                    mode: UInt32(info.st_mode & 0o777), modified: modified))
            sources.append(nil)
            try addChildren(of: path, as: relative)
        case S_IFLNK:
            skipped.append(Skipped(path: path, reason: "a symlink (not followed)"))
        default:
            skipped.append(Skipped(path: path, reason: "not a regular file or folder"))
        }
    }

    /// Adds what the folder `path` (`relative` in the manifest) holds, in name order; a name
    /// that cannot be sent leaves out that entry alone, with why.
    private mutating func addChildren(of path: String, as relative: String) throws {
        let children: [String]
        do {
            children = try FileManager.default.contentsOfDirectory(atPath: path).sorted()
        } catch {
            throw PeerTransferError.runtime("cannot list \(path): \(error.localizedDescription)")
        }
        // A name that is not UTF-8 comes out of the listing with U+FFFD for its bad bytes: it
        // then names nothing, or another entry (listed twice). Either way it is left out.
        let notUTF8 = "not sent, its name is not valid UTF-8 (peerxfer sends UTF-8 names)"
        var seen = Set<[UInt8]>()
        // Names by their composed form: two spellings of one name ("é" as one code point and
        // as "e" and an accent) are one name at the receiver, so the second is left out.
        var spellings: [[UInt8]: String] = [:]
        for child in children {
            let childPath = (path as NSString).appendingPathComponent(child)
            guard seen.insert(Array(child.utf8)).inserted else {
                skipped.append(Skipped(path: childPath, reason: notUTF8))
                continue
            }
            if let twin = spellings.updateValue(child, forKey: Array(Self.composed(child).utf8)) {
                spellings[Array(Self.composed(child).utf8)] = twin
                skipped.append(Self.anotherSpelling(child, of: twin, in: path))
                continue
            }
            var childInfo = stat()
            guard lstat(childPath, &childInfo) == 0 else {
                let reason = child.unicodeScalars.contains("\u{FFFD}") ? notUTF8 : String(cString: strerror(errno))
                skipped.append(Skipped(path: childPath, reason: reason))
                continue
            }
            // A name the protocol cannot carry (a control character, say) leaves out that
            // entry, not the whole send: the rest of the tree goes, and the user is told.
            let childRelative = relative + "/" + child
            if let why = Self.unsendable(childRelative, name: child, isFile: childInfo.st_mode & S_IFMT == S_IFREG) {
                skipped.append(Skipped(path: childPath, reason: "not sent, its path \(why)"))
                continue
            }
            try add(childPath, as: childRelative, info: childInfo)
            guard manifest.entries.count <= TransferLimits.maximumEntries else {
                throw PeerTransferError.limit("more than \(TransferLimits.maximumEntries) files and folders")
            }
        }
    }

    /// `name` in `folder` left out: it is another spelling of `twin`'s in Unicode.
    private static func anotherSpelling(_ name: String, of twin: String, in folder: String) -> Skipped {
        Skipped(
            path: (folder as NSString).appendingPathComponent(name),
            reason:
                "not sent, its name (\(spelled(name))) is another spelling of \"\((folder as NSString).appendingPathComponent(twin))\" (\(spelled(twin))) in Unicode: the receiver stores names in composed form (NFC), where the two are one; rename one of them"
        )
    }
}
