import Foundation
import Glibc

/// Keys trusted on first use, one per peer name, in a file a person may edit: the book an app
/// keeps beside connections pinned to advertised keys
/// (`DiscoveredService.connect(pinningAdvertisedKey:trustedKeys:tls:)`) and beside a listener
/// that judges each client by its key.
///
/// ```swift
/// let book = try TrustedKeys(path: directory + "/known")
/// if try book.trustOnFirstUse(clientKey, for: "alice") { /* alice's key, now or from before */ }
/// ```
///
/// Names are whatever the app keys its peers by (for a discovered service, its instance name
/// alone: the same name under another type or domain shares its entry), compared byte for byte
/// but for ASCII case, as DNS compares names; a name is trusted only in Unicode's composed form
/// (NFC), so that no name written with other code points (a Kelvin sign for a `K`) can be
/// trusted beside the one it looks like (one read from the file is left out). At most
/// ``maximumEntries`` names are trusted on first use. The file is a JSON object from each name to its key's
/// SHA-256 fingerprint (64 lowercase hex digits), written whole and atomically (mode 0600) at
/// every change, under an exclusive lock on `FILE.lock` and from a fresh read, so that books
/// in several processes keep each other's keys. It is refused when someone other than its
/// owner (or root) could have written it or replaced it: the file must be the user's or
/// root's, with no write permission for group or others, not a symbolic link, in a folder that
/// is the user's or root's and that others cannot write, or can only as in `/tmp` (sticky)). It is read again whenever it changed on disk since
/// it was last read (by its size, modification time, inode, owner and permissions), so a person who removes the
/// entry of a peer whose key changed is heard at the next look-up, with no restart. A file
/// that became unreadable, malformed, writable by others, or was removed while in use leaves
/// the book as it was (what was trusted stays trusted; nothing is trusted anew because of it)
/// and is not written over: trusting or forgetting a key fails with ``Failure`` until it is
/// mended. To forget every key, write `{}` to it.
///
/// Concurrency: the entries and the stamp of the file they came from are behind one lock, and
/// the file is read and written under it; a change takes the file lock first (across
/// processes; waiting for it never holds up a look-up), so two changes never interleave.
public final class TrustedKeys: Sendable {
    /// Why a book could not be opened, or a key not taken. Compare ``code``; new codes may be
    /// added in minor releases.
    public struct Failure: Error, Sendable, CustomStringConvertible {
        /// The kind of a ``Failure``.
        public struct Code: Hashable, Sendable, CustomStringConvertible {
            private let name: String
            private init(_ name: String) { self.name = name }
            /// The code's name, as written in Swift.
            public var description: String { name }

            /// The file cannot be read (permissions, an I/O error), or it was removed while in use.
            public static let unreadable = Code("unreadable")
            /// The file is not a JSON object of names and SHA-256 fingerprints.
            public static let malformed = Code("malformed")
            /// Someone other than the file's owner or root could have written it (its owner, or
            /// its group or others having write permission).
            public static let insecure = Code("insecure")
            /// A key given to the book is not a SHA-256 fingerprint.
            public static let notAFingerprint = Code("notAFingerprint")
            /// The file could not be written.
            public static let cannotWrite = Code("cannotWrite")
            /// The lock on `FILE.lock` could not be taken (another process held it for 10 s,
            /// or the lock file cannot be opened).
            public static let locked = Code("locked")
            /// A name is not in Unicode's composed form (NFC), so it could pass for another.
            public static let unnormalizedName = Code("unnormalizedName")
            /// The book holds ``TrustedKeys/maximumEntries`` names already.
            public static let full = Code("full")
        }

        /// The kind of failure.
        public let code: Code
        /// The book's file.
        public let path: String
        /// What is wrong, in a sentence.
        public let reason: String

        /// One line: the file and the reason.
        public var description: String { "trusted keys in \(path): \(reason)" }
    }

    /// The book's file.
    public let path: String

    /// The most names a book keeps (a peer on the network could otherwise add names without end).
    public static let maximumEntries = 4_096

    private struct Stamp: Equatable {
        var device: UInt64, inode: UInt64, size: Int64, seconds: Int, nanoseconds: Int
        /// Owner and permissions: a file made writable by others, or made safe again, is read again.
        var owner: uid_t, mode: mode_t

        init(_ status: stat) {
            (device, inode, size) = (UInt64(status.st_dev), UInt64(status.st_ino), Int64(status.st_size))
            (seconds, nanoseconds) = (status.st_mtim.tv_sec, status.st_mtim.tv_nsec)
            (owner, mode) = (status.st_uid, status.st_mode)
        }
    }

    /// What a look at the file found.
    private enum Look: Equatable {
        case missing
        case present(Stamp)
        /// `stat` failed for another reason than a missing file (errno).
        case unknown(Int32)
    }

    /// A name as first given, and its key.
    private struct Entry: Equatable {
        var name: String
        var key: String
    }

    private struct State {
        /// By name folded to lower case, as bytes (Swift's string comparison would take two
        /// names written with other code points for one).
        var entries: [[UInt8]: Entry]
        /// The file the entries were read from or written to (or its absence).
        var look: Look
        /// Why the file as it is now cannot be used, when it cannot.
        var damage: Failure?
    }

