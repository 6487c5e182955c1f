import Foundation
import SalutStreams

/// A path a manifest may carry: relative, inside the inbox, storable on Linux.
///
/// It keeps the text it was checked from (which shares its storage with the manifest's), and
/// splits it into components when asked: a manifest of 100,000 deep paths would otherwise hold
/// millions of component strings for as long as its transfer runs.
public struct RelativePath: Sendable, Hashable, CustomStringConvertible {
    /// The checked text: components joined by `/`, none empty, `.` or `..`.
    private let text: String

    /// The path's components, none empty, `.` or `..`.
    public var components: [String] { Self.split(text) }

    /// `text` cut at each `/` byte. On bytes, not characters: Swift takes a `/` followed by a
    /// combining mark (U+0301) or a zero-width joiner for one character with it, which is not
    /// a `/` to compare or split on; the file system sees the `/` all the same.
    private static func split(_ text: String) -> [String] {
        text.utf8.split(separator: slash, omittingEmptySubsequences: false).map { String(decoding: $0, as: UTF8.self) }
    }

    private static let slash = UInt8(ascii: "/")

    /// Checks `text` against the protocol's rules, in Unicode's composed form (NFC): "é" sent
    /// as one code point or as "e" and a combining accent is one name, as a person reads it,
    /// so two files that look alike collide (and are numbered, or refused as one path offered
    /// twice) instead of lying side by side under names no one can tell apart.
    /// - Throws: ``PeerTransferError/unsafePath(_:)`` saying what is wrong: empty, absolute,
    ///   `.`/`..` components, NUL or other control characters (C0, DEL, C1), bidirectional
    ///   controls, over-long names or paths, too deep, or a name ending in the part-file suffix.
    public init(validating text: String) throws {
        // Cut to 200 bytes to be shown: a run of combining marks is one character of any length.
        let shown = Terminal.escape(Receiver.shortened(text, toBytes: 200))
        // The length first, on the text as sent: composing sorts runs of combining marks, which
        // costs the square of a run's length (a 400 KB path of marks would keep a core busy for
        // minutes); within the limit, a run costs little.
        guard text.utf8.count <= TransferLimits.maximumPathBytes else {
            throw PeerTransferError.unsafePath(
                "the path \"\(shown)\" is longer than \(TransferLimits.maximumPathBytes) bytes")
        }
        // ASCII is its own composed form (most paths: no copy made).
        let composed = TransferPlan.composed(text)
        if let why = Self.problem(with: composed) {
            let form = composed.utf8.elementsEqual(text.utf8) ? "" : " (in composed form, NFC)"
            throw PeerTransferError.unsafePath("the path \"\(shown)\"\(form) \(why)")
        }
        self.text = composed
    }

    /// Why `text` is no path the protocol carries ("contains NUL or another control
    /// character", "is deeper than 64 folders", …), or nil when it is one.
    public static func problem(with text: String) -> String? {
        guard !text.isEmpty else { return "is empty" }
        guard text.utf8.count <= TransferLimits.maximumPathBytes else {
            return "is longer than \(TransferLimits.maximumPathBytes) bytes"
        }
        // As bytes, like every check of `/` here (see `split`).
        guard text.utf8.first != Self.slash else { return "is absolute" }
        // Printable ASCII holds neither kind of character refused below: most paths are
        // passed by one look at their bytes (a tree's offer has thousands).
        let printableASCII = text.utf8.allSatisfy { $0 >= 0x20 && $0 < 0x7f }
        guard
            printableASCII
                || !text.unicodeScalars.contains(where: { $0.value < 0x20 || (0x7f...0x9f).contains($0.value) })
        else {
            return "contains NUL or another control character"
        }
        let parts = Self.split(text)
        guard parts.count <= TransferLimits.maximumDepth else {
            return "is deeper than \(TransferLimits.maximumDepth) folders"
        }
        for part in parts {
            guard !part.isEmpty else { return "has an empty component" }
            guard !part.utf8.elementsEqual(".".utf8) && !part.utf8.elementsEqual("..".utf8) else {
                return "has a \"\(part)\" component"
            }
            guard part.utf8.count <= TransferLimits.maximumNameBytes else {
                return "has a name longer than \(TransferLimits.maximumNameBytes) bytes"
            }
            // Compared as bytes: a character such as U+0600 joins the dot after it into one
            // grapheme, which would hide the suffix from a comparison of characters.
            // And without ASCII case: on vfat, exFAT or a case-folding ext4 folder,
            // "x.PEERXFER-PART" is the same file as "x.peerxfer-part".
            guard !TransferLimits.isPartName(part) else {
                return "ends in \(TransferLimits.partSuffix), which the inbox keeps for files still arriving"
            }
        }
        // Stored, a direction override makes "invoice<U+202E>fdp.exe" show as "invoiceexe.pdf" in a
        // file manager: a name that lies about its type. An invisible letter (a Hangul filler, a
        // soft hyphen, a tag character, a joiner beside ASCII…) makes "report<U+3164>.pdf" look
        // like "report.pdf": the characters a terminal is shown as escapes (DisguisingScalars).
        if !printableASCII {
            let scalars = Array(text.unicodeScalars)
            if scalars.indices.contains(where: { DisguisingScalars.mustEscape(scalars, at: $0) }) {
                return "contains a bidirectional control or invisible character, which can disguise a file's name"
            }
        }
        return nil
    }

