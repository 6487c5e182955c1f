import Foundation
import SalutDiscovery
import SalutStreams
import Salut

/// A peerxfer configuration folder: this device's identity (key, certificate, id) and what it
/// knows of other peers.
///
/// ```
/// CONFIG/identity/certificate.pem, key.pem (0600), identity.lock (held while they are made)
/// CONFIG/device.lock        held while device.json is made
/// CONFIG/device.json        this device's id
/// CONFIG/known-peers.json   pinned keys and trusted senders
/// CONFIG/status.json        what the daemon is doing (written by `serve`)
/// CONFIG/serve.lock         locked by the running daemon, which wrote its pid there
/// CONFIG/background/        the background session: queued sends (`send --background`)
/// ```
public struct PeerConfiguration: Sendable {
    /// The folder.
    public let directory: String
    /// This device's TLS identity, made on first use.
    public let identity: TLSIdentity
    /// This device's id (a random UUID made on first use), published in the TXT record.
    public let deviceID: String
    /// This device's name as people see it: the one given to `--name` last (kept in
    /// `device.json`), else the host's name. Senders introduce themselves by it; a receiver
    /// publishes itself under it.
    public private(set) var deviceName: String

    /// ` --config 'FOLDER'` when this configuration is not in the default folder, else nothing:
    /// what a command shown to the user needs to act on this configuration (safe to print, and
    /// to paste into bash: see ``ShellWord``).
    public var configOption: String {
        guard directory != Self.defaultDirectory else { return "" }
        // Absolute: the command may be run from another folder.
        return " --config \(ShellWord.quoted(URL(fileURLWithPath: directory).standardizedFileURL.path))"
    }

    /// `$XDG_CONFIG_HOME/peerxfer`, or `~/.config/peerxfer`.
    public static var defaultDirectory: String {
        let environment = ProcessInfo.processInfo.environment
        if let base = environment["XDG_CONFIG_HOME"], base.hasPrefix("/") {
            return (base as NSString).appendingPathComponent("peerxfer")
        }
        let home = environment["HOME"] ?? NSHomeDirectory()
        return (home as NSString).appendingPathComponent(".config/peerxfer")
    }

    /// Opens `directory`, creating it (0700), the identity and the device id if missing.
    /// - Throws: ``PeerTransferError/runtime(_:)`` when the folder or identity cannot be made or read.
    public init(directory: String) throws {
        self.directory = directory
        do {
            try FileManager.default.createDirectory(
                atPath: directory, withIntermediateDirectories: true,
                attributes: [.posixPermissions: 0o700])
            let host = ProcessInfo.processInfo.hostName
            identity = try TLSIdentity.loadOrCreate(
                directory: (directory as NSString).appendingPathComponent("identity"),
                commonName: "peerxfer \(host)")
        } catch let error as PeerTransferError {
            throw error
        } catch {
            throw PeerTransferError.runtime("cannot set up the configuration folder \(directory): \(error)")
        }
        let deviceFile = (directory as NSString).appendingPathComponent("device.json")
        func recorded() -> String? {
            guard let id = Self.device(deviceFile)["id"], !id.isEmpty else { return nil }
            return id
        }
        deviceName =
            Self.device(deviceFile)["name"].flatMap { $0.isEmpty ? nil : $0 }
            ?? ProcessInfo.processInfo.hostName.split(separator: ".").first.map(String.init) ?? "peerxfer"
        if let id = recorded() {
            deviceID = id
        } else {
            // Made once, under a lock, by whichever process gets there first.
            do {
                deviceID = try FileLock.withExclusiveLock(
                    on: (directory as NSString).appendingPathComponent("device.lock")
                ) {
                    if let id = recorded() { return id }
                    let id = UUID().uuidString.lowercased()
                    try ConfigFile.write(try JSONEncoder().encode(["id": id]), to: deviceFile, mode: 0o600)
                    return id
                }
            } catch let error as PeerTransferError {
                throw error
            } catch {
                throw PeerTransferError.runtime(
                    "cannot set up the configuration folder \(Terminal.escape(directory)): \(error)")
            }
        }
    }

    private var deviceFile: String { (directory as NSString).appendingPathComponent("device.json") }

