import Foundation
import SalutSession
import SalutStreams
import SalutTestSupport
import XCTest

/// Records every delegate call in order, with what came with it.
final class RecordingDelegate: PeerSessionStreamDelegate, @unchecked Sendable {
    // @unchecked: every stored var is touched under `lock`, but `trustAnswer` (set before the session runs) and
    // `challenges` and `overlappingCalls`, which tests read unlocked once the calls that write them are done.
    private let lock = StateLock()
    private var log: [String] = []
    private var completions: [Int: (any Error)?] = [:]
    private var collected: [Int: PeerTaskMetrics] = [:]
    private var captured: [(InputStream, OutputStream)] = []
    /// What to answer trust challenges (nil: the default handling).
    var trustAnswer: PeerTrustChallenge.Disposition?
    private(set) var challenges: [PeerTrustChallenge] = []
    private var waiters: [(String, CheckedContinuation<Void, Never>)] = []
    private var concurrentCalls = 0
    private(set) var overlappingCalls = 0

    var events: [String] { lock.withLock { log } }
    func error(of task: PeerSessionTask) -> (any Error)?? { lock.withLock { completions[task.taskIdentifier] } }
    func metrics(of task: PeerSessionTask) -> PeerTaskMetrics? { lock.withLock { collected[task.taskIdentifier] } }
    var capturedStreams: [(InputStream, OutputStream)] { lock.withLock { captured } }

    private func record(_ event: String, _ change: () -> Void = {}) {
        lock.withLock {
            concurrentCalls += 1
            if concurrentCalls > 1 { overlappingCalls += 1 }
        }
        Thread.sleep(forTimeInterval: 0.001)  // widen the window in which overlapping calls would show
        let ready = lock.withLock { () -> [(String, CheckedContinuation<Void, Never>)] in
            concurrentCalls -= 1
            log.append(event)
            change()
            let ready = waiters.filter { event.hasPrefix($0.0) }
            waiters.removeAll { event.hasPrefix($0.0) }
            return ready
        }
        ready.forEach { $0.1.resume() }
    }

    /// Waits until an event starting with `prefix` has been recorded.
    func wait(for prefix: String, seconds: Double = 20) async throws {
        try await withDeadline(seconds, "delegate event \(prefix)") {
            await withCheckedContinuation { continuation in
                let done = self.lock.withLock { () -> Bool in
                    if self.log.contains(where: { $0.hasPrefix(prefix) }) { return true }
                    self.waiters.append((prefix, continuation))
                    return false
                }
                if done { continuation.resume() }
            }
        }
    }

    func peerSession(_ session: PeerSession, didBecomeInvalidWithError error: (any Error)?) {
        record("invalid")
    }
    func peerSession(
        _ session: PeerSession, task: PeerSessionTask, didReceive challenge: PeerTrustChallenge,
        completionHandler: @escaping @Sendable (PeerTrustChallenge.Disposition) -> Void
    ) {
        record("challenge \(task.taskIdentifier)") { challenges.append(challenge) }
        completionHandler(trustAnswer ?? .performDefaultHandling)
    }
    func peerSession(_ session: PeerSession, task: PeerSessionTask, didFinishCollecting metrics: PeerTaskMetrics) {
        record("metrics \(task.taskIdentifier)") { collected[task.taskIdentifier] = metrics }
    }
    func peerSession(_ session: PeerSession, task: PeerSessionTask, didCompleteWithError error: (any Error)?) {
        record("complete \(task.taskIdentifier)") { completions[task.taskIdentifier] = .some(error) }
    }
    func peerSession(_ session: PeerSession, readClosedFor streamTask: PeerStreamTask) {
        record("readClosed \(streamTask.taskIdentifier)")
    }
    func peerSession(_ session: PeerSession, writeClosedFor streamTask: PeerStreamTask) {
        record("writeClosed \(streamTask.taskIdentifier)")
    }
    func peerSession(
        _ session: PeerSession, streamTask: PeerStreamTask, didBecome inputStream: InputStream,
        outputStream: OutputStream
    ) {
        record("captured \(streamTask.taskIdentifier)") { captured.append((inputStream, outputStream)) }
    }
}

/// An echo server on our own listener (IPv4 and IPv6), counting connections open at once.
final class EchoServer: @unchecked Sendable {
    // @unchecked: the counters are touched only under `lock`; the listener is constant and thread-safe.
    let listener: StreamListener
    private let lock = StateLock()
    private var open = 0
    private(set) var mostAtOnce = 0
    private(set) var accepted = 0

    init(tls: TLSConfiguration? = nil) throws {
        listener = try StreamListener(port: 0, tls: tls)
        // Weak: the listener's handler must not keep the server (and so the listener) alive.
        listener.accept { [weak self] connection in
            guard let self else { return }
            self.lock.withLock {
                self.open += 1; self.accepted += 1; self.mostAtOnce = max(self.mostAtOnce, self.open)
            }
            Task {
                defer { self.lock.withLock { self.open -= 1 } }
                guard (try? await connection.streams.open()) != nil else { return }
                do {
                    for try await chunk in connection.input.chunks { try await connection.output.write(chunk) }
                } catch {}
                connection.output.close()
            }
        }
    }

    var port: Int { Int(listener.port) }
    var peak: Int { lock.withLock { mostAtOnce } }
    var count: Int { lock.withLock { accepted } }

    deinit { listener.stop() }
}

/// A listener that accepts and then says nothing (for timeouts).
final class SilentServer: @unchecked Sendable {
    // @unchecked: the listener is thread-safe and `held` locks itself.
    let listener: StreamListener
    private let held = Locked<[AcceptedConnection]>([])

    init() throws {
        listener = try StreamListener(port: 0)
        listener.accept { [held] connection in
            // Counted once open, so that `say` finds only connections it can write to.
            Task { if (try? await connection.streams.open()) != nil { held.withLock { $0.append(connection) } } }
        }
    }

    var port: Int { Int(listener.port) }
    /// How many connections it has accepted and opened.
    var count: Int { held.value.count }

    /// Sends `text` on every connection accepted so far.
    func say(_ text: String) async throws {
        for connection in held.value { try await connection.output.write(Data(text.utf8)) }
    }

    /// Ends what it sends on every connection accepted so far (the peer reads the end).
    func finishSending() {
        for connection in held.value { connection.output.close() }
    }

    deinit { listener.stop() }
}

/// A patterned payload.
func pattern(_ count: Int, seed: Int = 0) -> Data {
    var data = Data(count: count)
    data.withUnsafeMutableBytes { raw in
        for i in 0..<raw.count { raw[i] = UInt8(truncatingIfNeeded: i &* 13 &+ seed &+ i >> 9) }
    }
    return data
}
