import Foundation
import Glibc

/// Keys trusted on first use, one per peer name, in a file a person may edit: the book an app
/// keeps beside connections pinned to advertised keys
/// (`DiscoveredService.connect(pinningAdvertisedKey:trustedKeys:tls:)`) and beside a listener
/// that judges each client by its key.
///
/// ```swift
/// let book = try TrustedKeys(path: directory + "/known")
/// if book.trustOnFirstUse(clientKey, for: "alice") { /* alice's key, now or from before */ }
/// ```
///
/// The file is a JSON object from each name to its key's SHA-256 fingerprint (64 lowercase hex
/// digits), written whole and atomically (mode 0600) at every change. It is read again whenever
/// it changed on disk since it was last read, so a person who removes the entry of a peer whose
/// key changed is heard at the next look-up, with no restart. A file that became unreadable or
/// malformed leaves the book as it was (what was trusted stays trusted; nothing is trusted
/// anew because of it) and is not written over: trusting or forgetting a key fails with
/// ``Failure`` until it is mended. A removed file empties the book.
///
/// Concurrency: the entries and the stamp of the file they came from are behind one lock, and
/// the file is read and written under it, so two changes never interleave. One process per
/// file: changes made by two processes at once may lose one of them.
public final class TrustedKeys: Sendable {
    /// Why a book could not be opened or a key could not be taken.
    public struct Failure: Error, CustomStringConvertible {
        /// The book's file.
        public let path: String
        /// What is wrong, in a sentence.
        public let reason: String

        /// One line: the file and the reason.
        public var description: String { "trusted keys in \(path): \(reason)" }
    }

    /// The book's file.
    public let path: String

    private struct Stamp: Equatable {
        var device: UInt64, inode: UInt64, size: Int64, seconds: Int, nanoseconds: Int
    }

    /// What a look at the file found.
    private enum Look: Equatable {
        case missing
        case present(Stamp)
        /// `stat` failed for another reason than a missing file (errno).
        case unknown(Int32)
    }

    private struct State {
        var entries: [String: String]
        /// The file the entries were read from or written to (or its absence).
        var look: Look
        /// Why the file as it is now could not be read, when it could not.
        var damage: String?
    }

    private let state: Locked<State>

    /// Opens the book kept in the file at `path`; a missing file is an empty book, made at the
    /// first key trusted.
    /// - Throws: ``Failure`` when the file exists but cannot be read or is not such a book.
    public init(path: String) throws {
        self.path = path
        let look = Self.look(at: path)
        if case .unknown(let code) = look {
            throw Failure(path: path, reason: "cannot be read (\(String(cString: strerror(code))))")
        }
        let entries = try look == .missing ? [:] : Self.read(path)
        state = Locked(State(entries: entries, look: look))
    }

    /// The key trusted for `name` (64 lowercase hex digits), or nil when none is.
    public func key(for name: String) -> String? {
        current { $0[name] }
    }

    /// The names `key` is trusted under (given in any case, with or without colons), sorted.
    public func names(trusting key: String) -> [String] {
        guard let digest = Self.digest(key) else { return [] }
        return current { entries in entries.filter { $0.value == digest }.keys.sorted() }
    }

    /// Every entry: name to key.
    public var entries: [String: String] {
        current { $0 }
    }

    /// Whether `key` is the one trusted for `name`: true when it is, and when no key was
    /// trusted for `name` yet, in which case `key` is trusted from now on and the file
    /// written before this returns (trust on first use); false when another key is trusted
    /// for `name`.
    /// - Throws: ``Failure`` when `key` is not a SHA-256 fingerprint (64 hex digits, colons
    ///   allowed); `AtomicFile.Failure` when the file cannot be written (nothing is trusted then).
    public func trustOnFirstUse(_ key: String, for name: String) throws -> Bool {
        guard let digest = Self.digest(key) else {
            throw Failure(path: path, reason: "\"\(TerminalText.escaped(key))\" is not a SHA-256 fingerprint")
        }
        return try state.withLock { state in
            refresh(&state)
            if let held = state.entries[name] { return held == digest }
            if let damage = state.damage { throw Failure(path: path, reason: damage + "; mend it or remove it") }
            var entries = state.entries
            entries[name] = digest
            try write(entries, into: &state)
            return true
        }
    }

    /// Forgets the key trusted for `name` (the next key seen for it is trusted on first use).
    /// - Throws: `AtomicFile.Failure` when the file cannot be written (nothing is forgotten then).
    public func forget(_ name: String) throws {
        try state.withLock { state in
            refresh(&state)
            guard state.entries[name] != nil else { return }
            if let damage = state.damage { throw Failure(path: path, reason: damage + "; mend it or remove it") }
            var entries = state.entries
            entries[name] = nil
            try write(entries, into: &state)
        }
    }

    // MARK: Private

    private func current<T>(_ body: ([String: String]) -> T) -> T {
        state.withLock { state in
            refresh(&state)
            return body(state.entries)
        }
    }

    /// Reads the file again when it changed since it was last read or written.
    private func refresh(_ state: inout State) {
        let look = Self.look(at: path)
        guard look != state.look else { return }
        switch look {
        case .missing:
            state = State(entries: [:], look: .missing)  // removed: every key forgotten
        case .present:
            do {
                state = State(entries: try Self.read(path), look: look)
            } catch {
                // As it was; read again once it changes.
                state.look = look
                state.damage = (error as? Failure)?.reason ?? "\(error)"
            }
        case .unknown(let code):
            state.look = look
            state.damage = "cannot be read (\(String(cString: strerror(code))))"
        }
    }

    private func write(_ entries: [String: String], into state: inout State) throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .prettyPrinted]
        let data = try encoder.encode(entries)
        try AtomicFile.write(data + Data("\n".utf8), to: path, mode: 0o600)
        state = State(entries: entries, look: Self.look(at: path))
    }

    private static func read(_ path: String) throws -> [String: String] {
        let data: Data
        do {
            data = try Data(contentsOf: URL(fileURLWithPath: path))
        } catch {
            throw Failure(path: path, reason: "cannot be read (\(error.localizedDescription))")
        }
        guard let object = try? JSONDecoder().decode([String: String].self, from: data) else {
            throw Failure(path: path, reason: "is not a JSON object of names and keys")
        }
        var entries: [String: String] = [:]
        for (name, key) in object {
            guard let digest = digest(key) else {
                throw Failure(
                    path: path,
                    reason: "the key of \"\(TerminalText.escaped(name))\" is not a SHA-256 fingerprint (64 hex digits)")
            }
            entries[name] = digest
        }
        return entries
    }

    private static func digest(_ key: String) -> String? {
        SHA256Digest(hex: key.filter { $0 != ":" })?.hex
    }

    private static func look(at path: String) -> Look {
        var status = stat()
        guard stat(path, &status) == 0 else { return errno == ENOENT ? .missing : .unknown(errno) }
        return .present(
            Stamp(
                device: UInt64(status.st_dev), inode: UInt64(status.st_ino), size: Int64(status.st_size),
                seconds: status.st_mtim.tv_sec, nanoseconds: status.st_mtim.tv_nsec))
    }
}
