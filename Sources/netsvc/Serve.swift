import Dispatch
import Foundation
import Glibc
import Salut

/// Serves the connections of `publish --listen`, each in a task of its own: bridged to
/// netsvc's stdin/stdout (one connection at a time, in the order they are ready), or each to
/// its own child process (`--exec`). At most `maxConnections` are served or waiting at once:
/// a newcomer takes the place of the oldest one whose peer has sent nothing, or is refused.
/// Refused and evicted peers get a reset (RST), so they see an error rather than an empty
/// answer; each is noted. Cancelling `serve` ends every connection and child.
struct ConnectionServer: Sendable {
    /// The shell command to run per connection; nil bridges stdin/stdout.
    let command: String?
    let json: Bool
    let maxConnections: Int
    /// Seconds a child has after SIGTERM before SIGKILL.
    static let grace: Double = 2
    private var grace: Double { Self.grace }

    func serve(_ connections: AsyncStream<AcceptedConnection>) async {
        let stdio = command == nil ? StdioTurns() : nil
        let active = ActiveConnections(limit: maxConnections)
        await withDiscardingTaskGroup { group in
            for await connection in connections {
                let peer = connection.remoteAddress?.description ?? "unknown"
                group.addTask {
                    // Connections still in their handshake are bounded by the listener (its
                    // time limits, and its cap on connections setting up); a slot is taken
                    // once the connection is ready.
                    do {
                        try await connection.streams.open()
                    } catch {
                        connection.input.close()
                        connection.output.close()
                        if !(error is CancellationError) { report("failed", peer, reason: "\(error)") }
                        if active.isEmpty { Memory.returnFreedPagesSoon() }
                        return
                    }
                    let evicted = EvictionMark()
                    // The work for this connection, cancelled when it is evicted (so that one
                    // waiting for its turn at stdin/stdout stops waiting at once).
                    let serving = Locked<Task<Void, Never>?>(nil)
                    let evict: @Sendable () -> Void = {
                        evicted.set()
                        connection.streams.reset(.limitExceeded(Self.evictionReason))
                        serving.value?.cancel()
                    }
                    let streams = connection.streams
                    guard let id = active.enter(hasSentBytes: { streams.hasReceivedBytes }, evict: evict) else {
                        connection.streams.reset(.limitExceeded("refused: \(maxConnections) connections already"))
                        report("refused", peer, reason: "\(maxConnections) connections already (--max-connections)")
                        return
                    }
                    defer { active.leave(id) }
                    let spoke: @Sendable () -> Void = { active.spoke(id) }
                    if let command {
                        await runChild(command, for: connection, peer: peer, spoke: spoke, evicted: evicted)
                    } else if let stdio {
                        let task = Task {
                            await stdio.serve(connection, peer: peer, spoke: spoke, evicted: evicted) {
                                report($0, $1, status: $2, reason: $3)
                            }
                        }
                        serving.withLock { $0 = task }
                        if evicted.isSet { task.cancel() }  // evicted before the task was known
                        await withTaskCancellationHandler {
                            await task.value
                        } onCancel: {
                            task.cancel()
                        }
                    }
                }
            }
            group.cancelAll()
        }
    }

    /// Runs `command` with the connection as its stdin/stdout. When the connection fails, or
    /// the server stops, the child's pipes are closed and it gets SIGTERM, then SIGKILL.
    private func runChild(
        _ command: String, for connection: AcceptedConnection, peer: String,
        spoke: @escaping @Sendable () -> Void, evicted: EvictionMark
    ) async {
        let child: Child
        do {
            child = try Child(command: command, environment: ["NETSVC_PEER": peer])
        } catch {
            connection.input.close()
            connection.output.close()
            report("failed", peer, reason: "\(error)")
            return
        }
        report("connected", peer)
        let failure = FirstFailure()
        await withTaskCancellationHandler {
            await withDiscardingTaskGroup { group in
                // The peer's bytes → the child's stdin; the end of them closes its stdin.
                group.addTask {
                    do {
                        var first = true
                        for try await chunk in connection.input.chunks {
                            if first { spoke(); first = false }
                            try await child.input.write(chunk)
                        }
                        // An end with no byte before it is not speaking: a peer that connects
                        // and closes (a port scan) stays one that may make room for another.
                        child.input.close()
                        // The peer may wait for the answer, or be gone: only the output (or a
                        // limit, such as the idle bound) tells. A failure ends the child.
                        if let error = await connection.streams.outputEnded() {
                            failure.record(Self.reason(for: error, evicted: evicted))
                            child.terminate(grace: grace)
                        }
                    } catch is PipeEnd.Closed {
                        // The command does not read (more of) its input: stop reading the peer.
                    } catch {
                        failure.record(Self.reason(for: error, evicted: evicted))
                        child.terminate(grace: grace)
                    }
                    child.input.close()
                    connection.input.close()
                }
                // The child's stdout → the peer; its end is our half-close.
                group.addTask {
                    do {
                        while true {
                            let chunk = try await child.output.read()
                            if chunk.isEmpty { break }
                            try await connection.output.write(chunk)
                        }
                        try await connection.streams.finishSending()
                    } catch {
                        failure.record(Self.reason(for: error, evicted: evicted))
                        child.terminate(grace: grace)
                    }
                    child.output.close()
                }
            }
        } onCancel: {
            child.terminate(grace: grace)
        }
        connection.input.close()
        connection.output.close()
        let status = await child.exited()
        report("disconnected", peer, status: Int(status), reason: failure.first)
    }