    /// What `device.json` holds (`id`, and `name` once one was given); empty when it cannot be read.
    private static func device(_ file: String) -> [String: String] {
        guard let data = FileManager.default.contents(atPath: file) else { return [:] }
        return (try? JSONDecoder().decode([String: String].self, from: data)) ?? [:]
    }

    /// Makes `name` this device's name from now on (kept in `device.json`), unless it is it
    /// already. The caller checks the name first (``ServiceNames/checkName(_:allowEmpty:)``).
    /// - Throws: ``PeerTransferError/runtime(_:)`` when the file cannot be written.
    public mutating func keepName(_ name: String) throws {
        guard Self.device(deviceFile)["name"] != name else {
            deviceName = name
            return
        }
        let file = deviceFile
        do {
            try FileLock.withExclusiveLock(on: (directory as NSString).appendingPathComponent("device.lock")) {
                var device = Self.device(file)
                device["id"] = deviceID
                device["name"] = name
                let encoder = JSONEncoder()
                encoder.outputFormatting = [.sortedKeys]
                try ConfigFile.write(try encoder.encode(device), to: file, mode: 0o600)
            }
        } catch let error as PeerTransferError {
            throw error
        } catch {
            throw PeerTransferError.runtime("cannot keep the name in \(Terminal.escape(file)): \(error)")
        }
        deviceName = name
    }

    /// The file of pinned and trusted keys.
    public var knownPeersFile: String { (directory as NSString).appendingPathComponent("known-peers.json") }
    /// The daemon's status file.
    public var statusFile: String { (directory as NSString).appendingPathComponent("status.json") }
}

/// Keys this device has met: the receivers it sends to (pinned: a name and the key it proved),
/// and the senders trusted to deliver under `--accept known`.
///
/// Trust is by key: a name is a label a peer chooses, so a pinned key met under another name is
/// the same device (renamed), and a pinned name, or one a person could take for it, that answers
/// with another key is refused as a changed key (see ``verdict(forReceiver:key:)``). The file is
/// changed only through ``update(at:_:)``, under a lock and on a fresh read, so that two
/// commands at once lose no decision; a file that cannot be read or understood is an error,
/// never taken for an empty book (which the next save would write over it).
public struct KnownPeers: Codable, Sendable, Equatable {
    /// Receiver name → the SHA-256 of its public key, as pinned.
    public var pins: [String: String] = [:]
    /// Trusted key SHA-256 → a label (the name it was trusted under).
    public var trusted: [String: String] = [:]
    /// The label of a key trusted by its fingerprint alone (`peerxfer trust KEY`).
    public static let trustedByFingerprint = "(by fingerprint)"

    /// Names that a queued send (`send --background --accept-new-key`) may pin on first
    /// contact, whatever key answers; taken off once pinned.
    public var acceptingNewKey: [String]?

    public init() {}

    /// Reads `path`; an absent file is an empty book.
    /// - Throws: ``PeerTransferError/runtime(_:)`` when the file exists but cannot be read or
    ///   is not a known-peers file (it is left as it is).
    public static func load(from path: String) throws -> KnownPeers {
        guard FileManager.default.fileExists(atPath: path) else { return KnownPeers() }
        guard let data = FileManager.default.contents(atPath: path) else {
            throw PeerTransferError.runtime("cannot read \(Terminal.escape(path)); it was left as it is")
        }
        do {
            return try JSONDecoder().decode(KnownPeers.self, from: data)
        } catch {
            throw PeerTransferError.runtime(
                "\(Terminal.escape(path)) is not a valid known-peers file, so no trust decision can be made (it was left as it is: fix it or move it away): \(error)"
            )
        }
    }

    /// Changes the book at `path`: under an exclusive lock (`PATH.lock`, waited for up to
    /// 10 s), reads it afresh, runs `change`, and writes it back if it changed.
    /// - Throws: what ``load(from:)`` throws; ``PeerTransferError/runtime(_:)`` when the lock
    ///   cannot be had or the file cannot be written; what `change` throws (nothing is written).
    @discardableResult
    public static func update<T>(at path: String, _ change: (inout KnownPeers) throws -> T) throws -> T {
        do {
            return try FileLock.withExclusiveLock(on: path + ".lock") {
                var book = try load(from: path)
                let before = book
                let result = try change(&book)
                if book != before { try book.save(to: path) }
                return result
            }
        } catch let error as PeerTransferError {
            throw error
        } catch {
            throw PeerTransferError.runtime("cannot change \(Terminal.escape(path)): \(error)")
        }
    }

