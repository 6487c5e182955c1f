import Foundation
import SalutStreams

/// Trust-on-first-use memory: the public-key fingerprint first seen for each peer, in memory
/// (ephemeral sessions) or in a JSON file shared by sessions that use the same file.
final class TrustStore: @unchecked Sendable {
    // @unchecked: `known` is guarded by `lock`; the file is written under it too.
    private let lock = NSLock()
    private let file: URL?
    private var known: [String: String]

    init(file: URL?) {
        self.file = file
        if let file, let data = try? Data(contentsOf: file),
           let stored = try? JSONDecoder().decode([String: String].self, from: data) {
            known = stored
        } else {
            known = [:]
        }
    }

    /// Checks `fingerprint` for `peer`: a first sighting is remembered and trusted; a later one
    /// must match. Returns nil when trusted, else why not.
    func check(peer: String, fingerprint: String) -> TLSError? {
        lock.lock(); defer { lock.unlock() }
        if let seen = known[peer] {
            return seen == fingerprint ? nil : .untrustedPeer(reason: "the public key of \(peer) changed (was SHA-256 \(seen), now \(fingerprint))")
        }
        known[peer] = fingerprint
        save()
        return nil
    }

    private func save() {
        guard let file else { return }
        do {
            try FileManager.default.createDirectory(at: file.deletingLastPathComponent(), withIntermediateDirectories: true)
            let data = try JSONEncoder().encode(known)
            try data.write(to: file, options: .atomic)
        } catch {
            // The decision stands for this process; the file is only memory across runs.
            // A library does not write to the program's terminal: the log says it.
            SalutLogging.logger.error("cannot save trusted peers to \(file.path): \(error)")
        }
    }
}

/// Limits how many connections a session has open to one host at a time; waiting tasks go in
/// priority order (then first come, first served).
actor HostSlots {
    private let limit: Int
    private var open: [String: Int] = [:]
    private var waiting: [String: [(priority: Float, order: Int, continuation: CheckedContinuation<Void, Never>)]] = [:]
    private var counter = 0

    init(limit: Int) { self.limit = max(1, limit) }

    /// Waits for a free slot for `host`.
    func acquire(_ host: String, priority: Float) async {
        if open[host, default: 0] < limit {
            open[host, default: 0] += 1
            return
        }
        counter += 1
        let order = counter
        await withCheckedContinuation { continuation in
            waiting[host, default: []].append((priority, order, continuation))
        }
    }

    /// How many tasks wait for a slot for `host`.
    func waitingCount(for host: String) -> Int { waiting[host]?.count ?? 0 }

    /// Frees a slot for `host` (hands it to the best waiting task, if any).
    func release(_ host: String) {
        if var queue = waiting[host], !queue.isEmpty {
            let best = queue.indices.max { a, b in
                queue[a].priority != queue[b].priority ? queue[a].priority < queue[b].priority : queue[a].order > queue[b].order
            }!
            let next = queue.remove(at: best)
            waiting[host] = queue
            next.continuation.resume()      // the slot passes to it; `open` is unchanged
        } else {
            open[host, default: 1] -= 1
        }
    }
}
