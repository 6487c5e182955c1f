import Foundation
import SalutStreams

/// What a daemon is doing, as `peerxfer status` reads it from the configuration folder.
public struct DaemonStatus: Codable, Sendable, Equatable {
    /// One transfer the daemon received or is receiving.
    public struct Transfer: Codable, Sendable, Equatable {
        public var id: Int
        public var direction: String
        /// The peer's name, escaped for a terminal when it was recorded (it came from the
        /// network): shown as it is.
        public var peer: String
        public var files: Int
        public var bytes: UInt64
        public var bytesReceived: UInt64
        public var verified: Int
        public var failed: Int
        /// `asking` (the offer waits for its answer), `receiving`, `done`, `cancelled` (a
        /// background send), `interrupted` (the daemon stopped during it), or how it ended
        /// otherwise as ``PeerTransferError/outcome`` names it (`declined`, `no-answer`, …,
        /// `failed`).
        public var state: String
        public var error: String?
        public var started: Double
        public var ended: Double?
        /// For a background send: its task's whole id (`send --background --json` prints it;
        /// the text shows its first 8 digits).
        public var task: String? = nil
        /// For a background send: the file or folder it sent.
        public var path: String? = nil
        /// When the current state began (seconds since 1970): the wait for an answer, the
        /// sending, for the time left and the rate `status` shows.
        public var since: Double? = nil
        /// The whole key of the peer, when known (`trust` takes any unambiguous start of it).
        public var key: String? = nil
    }

    public var name: String
    public var port: UInt16
    public var inbox: String
    public var key: String
    public var pid: Int32
    public var running: Bool
    public var updated: Double
    /// The most recent transfers, newest last (at most ``StatusBook/historyLength``), those of
    /// earlier runs of the daemon included.
    public var transfers: [Transfer]

    /// A sender the policy turned away before it could offer (`--accept known`).
    public struct TurnedAway: Codable, Sendable, Equatable {
        /// Its name as shown (escaped), and its whole key.
        public var sender: String
        public var key: String
        /// When, seconds since 1970.
        public var time: Double
    }

    /// The senders turned away most recently, newest last (at most 20, one entry a key): what
    /// `peerxfer trust` finds a key by its start in, with the offers.
    public var turnedAway: [TurnedAway]? = nil

    /// The address of the daemon's web page with its token, while it serves one (`serve --web`).
    public var webURL: String? = nil

    /// Reads the status file at `path`; nil when there is none.
    /// - Throws: ``PeerTransferError/runtime(_:)`` when it exists but is not a status file.
    public static func load(from path: String) throws -> DaemonStatus? {
        guard let data = FileManager.default.contents(atPath: path) else { return nil }
        do {
            return try JSONDecoder().decode(DaemonStatus.self, from: data)
        } catch {
            throw PeerTransferError.runtime("\(path) is not a peerxfer status file: \(error)")
        }
    }

    /// True when the daemon that wrote this is still alive.
    public var daemonAlive: Bool { running && kill(pid, 0) == 0 }
}

/// Keeps the daemon's status and writes it to the status file: at once when a transfer starts
/// or ends and when the daemon starts or stops; progress and per-file counts at most twice a
/// second.
public final class StatusBook: Sendable {
    private struct State {
        var status = DaemonStatus(
            name: "", port: 0, inbox: "", key: "", pid: getpid(), running: false, updated: 0, transfers: [])
        var lastWrite = ContinuousClock.Instant.now
        /// A write of the latest status is queued and has not started.
        var writeQueued = false
        /// A write held back by the throttle is scheduled.
        var writeLater = false
        /// The status's id of each transfer under way, by its receiver's id (which starts at 1
        /// in each run of the daemon): every row, incoming or outgoing, of this run or an
        /// earlier one, takes the next id when it is added.
        var inbound: [Int: Int] = [:]
    }

    /// How many transfers the status keeps, across restarts.
    public static let historyLength = 50
    private let file: String
    private let state = Locked(State())
    /// Writes the file, off the receivers' paths: a slow disk delays the view, not a transfer.
    private let writer = DispatchQueue(label: "peerxfer.status")

    /// A book written to `file`.
    public init(file: String) {
        self.file = file
    }

    /// Waits until every write queued so far is done (a change held back by the twice-a-second
    /// throttle is not one of them; the daemon's last change, `stopped()`, always is).
    public func flush() {
        writer.sync {}
    }

