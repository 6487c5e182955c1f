import Foundation
import SalutDiscovery
import SalutStreams

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
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true,
                                                    attributes: [.posixPermissions: 0o700])
            let host = ProcessInfo.processInfo.hostName
            identity = try TLSIdentity.loadOrCreate(directory: (directory as NSString).appendingPathComponent("identity"),
                                                    commonName: "peerxfer \(host)")
        } catch let error as PeerTransferError {
            throw error
        } catch {
            throw PeerTransferError.runtime("cannot set up the configuration folder \(directory): \(error)")
        }
        let deviceFile = (directory as NSString).appendingPathComponent("device.json")
        func recorded() -> String? {
            guard let data = FileManager.default.contents(atPath: deviceFile),
                  let device = try? JSONDecoder().decode([String: String].self, from: data), let id = device["id"], !id.isEmpty else {
                return nil
            }
            return id
        }
        if let id = recorded() {
            deviceID = id
        } else {
            // Made once, under a lock, by whichever process gets there first.
            do {
                deviceID = try FileLock.withExclusiveLock(on: (directory as NSString).appendingPathComponent("device.lock")) {
                    if let id = recorded() { return id }
                    let id = UUID().uuidString.lowercased()
                    try ConfigFile.write(try JSONEncoder().encode(["id": id]), to: deviceFile, mode: 0o600)
                    return id
                }
            } catch let error as PeerTransferError {
                throw error
            } catch {
                throw PeerTransferError.runtime("cannot set up the configuration folder \(Terminal.escape(directory)): \(error)")
            }
        }
    }

    /// The file of pinned and trusted keys.
    public var knownPeersFile: String { (directory as NSString).appendingPathComponent("known-peers.json") }
    /// The daemon's status file.
    public var statusFile: String { (directory as NSString).appendingPathComponent("status.json") }
}

/// Keys this device has met: the key each receiver name had when first sent to (trust on
/// first use), and the senders trusted to deliver under `--accept known`.
public struct KnownPeers: Codable, Sendable, Equatable {
    /// Receiver name → the SHA-256 of its public key when first met.
    public var pins: [String: String] = [:]
    /// Trusted key SHA-256 → a label (the name it was trusted under).
    public var trusted: [String: String] = [:]

    public init() {}

    /// Reads `path`; an absent file is an empty book.
    /// - Throws: ``PeerTransferError/runtime(_:)`` when the file exists but cannot be read.
    public static func load(from path: String) throws -> KnownPeers {
        guard FileManager.default.fileExists(atPath: path) else { return KnownPeers() }
        guard let data = FileManager.default.contents(atPath: path) else {
            throw PeerTransferError.runtime("cannot read \(path)")
        }
        do {
            return try JSONDecoder().decode(KnownPeers.self, from: data)
        } catch {
            throw PeerTransferError.runtime("\(path) is not a valid known-peers file: \(error)")
        }
    }

    /// The spelling under which `name` is pinned, comparing names as DNS-SD does (ASCII case
    /// does not count): a receiver that now publishes "KITCHEN" is the "Kitchen" pinned before,
    /// held to that pin, not a new receiver to trust on first use. Nil when it is not pinned.
    public func pinnedSpelling(of name: String) -> String? {
        if pins[name] != nil { return name }
        return pins.keys.sorted().first { ServiceNames.sameIgnoringASCIICase($0, name) }
    }

    /// Writes the book to `path` atomically (mode 0600).
    public func save(to path: String) throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        try ConfigFile.write(try encoder.encode(self), to: path, mode: 0o600)
    }
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
