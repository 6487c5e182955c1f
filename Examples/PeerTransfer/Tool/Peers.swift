import ArgumentParser
import Foundation
import PeerTransferCore
import Salut

/// `peerxfer peers`: the receivers visible on the LAN.
struct Peers: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract:
            "List the peerxfer receivers visible on the LAN, with their keys and whether they are pinned or trusted."
    )

    @OptionGroup var config: ConfigOptions

    @OptionGroup var logging: LoggingOptions

    // --wait as `send` and `trust` name it; --timeout as it was.
    @Option(
        name: [.customLong("wait"), .customLong("timeout")], parsing: .unconditional,
        help: ArgumentHelp("Seconds to look.", valueName: "seconds"))
    var timeout: Double = 3

    @Flag(help: "One JSON object per receiver.")
    var json = false

    func validate() throws {
        guard timeout.isFinite, timeout > 0, timeout <= 3_600 else {
            throw ValidationError("--wait must be above 0 and at most 3600 seconds")
        }
    }

    func run() async throws {
        logging.apply(default: .warning)
        try await requireDiscoveryDaemon()
        let configuration = try config.loadExisting()
        let known = try KnownPeers.load(from: configuration.knownPeersFile)
        let found = try await PeerDirectory.look(for: .seconds(timeout))
        if found.isEmpty && !json { printError("no peerxfer receivers seen in \(timeout) s") }
        let ownKey = configuration.identity.publicKeySHA256.lowercased()
        var rows: [[String]] = []
        for peer in found {
            // Matched by key: a pinned device under a new name is known; a pinned name, or
            // one that looks like it, with another key is a changed key.
            let status: String
            if peer.key == ownKey {
                status = "this device"
            } else {
                switch known.verdict(forReceiver: peer.name, key: peer.key) {
                case .pinned: status = "pinned"
                case .renamed(let pinnedAs): status = "pinned (as \"\(Terminal.escape(pinnedAs))\")"
                case .trustedKey: status = "known key"
                case .keyChanged(let pinnedAs, _):
                    status =
                        pinnedAs == peer.name
                        ? "KEY CHANGED" : "KEY CHANGED (looks like \"\(Terminal.escape(pinnedAs))\")"
                case .new: status = "new"
                }
            }
            let trusted = known.trusted[peer.key] != nil
            if json {
                printJSON([
                    "name": Terminal.escape(peer.name), "host": Terminal.escape(peer.host), "port": Int(peer.port),
                    "key": peer.key, "pin": status, "trusted": trusted, "reachable": peer.reachable,
                ])
            } else {
                rows.append([
                    Terminal.escape(peer.name), "\(Terminal.escape(peer.host)):\(peer.port)",
                    peer.key.isEmpty ? "(none)" : String(peer.key.prefix(16)) + "…",
                    status + (trusted ? ", trusted" : "")
                        + (peer.reachable ? "" : ", UNREACHABLE (gone? its record may outlive it)"),
                ])
            }
        }
        if !rows.isEmpty {
            for line in Self.table(header: ["NAME", "ADDRESS", "KEY", "STATE"], rows: rows) { printLine(line) }
        }
    }

    /// Columns padded to their widest cell (counted in characters), two spaces apart; the last
    /// column is not padded.
    static func table(header: [String], rows: [[String]]) -> [String] {
        let all = [header] + rows
        let widths = header.indices.map { column in all.map { $0[column].count }.max() ?? 0 }
        return all.map { row in
            row.indices.map { column in
                column == row.count - 1
                    ? row[column] : row[column] + String(repeating: " ", count: widths[column] - row[column].count)
            }.joined(separator: "  ")
        }
    }
}

/// Finding receivers by browsing.
enum PeerDirectory {
    struct Peer {
        var name: String
        var host: String
        var port: UInt16
        var key: String
        /// Whether its address took a TCP connection just now: a receiver that went away
        /// without its goodbye reaching us stays in the daemon's cache for up to 75 minutes.
        var reachable: Bool
    }

    /// Seconds a receiver's address has to take a connection before it is called unreachable.
    static let reachTimeout: TimeInterval = 1.5

    /// Whether `resolved` takes a TCP connection within ``reachTimeout`` (closed at once).
    static func reaches(_ resolved: ResolvedService) async -> Bool {
        guard let address = resolved.addresses.first(where: { !$0.isIPv6 }) ?? resolved.addresses.first else {
            return false
        }
        let pair = SocketStreams.pair(toHost: address.host, port: Int(resolved.port), connectTimeout: reachTimeout)
        defer {
            pair.input.close()
            pair.output.close()
        }
        return (try? await pair.open()) != nil
    }

    /// The receivers seen within `duration`, resolved, sorted by name.
    static func look(for duration: Duration) async throws -> [Peer] {
        let names: Set<DiscoveredService> = await withTaskGroup(of: Set<DiscoveredService>.self) { group in
            group.addTask {
                var seen = Set<DiscoveredService>()
                do {
                    for try await update in try ServiceBrowser(type: TransferLimits.serviceType) {
                        seen = update.services
                        if Task.isCancelled { break }
                    }
                } catch {}
                return seen
            }
            // The browse runs until the deadline; its last view is the answer.
            try? await Task.sleep(for: duration)
            group.cancelAll()
            return await group.next() ?? []
        }
        var peers: [Peer] = []
        for service in names.sorted(by: { $0.name < $1.name }) {
            guard let resolved = try? await service.resolve(timeout: 3) else { continue }
            // From the network: only a well-formed fingerprint is shown (and compared), lowercased
            // as the sender compares it; anything else reads as no key.
            let key = resolved.advertisedPublicKeySHA256(forTXTKey: "fp") ?? ""
            peers.append(
                Peer(
                    name: service.name, host: resolved.hostName, port: resolved.port, key: key,
                    reachable: await reaches(resolved)))
        }
        return peers
    }
}