    /// The status as it is now (written to the file at most twice a second).
    public var current: DaemonStatus { state.withLock { $0.status } }

    /// The daemon is up. The transfers an earlier run recorded are kept (those it left
    /// unfinished as `interrupted`).
    public func started(name: String, port: UInt16, inbox: String, key: String) {
        // A file that cannot be read starts the history afresh (it is only a view).
        let earlierStatus = (try? DaemonStatus.load(from: file)) ?? nil
        let earlier = earlierStatus?.transfers ?? []
        state.withLock { state in
            state.status.transfers =
                earlier.suffix(Self.historyLength).map { transfer in
                    var transfer = transfer
                    // A transfer the daemon was receiving when it stopped is over; a background
                    // send is not: it stays queued, and its row goes on when it runs again.
                    if transfer.ended == nil && transfer.direction == "in" {
                        transfer.state = "interrupted"
                        transfer.ended = transfer.started
                    } else if transfer.ended == nil {
                        transfer.state = "queued"
                        transfer.since = nil
                    }
                    return transfer
                } + state.status.transfers
            if state.status.turnedAway == nil { state.status.turnedAway = earlierStatus?.turnedAway }
        }
        update(force: true) {
            $0.name = name
            $0.port = port
            $0.inbox = inbox
            $0.key = key
            $0.running = true
        }
    }

    /// The daemon stopped.
    public func stopped() {
        update(force: true) {
            $0.running = false
            $0.webURL = nil
        }
    }

    /// The web page's address, with its token (`serve --web`).
    public func webPage(_ url: String?) {
        update(force: true) { $0.webURL = url }
    }

    /// Records a receiver's event.
    public func record(_ event: ReceiveEvent) {
        switch event {
        case .offered(let receiverID, let sender, let key, let files, let bytes):
            updateState(force: true) { state in
                let now = Date().timeIntervalSince1970
                let id = state.status.nextID
                state.status.transfers.append(
                    .init(
                        id: id, direction: "in", peer: sender, files: files, bytes: bytes, bytesReceived: 0,
                        verified: 0, failed: 0, state: "asking", error: nil,
                        started: now, ended: nil, since: now, key: key))
                state.status.keepHistory()
                state.inbound[receiverID] = id
            }
        case .turnedAway(let sender, let key):
            // Throttled: a flood of refused keys rewrites the file twice a second at most.
            update(force: false) { status in
                var list = (status.turnedAway ?? []).filter { $0.key != key }
                list.append(.init(sender: sender, key: key, time: Date().timeIntervalSince1970))
                status.turnedAway = Array(list.suffix(20))
            }
        case .answered(let receiverID):
            modify(receiverID, force: true) {
                $0.state = "receiving"
                $0.since = Date().timeIntervalSince1970
            }
        case .progress(let receiverID, let bytes):
            modify(receiverID, force: false) { $0.bytesReceived = bytes }
        case .fileVerified(let receiverID, _):
            // Per-file counts go out with the next throttled write (10,000 small files must
            // not mean 10,000 status files): the transfer's end is always written.
            modify(receiverID, force: false) { $0.verified += 1 }
        case .fileFailed(let receiverID, _, _):
            modify(receiverID, force: false) { $0.failed += 1 }
        case .ended(let receiverID, let verified, let failed, let error):
            modify(receiverID, force: true, ending: true) {
                $0.verified = verified
                $0.failed = failed
                $0.state = error?.outcome ?? (failed == 0 ? "done" : "failed")
                $0.error = error?.message
                $0.ended = Date().timeIntervalSince1970
            }
        }
    }

    /// Changes the row of the receiver's transfer `receiverID` (none: nothing to change; the
    /// connection ended before any offer), forgetting the id once `ending`.
    private func modify(
        _ receiverID: Int, force: Bool, ending: Bool = false, _ change: @escaping (inout DaemonStatus.Transfer) -> Void
    ) {
        updateState(force: force) { state in
            guard let id = state.inbound[receiverID],
                let index = state.status.transfers.lastIndex(where: { $0.id == id && $0.direction == "in" })
            else { return }
            change(&state.status.transfers[index])
            if ending { state.inbound[receiverID] = nil }
        }
    }