    /// The spelling under which `name` is pinned: the name itself, else one a person could take
    /// for it (ASCII case, as DNS-SD compares names; compatibility forms, accents, Cyrillic or
    /// Greek look-alikes: ``NameSkeleton``). A receiver that now publishes "KITCHEN" or
    /// "Kіtchen" is held to the pin of "Kitchen", not trusted as new. Nil when it is not pinned.
    public func pinnedSpelling(of name: String) -> String? {
        if pins[name] != nil { return name }
        let sorted = pins.keys.sorted()
        return sorted.first { ServiceNames.sameIgnoringASCIICase($0, name) }
            ?? sorted.first { NameSkeleton.looksAlike($0, name) }
    }

    /// Pins `key` under `name`, or under the spelling `name` is pinned as already (see
    /// ``pinnedSpelling(of:)``).
    public mutating func pin(_ name: String, to key: String) {
        pins[pinnedSpelling(of: name) ?? name] = key
    }

    /// True when a queued send granted `name` first-use trust (`--accept-new-key`).
    public func grantsNewKey(to name: String) -> Bool {
        acceptingNewKey?.contains { ServiceNames.sameIgnoringASCIICase($0, name) } == true
    }

    /// Grants `name` first-use trust for the daemon's queued sends.
    public mutating func grantNewKey(to name: String) {
        if !grantsNewKey(to: name) { acceptingNewKey = (acceptingNewKey ?? []) + [name] }
    }

    /// Takes back the first-use grants of the names `revoked` says so of.
    public mutating func revokeNewKeyGrants(where revoked: (String) -> Bool) {
        acceptingNewKey?.removeAll(where: revoked)
        if acceptingNewKey?.isEmpty == true { acceptingNewKey = nil }
    }

    /// A name `key` is pinned under, if any (the first in order).
    public func pinnedName(forKey key: String) -> String? {
        pins.filter { $0.value == key }.keys.sorted().first
    }

    /// What this book says of the receiver `name` that proves `key`.
    public func verdict(forReceiver name: String, key: String) -> ReceiverVerdict {
        if let spelled = pinnedSpelling(of: name), let pinned = pins[spelled] {
            return pinned == key ? .pinned(as: spelled) : .keyChanged(pinnedAs: spelled, pinnedKey: pinned)
        }
        if let other = pinnedName(forKey: key) { return .renamed(pinnedAs: other) }
        if let label = trusted[key] { return .trustedKey(label: label) }
        return .new
    }

    /// Writes the book to `path` atomically (mode 0600). Prefer ``update(at:_:)``, which
    /// cannot undo another process's change.
    public func save(to path: String) throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        try ConfigFile.write(try encoder.encode(self), to: path, mode: 0o600)
    }
}

/// What a sender's book says of a receiver it is about to send to.
public enum ReceiverVerdict: Sendable, Equatable {
    /// Its key is the one pinned under this name (spelled `as`).
    case pinned(as: String)
    /// Its key is pinned under another name: the same device, renamed.
    case renamed(pinnedAs: String)
    /// Its key was trusted by fingerprint (`peerxfer trust KEY`), under `label`.
    case trustedKey(label: String)
    /// This name, or one that looks like it, is pinned to another key.
    case keyChanged(pinnedAs: String, pinnedKey: String)
    /// Neither its name nor its key is known here.
    case new
}

/// Configuration and status files, replaced whole (SalutStreams' `AtomicFile`), failures as
/// ``PeerTransferError/runtime(_:)``.
enum ConfigFile {
    static func write(_ data: Data, to path: String, mode: mode_t, durable: Bool = true) throws {
        do {
            try AtomicFile.write(data, to: path, mode: mode, durable: durable)
        } catch let failure as AtomicFile.Failure {
            throw PeerTransferError.runtime(failure.description)
        }
    }
}