    public var description: String { text }

    /// The last component.
    public var name: String {
        guard let slash = text.utf8.lastIndex(of: Self.slash) else { return text }
        return String(text[text.utf8.index(after: slash)...])
    }
    /// The components before the last.
    public var parent: [String] { Array(components.dropLast()) }
}

extension Manifest {
    /// Checks the whole manifest: the chunk size, the count, every path, sizes, digests, and no
    /// path given twice (compared as the file system would).
    /// - Throws: ``PeerTransferError/limit(_:)``, ``PeerTransferError/unsafePath(_:)`` or
    ///   ``PeerTransferError/protocolViolation(_:)`` for the first problem.
    func validate() throws -> [RelativePath] {
        guard chunkSize == TransferLimits.chunkSize else {
            throw PeerTransferError.protocolViolation(
                "a chunk size of \(chunkSize) bytes (this receiver uses \(TransferLimits.chunkSize))")
        }
        guard entries.count <= TransferLimits.maximumEntries else {
            throw PeerTransferError.limit(
                "\(entries.count) entries offered (the limit is \(TransferLimits.maximumEntries))")
        }
        // By bytes, as the file system compares names, of the composed forms (NFC: the two
        // spellings of "é" are one path).
        var seen = Set<[UInt8]>()
        var paths: [RelativePath] = []
        paths.reserveCapacity(entries.count)
        for entry in entries {
            let path = try RelativePath(validating: entry.path)
            guard seen.insert(Array(path.description.utf8)).inserted else {
                throw PeerTransferError.protocolViolation(
                    "the path \"\(Terminal.escape(entry.path))\" is offered twice (perhaps spelt two ways that Unicode holds equal)"
                )
            }
            switch entry.kind {
            case .file:
                guard entry.size <= TransferLimits.maximumFileSize else {
                    throw PeerTransferError.limit(
                        "\"\(Terminal.escape(entry.path))\" is \(entry.size) bytes (the limit is 1 TiB)")
                }
                // Its part file's path (from the inbox) must fit in a path too: what no call can
                // reach (PATH_MAX, 4,096 bytes with its NUL) no sweep or count could see.
                let partPathBytes =
                    path.description.utf8.count + TransferLimits.partName(of: "", from: "").utf8.count
                    - "unknown".utf8.count + TransferLimits.partTagDigits
                guard partPathBytes < TransferLimits.maximumPathBytes else {
                    throw PeerTransferError.unsafePath(
                        "\"\(Terminal.escape(Receiver.shortened(entry.path, toBytes: 200)))\" is a path of \(path.description.utf8.count) bytes; a file's path can be at most \(TransferLimits.maximumPathBytes - 1 - (partPathBytes - path.description.utf8.count)) (its part file's path, NAME.<24 hex of the sender's key>.peerxfer-part, must fit in \(TransferLimits.maximumPathBytes - 1))"
                    )
                }
                // It may arrive as NAME.<24 hex of the sender's key>.peerxfer-part first, which must fit in a file name too.
                let room = TransferLimits.maximumReceivedNameBytes
                guard path.name.utf8.count <= room else {
                    throw PeerTransferError.unsafePath(
                        "\"\(Terminal.escape(entry.path))\" has a file name of \(path.name.utf8.count) bytes; at most \(room) can be received (the part file's name, NAME.<24 hex of the sender's key>.peerxfer-part, must fit in 255)"
                    )
                }
            case .directory:
                guard entry.size == 0 else {
                    throw PeerTransferError.protocolViolation(
                        "the folder \"\(Terminal.escape(entry.path))\" has a size")
                }
            }
            paths.append(path)
        }
        try Self.checkNoFileIsAFolder(entries: entries, paths: paths)
        return paths
    }

    /// A file may not sit where another entry needs a folder. Each folder is numbered once, by
    /// its parent's number and its name, so the work grows with the manifest's size, not with
    /// its paths' depth times their length (a manifest of deep, long paths would otherwise keep
    /// a core busy for seconds).
    private static func checkNoFileIsAFolder(entries: [ManifestEntry], paths: [RelativePath]) throws {
        struct Node: Hashable {
            var parent: Int
            /// The name's bytes (names are told apart as the file system does).
            var name: [UInt8]
        }
        var numbers: [Node: Int] = [:]
        var folders = Set<Int>()
        var files: [Int: String] = [:]
        func number(_ node: Node) -> Int {
            if let known = numbers[node] { return known }
            let new = numbers.count + 1
            numbers[node] = new
            return new
        }
        for (entry, path) in zip(entries, paths) {
            var parent = 0
            for component in path.components.dropLast() {
                parent = number(Node(parent: parent, name: Array(component.utf8)))
                folders.insert(parent)
            }
            if entry.kind == .file { files[number(Node(parent: parent, name: Array(path.name.utf8)))] = entry.path }
        }
        if let clash = files.first(where: { folders.contains($0.key) }) {
            throw PeerTransferError.protocolViolation(
                "\"\(Terminal.escape(clash.value))\" is offered as a file and as a folder")
        }
    }
}

/// The text form of a SHA-256 digest, as peerxfer writes and checks it.
public enum SHA256DigestText {
    /// True for 64 lowercase hexadecimal digits.
    public static func isValid(_ text: String) -> Bool {
        text.utf8.count == 64 && text.utf8.allSatisfy { (48...57).contains($0) || (97...102).contains($0) }
    }
}