    /// What ended a connection, for its report.
    static func reason(for error: any Error, evicted: EvictionMark) -> String {
        if evicted.isSet { return evictionReason }
        if error is CancellationError { return "netsvc is stopping" }
        return "\(error)"
    }

    /// Why an evicted connection ended.
    static let evictionReason = "made room for a new connection: its peer had sent nothing (--max-connections)"

    private func report(_ event: String, _ peer: String, status: Int? = nil, reason: String? = nil) {
        if json {
            var object: [String: Any] = ["event": event, "peer": peer]
            if let status { object["status"] = status }
            if let reason { object["reason"] = reason }
            printJSON(object)
        } else {
            let details = [status.map { "exit \($0)" }, reason].compactMap { $0 }.joined(separator: "; ")
            note("\(event) \(peer)" + (details.isEmpty ? "" : " (\(details))"))
        }
    }
}

/// Status lines go to stderr: stdout may be carrying a connection's bytes.
func note(_ line: String) {
    Output.standardError("netsvc: \(line)\n")
}

/// The connections being served (or waiting for their turn), at most `limit`. At the limit a
/// new connection takes the place of the oldest one whose peer has not sent a byte (whether it
/// is still there or has closed its end); when every peer has spoken, it is refused. So a
/// flood of peers that connect and say nothing, or connect and close, cannot keep out one that
/// talks.
///
/// An evicted connection keeps counting until it has left (its child ended, its descriptors
/// closed), and at most `limit` may be ending at once: beyond that a newcomer is refused too.
/// Otherwise a fast enough flood would have each newcomer evict the one before and start a
/// child of its own while the evicted children are still ending, without bound.
final class ActiveConnections: Sendable {
    private struct Entry {
        let id: UInt64
        var spoke = false
        /// Told to end to make room; still here until it has.
        var evicted = false
        /// Whether the peer has sent a byte (its end does not count), read by the connection's
        /// task or not: asked at eviction time, so a prompt peer of a busy server is not taken
        /// for a silent one.
        let hasSentBytes: @Sendable () -> Bool
        let evict: @Sendable () -> Void
    }

    private let limit: Int
    private let state = Locked<(next: UInt64, entries: [Entry])>((0, []))

    init(limit: Int) {
        self.limit = limit
    }

    /// Admits a connection (`evict` ends it if it must make room later); its id, or nil when
    /// it is refused.
    func enter(hasSentBytes: @escaping @Sendable () -> Bool, evict: @escaping @Sendable () -> Void) -> UInt64? {
        let (id, victim) = state.withLock { state -> (UInt64?, Entry?) in
            var victim: Entry?
            let ending = state.entries.count(where: \.evicted)
            if state.entries.count - ending >= limit {
                guard ending < limit,
                    let index = state.entries.firstIndex(where: { !$0.evicted && !$0.spoke && !$0.hasSentBytes() })
                else {
                    return (nil, nil)
                }
                state.entries[index].evicted = true
                victim = state.entries[index]
            }
            state.next += 1
            state.entries.append(Entry(id: state.next, hasSentBytes: hasSentBytes, evict: evict))
            return (state.next, victim)
        }
        victim?.evict()
        return id
    }

    /// The peer of connection `id` sent something.
    func spoke(_ id: UInt64) {
        state.withLock { state in
            if let index = state.entries.firstIndex(where: { $0.id == id }) { state.entries[index].spoke = true }
        }
    }

    /// Whether no connection is being served.
    var isEmpty: Bool { state.withLock { $0.entries.isEmpty } }

    func leave(_ id: UInt64) {
        let idle = state.withLock { state in
            state.entries.removeAll { $0.id == id }
            return state.entries.isEmpty
        }
        if idle { Memory.returnFreedPagesSoon() }
    }
}

/// Gives memory freed by the connections back to the system once the server is idle.
enum Memory {
    /// glibc's `malloc_trim` (not in Swift's Glibc module): after a burst of connections the
    /// freed heap stays mapped (about 12 KiB a connection, from every arena the pool threads
    /// used) until it is trimmed.
    private typealias Trim = @convention(c) (Int) -> Int32
    private static let trim: Trim? = dlsym(nil, "malloc_trim").map { unsafeBitCast($0, to: Trim.self) }
    private static let pending = Locked(false)

    /// Trims in a second, once (calls meanwhile are folded into it).
    static func returnFreedPagesSoon() {
        guard let trim, !pending.exchange(true) else { return }
        DispatchQueue.global(qos: .utility).asyncAfter(deadline: .now() + 1) {
            pending.exchange(false)
            _ = trim(0)  // returns whether memory was released; either is fine
        }
    }
}

/// Set when a connection was ended to make room for another (read from anywhere).
final class EvictionMark: Sendable {
    private let value = Locked(false)
    func set() { value.withLock { $0 = true } }
    var isSet: Bool { value.value }
}

/// The first failure of a connection's two directions, for its report.
final class FirstFailure: Sendable {
    private let value = Locked<String?>(nil)
    func record(_ reason: String) { value.withLock { if $0 == nil { $0 = reason } } }
    var first: String? { value.value }
}