    private let state: Locked<State>

    /// Opens the book kept in the file at `path`; a missing file is an empty book, made at the
    /// first key trusted.
    /// - Throws: ``Failure`` when the file exists but cannot be read (`unreadable`), is not
    ///   such a book (`malformed`), or could have been written by someone else than its owner
    ///   (`insecure`).
    public init(path: String) throws {
        self.path = path
        switch Self.look(at: path) {
        case .missing:
            state = Locked(State(entries: [:], look: .missing))
        case .unknown(let code):
            throw Failure(code: .unreadable, path: path, reason: "cannot be read (\(String(cString: strerror(code))))")
        case .present:
            let (entries, stamp) = try Self.read(path)
            state = Locked(State(entries: entries, look: .present(stamp)))
        }
    }

    /// The key trusted for `name` (in any ASCII case), 64 lowercase hex digits; nil when none is.
    public func key(for name: String) -> String? {
        current { $0[ASCIICase.folded(name)]?.key }
    }

    /// The names `key` (in any case, with or without colons) is trusted under, as first given,
    /// sorted.
    public func names(trusting key: String) -> [String] {
        guard let digest = Self.digest(key) else { return [] }
        return current { entries in entries.values.filter { $0.key == digest }.map(\.name).sorted() }
    }

    /// Every entry: name (as first given) to key.
    public var entries: [String: String] {
        current { entries in Dictionary(entries.values.map { ($0.name, $0.key) }) { first, _ in first } }
        // (Names are NFC, written by this book or refused when read, so no two merge here.)
    }

    /// Whether `key` is the one trusted for `name`: true when it is, and when no key was
    /// trusted for `name` yet, in which case `key` is trusted from now on and the file
    /// written before this returns (trust on first use); false when another key is trusted
    /// for `name`.
    /// - Throws: ``Failure``: `notAFingerprint` when `key` is not a SHA-256 fingerprint (64
    ///   hex digits, colons allowed); when no key was trusted for `name`: `unnormalizedName`
    ///   for a name not in NFC, `full` past ``maximumEntries``, and when the file is
    ///   damaged (its code says how; nothing is trusted then) or cannot be written
    ///   (`cannotWrite`: nothing is trusted then, unless the file was replaced before the
    ///   failure, in syncing its folder: the next look-up then reads the new entry back).
    public func trustOnFirstUse(_ key: String, for name: String) throws -> Bool {
        guard let digest = Self.digest(key) else {
            throw Failure(
                code: .notAFingerprint, path: path,
                reason: "\"\(TerminalText.escaped(key))\" is not a SHA-256 fingerprint (64 hex digits)")
        }
        // A name trusted already is answered from what was read, without the file lock.
        if let held = current({ $0[ASCIICase.folded(name)]?.key }) { return held == digest }
        return try changing { state in
            if let held = state.entries[ASCIICase.folded(name)] { return held.key == digest }
            guard TerminalText.isComposed(name) else {
                throw Failure(
                    code: .unnormalizedName, path: path,
                    reason:
                        "the name \"\(TerminalText.escaped(name))\" is not in Unicode's composed form (NFC), so it could pass for another; it is not trusted"
                )
            }
            guard state.entries.count < Self.maximumEntries else {
                throw Failure(code: .full, path: path, reason: "it holds \(Self.maximumEntries) names already")
            }
            var entries = state.entries
            entries[ASCIICase.folded(name)] = Entry(name: name, key: digest)
            try write(entries, into: &state)
            return true
        }
    }

    /// Forgets the key trusted for `name` (the next key seen for it is trusted on first use).
    /// - Throws: ``Failure`` when `name` has a key and the file is damaged or cannot be written
    ///   (as for ``trustOnFirstUse(_:for:)``; nothing is forgotten then).
    public func forget(_ name: String) throws {
        try changing { state in
            guard state.entries[ASCIICase.folded(name)] != nil else { return }
            var entries = state.entries
            entries[ASCIICase.folded(name)] = nil
            try write(entries, into: &state)
        }
    }

    // MARK: Private

    /// Runs `body` on the entries as the file holds them now, under the book's lock and the
    /// file lock (`FILE.lock`) that books in other processes take to change it.
    private func changing<T>(_ body: (inout State) throws -> T) throws -> T {
        do {
            return try FileLock.withExclusiveLock(on: path + ".lock") {
                try state.withLock { state in
                    refresh(&state)
                    return try body(&state)
                }
            }
        } catch let error as TLSError {  // (the file lock's)
            throw Failure(code: .locked, path: path, reason: "\(error)")
        }
    }

    private func current<T>(_ body: ([[UInt8]: Entry]) -> T) -> T {
        state.withLock { state in
            refresh(&state)
            return body(state.entries)
        }
    }