    /// Records where a background send is: `state` is `waiting-for-receiver`,
    /// `waiting-for-answer`, `sending` or `verifying`; `sent` and `total` its file bytes, when
    /// known. Progress alone is written at most twice a second.
    public func recordOutbound(
        task: String, peer: String, path: String, state: String, files: Int? = nil, key: String? = nil,
        sent: UInt64? = nil, total: UInt64? = nil
    ) {
        update(force: sent == nil) { status in
            let now = Date().timeIntervalSince1970
            let index = status.outbound(task: task, peer: peer, path: path, now: now)
            var transfer = status.transfers[index]
            if transfer.state != state {
                transfer.state = state
                transfer.since = now
            }
            if let files { transfer.files = files }
            if let key { transfer.key = key }
            if let sent { transfer.bytesReceived = sent }
            if let total { transfer.bytes = total }
            status.transfers[index] = transfer
        }
    }

    /// Records a background send that ended (delivered, cancelled, or failed for good): `task`
    /// is its task's whole id, `path` what it sent, `files` how many files it held; `state` is
    /// `done`, `cancelled`, or how it failed (``PeerTransferError/outcome``).
    public func recordOutboundEnd(
        task: String, peer: String, path: String, files: Int?, bytes: UInt64, state: String, error: String?
    ) {
        update(force: true) { status in
            let now = Date().timeIntervalSince1970
            let index = status.outbound(task: task, peer: peer, path: path, now: now)
            var transfer = status.transfers[index]
            if let files { transfer.files = files }
            transfer.bytesReceived = max(transfer.bytesReceived, bytes)
            transfer.bytes = max(transfer.bytes, bytes)
            transfer.verified = state == "done" ? transfer.files : 0
            transfer.failed = state == "failed" ? transfer.files : 0
            transfer.state = state
            transfer.error = error
            transfer.ended = now
            transfer.since = nil
            status.transfers[index] = transfer
        }
    }

    private func update(force: Bool, _ change: (inout DaemonStatus) -> Void) {
        updateState(force: force) { change(&$0.status) }
    }

    private func updateState(force: Bool, _ change: (inout State) -> Void) {
        enum Write { case none, now, later }
        let write = state.withLock { state -> Write in
            change(&state)
            let now = ContinuousClock.Instant.now
            guard force || now - state.lastWrite >= .milliseconds(500) else {
                // Held back by the throttle: written half a second from now, with whatever
                // else changed meanwhile (a last change is never left unwritten).
                if state.writeLater { return .none }
                state.writeLater = true
                return .later
            }
            state.lastWrite = now
            defer { state.writeQueued = true }
            return state.writeQueued ? .none : .now
        }
        switch write {
        case .none:
            return
        case .later:
            writer.asyncAfter(deadline: .now() + .milliseconds(500)) { [self] in
                state.withLock {
                    $0.writeLater = false
                    $0.lastWrite = .now
                }
                writeLatest()
            }
        case .now:
            writer.async { [self] in writeLatest() }
        }
    }

    /// Writes the status as it is now (on `writer`).
    private func writeLatest() {
        // The latest status when the write starts: changes made while it waited ride along.
        let status = state.withLock { state -> DaemonStatus in
            state.writeQueued = false
            state.status.updated = Date().timeIntervalSince1970
            return state.status
        }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        // A view, rewritten often: renamed into place whole, not synced to disk. One that
        // cannot be written only costs `peerxfer status` its view.
        if let data = try? encoder.encode(status) {
            try? ConfigFile.write(data, to: file, mode: 0o600, durable: false)
        }
    }
}

extension DaemonStatus {
    /// The id the next row takes: one past the newest, whichever way it went and whichever run
    /// of the daemon recorded it.
    fileprivate var nextID: Int { (transfers.map(\.id).max() ?? 0) + 1 }

    /// The index of the running background send `task`, added when it has none yet.
    fileprivate mutating func outbound(task: String, peer: String, path: String, now: Double) -> Int {
        if let index = transfers.lastIndex(where: { $0.task == task && $0.ended == nil }) { return index }
        let id = nextID
        transfers.append(
            .init(
                id: id, direction: "out", peer: peer, files: 1, bytes: 0, bytesReceived: 0, verified: 0, failed: 0,
                state: "waiting-for-receiver", error: nil, started: now, ended: nil, task: task, path: path, since: now)
        )
        keepHistory()
        return transfers.count - 1
    }

    /// Drops the oldest transfers beyond ``StatusBook/historyLength``.
    fileprivate mutating func keepHistory() {
        if transfers.count > StatusBook.historyLength {
            transfers.removeFirst(transfers.count - StatusBook.historyLength)
        }
    }

}