    /// Reads the file again when it changed since it was last read or written; a file that
    /// cannot be used leaves the entries as they are and is noted as damage.
    private func refresh(_ state: inout State) {
        let look = Self.look(at: path)
        guard look != state.look else { return }
        state.look = look
        switch look {
        case .missing:
            state.damage = Failure(
                code: .unreadable, path: path, reason: "was removed while in use (to forget every key, write {} to it)")
        case .unknown(let code):
            state.damage = Failure(
                code: .unreadable, path: path, reason: "cannot be read (\(String(cString: strerror(code))))")
        case .present:
            do {
                let (entries, stamp) = try Self.read(path)
                state = State(entries: entries, look: .present(stamp))
            } catch {
                state.damage = error as? Failure
            }
        }
    }

    private func write(_ entries: [[UInt8]: Entry], into state: inout State) throws {
        if let damage = state.damage {
            throw Failure(code: damage.code, path: path, reason: damage.reason + "; mend it, then try again")
        }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .prettyPrinted]
        do {
            let object = Dictionary(entries.values.map { ($0.name, $0.key) }) { first, _ in first }
            try AtomicFile.write(try encoder.encode(object) + Data("\n".utf8), to: path, mode: 0o600)
        } catch {
            throw Failure(code: .cannotWrite, path: path, reason: "\(error)")
        }
        state = State(entries: entries, look: Self.look(at: path))
    }

    /// The file's entries and the stamp of what was read (taken from the descriptor read).
    private static func read(_ path: String) throws -> ([[UInt8]: Entry], Stamp) {
        func failure(_ code: Failure.Code, _ reason: String) -> Failure {
            Failure(code: code, path: path, reason: reason)
        }
        if let problem = folderProblem(path) { throw failure(.insecure, problem) }
        // Not a symbolic link (it could point at any file of the user's); not a FIFO's wait.
        let fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK)
        guard fd >= 0 else {
            if errno == ELOOP { throw failure(.insecure, "is a symbolic link (give the file itself)") }
            throw failure(.unreadable, "cannot be read (\(String(cString: strerror(errno))))")
        }
        let handle = FileHandle(fileDescriptor: fd, closeOnDealloc: true)
        var status = stat()
        guard fstat(fd, &status) == 0 else {
            throw failure(.unreadable, "cannot be read (\(String(cString: strerror(errno))))")
        }
        guard status.st_mode & S_IFMT == S_IFREG else { throw failure(.unreadable, "is not a regular file") }
        guard status.st_uid == geteuid() || status.st_uid == 0, status.st_mode & (S_IWGRP | S_IWOTH) == 0 else {
            throw failure(
                .insecure,
                "could have been written by someone else than its owner (it must be yours or root's, with no write permission for group or others: chmod go-w)"
            )
        }
        let data: Data
        do {
            data = try handle.readToEnd() ?? Data()
        } catch {
            throw failure(.unreadable, "cannot be read (\(error))")
        }
        let object: [String: String]
        do {
            object = try JSONDecoder().decode([String: String].self, from: data)
        } catch let DecodingError.dataCorrupted(context) {
            throw failure(.malformed, "is not a JSON object of names and keys (\(context.debugDescription))")
        } catch {
            throw failure(.malformed, "is not a JSON object of names and keys")
        }
        var entries: [[UInt8]: Entry] = [:]
        for (name, key) in object.sorted(by: { Array($0.key.utf8).lexicographicallyPrecedes($1.key.utf8) }) {
            guard let digest = digest(key) else {
                throw failure(
                    .malformed,
                    "the key of \"\(TerminalText.escaped(name))\" is not a SHA-256 fingerprint (64 hex digits)")
            }
            // A name not in NFC (written by an older version, or by hand) is left out: it is
            // never trusted (and never trusted anew: see trustOnFirstUse), the rest of the book is.
            guard TerminalText.isComposed(name) else { continue }
            // Names alike but for ASCII case: the first.
            if entries[ASCIICase.folded(name)] == nil {
                entries[ASCIICase.folded(name)] = Entry(name: name, key: digest)
            }
        }
        return (entries, Stamp(status))
    }

    /// Why the folder holding `path` lets others replace the file, or nil: it must be the
    /// user's or root's, and others may write it only when it is sticky (as `/tmp` is: there
    /// they cannot rename or remove the user's files).
    private static func folderProblem(_ path: String) -> String? {
        let folder = (path as NSString).deletingLastPathComponent
        var status = stat()
        guard stat(folder.isEmpty ? "." : folder, &status) == 0 else { return nil }  // (the open says why)
        let ownerOK = status.st_uid == geteuid() || status.st_uid == 0
        let writableByOthers = status.st_mode & (S_IWGRP | S_IWOTH) != 0
        guard ownerOK, !writableByOthers || status.st_mode & S_ISVTX != 0 else {
            return
                "is in a folder someone other than you or root could change (\(TerminalText.escaped(folder)): make it yours and chmod go-w it)"
        }
        return nil
    }

    private static func digest(_ key: String) -> String? {
        SHA256Digest(hex: key.filter { $0 != ":" })?.hex
    }

    private static func look(at path: String) -> Look {
        var status = stat()
        guard stat(path, &status) == 0 else { return errno == ENOENT ? .missing : .unknown(errno) }
        return .present(Stamp(status))
    }
}
