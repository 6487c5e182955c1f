import Foundation
import Logging
import Salut
import XCTest
@testable import PeerTransferCore

/// A sender and a receiver in this process, over a connection held in memory (or, when asked,
/// TLS 1.3 on loopback): the protocol's conversations without processes or avahi-daemon. The
/// sender is the one `peerxfer send` runs once it has found and judged the receiver; the
/// receiver is the one the daemon runs on each accepted connection.
final class Conversation {
    /// What carries the conversation.
    enum Link {
        /// The two ends of ``BoundStreamPair/makeConnection(bufferSize:)``: the receiver is
        /// told the sender's key, as a TLS handshake would have proved it.
        case memory
        /// TLS 1.3 on loopback, each end proving its key.
        case tls
    }
    /// What carries the next conversations.
    var link = Link.memory

    let folder: String
    let sender: PeerConfiguration
    let receiver: PeerConfiguration
    /// Where the receiver stores what it accepts.
    var inbox: String { folder + "/inbox" }
    /// Which offers the receiver takes.
    var policy: AcceptPolicy = .all
    /// Why the receiver has no transfer slot for the sender, or nil when it has one.
    var slotRefused: ReceiverService.AdmissionStateMachine.Busy?
    /// Sender keys the receiver trusts, with their labels.
    var trusted: [String: String] = [:]
    /// How long the receiver waits for progress before it drops the sender (its default: nil).
    var idleBound: Duration?
    /// The slowest pace the receiver keeps a transfer at (its default: nil).
    var pace: TransferPace?
    /// The next send's stopper (a new one after each send): a judge can stop the send with it.
    private(set) var stopper = SendStopper()
    /// When set, the next send is stopped this way once it has sent at least this many bytes.
    var stopSending: (reason: SendStop, afterBytes: UInt64)?
    /// When set, the next send is stopped this way once the receiver has at least this many
    /// bytes (whatever the sender is doing then: most often, a write waiting for room).
    var stopWhenReceived: (reason: SendStop, bytes: UInt64)?
    /// When set, the next send's connection is reset by the sender, without a word, once the
    /// receiver has at least this many bytes (a sender killed, a link lost).
    var cutAfterBytes: UInt64?
    /// When set, called with the bytes the next send has sent so far, each time it sent more
    /// (to change a file while it is read, for example).
    var whileSending: (@Sendable (UInt64) -> Void)?

    init() throws {
        folder = FileManager.default.temporaryDirectory.appendingPathComponent("px-talk-\(UUID().uuidString)").path
        sender = try PeerConfiguration(directory: folder + "/sender")
        receiver = try PeerConfiguration(directory: folder + "/receiver")
        try FileManager.default.createDirectory(atPath: folder + "/src", withIntermediateDirectories: true)
    }

    deinit { try? FileManager.default.removeItem(atPath: folder) }

    /// Makes `relative` under the sender's `src` folder with `size` bytes of a pattern.
    @discardableResult
    func makeFile(_ relative: String, size: Int, seed: UInt8 = 1) throws -> String {
        let path = folder + "/src/" + relative
        try FileManager.default.createDirectory(
            atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
        var bytes = [UInt8](repeating: 0, count: size)
        for index in bytes.indices { bytes[index] = UInt8(truncatingIfNeeded: index &* 31 &+ Int(seed)) }
        try Data(bytes).write(to: URL(fileURLWithPath: path))
        return path
    }

    /// What one conversation gave: the sender's report or error, and what the receiver reported
    /// and logged.
    struct Outcome {
        var sent: Result<SendReport, PeerTransferError>
        var received: [ReceiveEvent]
        var log: [String]

        /// The sender's error (a test failure when it succeeded).
        func error(file: StaticString = #filePath, line: UInt = #line) -> PeerTransferError? {
            guard case .failure(let error) = sent else {
                XCTFail("the send succeeded", file: file, line: line)
                return nil
            }
            return error
        }

        /// The receiver's outcome, from its `ended` event.
        var receiverError: PeerTransferError? {
            for event in received {
                if case .ended(_, _, _, let error) = event { return error }
            }
            return nil
        }
    }

    /// Offers `paths` (under the sender's `src` folder) and sends what the receiver accepts;
    /// returns once both ends are done.
    func send(_ paths: [String]) async throws -> Outcome {
        let events = Locked([ReceiveEvent]())
        let log = Locked([String]())
        let (cutAfterBytes, senderEnd) = (self.cutAfterBytes, Locked<BoundStreamPair?>(nil))
        let (stopper, stopWhenReceived) = (self.stopper, self.stopWhenReceived)
        let plan = try await TransferPlan.prepare(paths: paths.map { folder + "/src/" + $0 })
        let (pair, receiverDone, listener) = try connect(events: events, log: log) { event in
            // Cut once the receiver has that much (the bytes in flight would not count).
            if case .progress(_, let bytes) = event, let cutAfterBytes, bytes >= cutAfterBytes {
                senderEnd.value?.reset()
            }
            if case .progress(_, let bytes) = event, let stopWhenReceived, bytes >= stopWhenReceived.bytes {
                stopper.stop(stopWhenReceived.reason)
            }
        }
        defer { listener?.stop() }
        senderEnd.withLock { $0 = pair }
        let sent: Result<SendReport, PeerTransferError>
        do {
            try await pair.open()
            defer {
                pair.input.close()
                pair.output.close()
            }
            var sending = Sender(configuration: sender, displayName: "Sender")
            let (stopSending, whileSending) = (self.stopSending, self.whileSending)
            sending.stopper = stopper
            sent = .success(
                try await sending.transfer(
                    plan, over: pair, to: "Receiver",
                    events: { event in
                        guard case .progress(let bytes, _) = event else { return }
                        whileSending?(bytes)
                        if let stopSending, bytes >= stopSending.afterBytes {
                            stopper.stop(stopSending.reason)
                        }
                    }))
        } catch let error as PeerTransferError {
            sent = .failure(error)
        }
        for await _ in receiverDone {}
        (self.stopper, self.stopSending, self.cutAfterBytes, self.stopWhenReceived) = (SendStopper(), nil, nil, nil)
        whileSending = nil
        return Outcome(sent: sent, received: events.withLock { $0 }, log: log.withLock { $0 })
    }

    /// Offers `paths` (under the sender's `src` folder) to a scripted receiver instead of the
    /// real one, over a connection in memory: `script` reads the sender's frames and writes its
    /// own (a liar, a receiver of another version), then its end closes. Returns what the
    /// sender reported: its events, and its report or error.
    func sendToScripted(
        _ paths: [String], answerBound: Duration? = nil,
        receiver script: @escaping @Sendable (inout FrameReader, OutputStream) async throws -> Void
    ) async throws -> (events: [SendEvent], sent: Result<SendReport, PeerTransferError>) {
        let plan = try await TransferPlan.prepare(paths: paths.map { folder + "/src/" + $0 })
        let (senderEnd, receiverEnd) = BoundStreamPair.makeConnection(bufferSize: 256 * 1024)
        let scripted = Task {
            try? await receiverEnd.open()
            var reader = FrameReader(receiverEnd.input)
            try? await script(&reader, receiverEnd.output)
            receiverEnd.input.close()
            receiverEnd.output.close()
        }
        let bound = Self.resetAfterTheTestsBound(senderEnd)
        defer { bound.cancel() }
        let events = Locked([SendEvent]())
        let sent: Result<SendReport, PeerTransferError>
        do {
            try await senderEnd.open()
            defer {
                senderEnd.input.close()
                senderEnd.output.close()
            }
            var sending = Sender(configuration: sender, displayName: "Sender")
            if let answerBound { sending.answerBound = answerBound }
            sent = .success(
                try await sending.transfer(
                    plan, over: senderEnd, to: "Receiver", events: { event in events.withLock { $0.append(event) } }))
        } catch let error as PeerTransferError {
            sent = .failure(error)
        }
        await scripted.value
        return (events.value, sent)
    }

    /// Writes `frames` to the receiver in one write, as a hostile or hasty sender could, then
    /// reads until the receiver closes; returns what the receiver reported and logged.
    func offerRaw(_ frames: [Frame]) async throws -> Outcome {
        try await sendFromScript { _, output in
            try await output.write(frames.reduce(Data()) { $0 + $1.encoded })
        }
    }

    /// Runs `script` as the sender, against the real receiver: it writes its own frames and
    /// reads the receiver's (a sender that trickles, or stops halfway), then the rest of what
    /// the receiver sends is read until it closes. Returns what the receiver reported and
    /// logged (`sent` holds no report: a script keeps what it read itself).
    func sendFromScript(
        _ script: @escaping @Sendable (inout FrameReader, OutputStream) async throws -> Void
    ) async throws -> Outcome {
        let events = Locked([ReceiveEvent]())
        let log = Locked([String]())
        let (pair, receiverDone, listener) = try connect(events: events, log: log)
        defer { listener?.stop() }
        try await pair.open()
        let bound = Self.resetAfterTheTestsBound(pair)
        defer { bound.cancel() }
        var reader = FrameReader(pair.input)
        try await script(&reader, pair.output)
        while case .some(.some) = try? await reader.next() {}
        pair.input.close()
        pair.output.close()
        for await _ in receiverDone {}
        return Outcome(
            sent: .failure(.runtime("scripted")), received: events.withLock { $0 }, log: log.withLock { $0 })
    }

    /// Starts a receiver and connects to it over ``link``: the sender's end (not yet open), a
    /// stream that ends once the receiver has run the connection to its end, and the listener
    /// to stop (over TLS). The receiver's events are kept in `events` (and passed to `watch`),
    /// its log in `log`.
    private func connect(
        events: Locked<[ReceiveEvent]>, log: Locked<[String]>,
        watch: @escaping @Sendable (ReceiveEvent) -> Void = { _ in }
    ) throws -> (BoundStreamPair, AsyncStream<Void>, StreamListener?) {
        let receiving = try makeReceiver(events: events, log: log, watch: watch)
        let receiverDone = AsyncStream<Void>.makeStream()
        switch link {
        case .memory:
            let (senderEnd, receiverEnd) = BoundStreamPair.makeConnection(bufferSize: 256 * 1024)
            let key = sender.identity.publicKeySHA256
            Task {
                await receiving.run(receiverEnd, senderKey: key)
                receiverDone.continuation.finish()
            }
            return (senderEnd, receiverDone.stream, nil)
        case .tls:
            let listener = try StreamListener(port: 0, tls: receiver.receiverTLS)
            listener.accept { connection in
                Task {
                    await receiving.run(connection.streams)
                    receiverDone.continuation.finish()
                }
            }
            let senderEnd = SocketStreams.pair(
                toHost: "127.0.0.1", port: Int(listener.port),
                tls: sender.senderTLS(pinning: receiver.identity.publicKeySHA256))
            return (senderEnd, receiverDone.stream, listener)
        }
    }

    /// The receiver the daemon would run, its events kept in `events` (and passed to `watch`),
    /// its log in `log`.
    private func makeReceiver(
        events: Locked<[ReceiveEvent]>, log: Locked<[String]>,
        watch: @escaping @Sendable (ReceiveEvent) -> Void
    ) throws -> Receiver {
        let trusted = self.trusted
        let inbox = try Inbox(path: self.inbox) { trusted[$0] != nil }
        var receiving = Receiver(
            id: 1, inbox: inbox, policy: policy,
            hello: Hello(protocolVersion: TransferLimits.protocolVersion, device: receiver.deviceID, name: "Receiver"),
            trustedLabel: { trusted[$0] },
            events: { event in
                events.withLock { $0.append(event) }
                watch(event)
            },
            logger: Logger(label: "receiver", factory: { _ in CollectingLogHandler(lines: log) }))
        receiving.ownKey = receiver.identity.publicKeySHA256
        if let idleBound { receiving.idleBound = idleBound }
        if let pace { receiving.pace = pace }
        let refused = slotRefused
        receiving.admit = { refused }
        return receiving
    }

    /// Resets `pair` after 60 s unless cancelled first. The ends' own bounds end every
    /// conversation; this ends one whose peer failed to (the test then fails on what it did not
    /// say) instead of leaving the test hanging.
    private static func resetAfterTheTestsBound(_ pair: BoundStreamPair) -> Task<Void, Never> {
        Task {
            try? await Task.sleep(for: .seconds(60))
            pair.reset()
        }
    }

    /// The part files in the inbox (what interrupted sends left).
    func partFiles() -> [String] {
        inboxListing().filter { $0.hasSuffix(".peerxfer-part") }
    }

    /// The bytes of `relative` in the inbox, nil when it is not there.
    func received(_ relative: String) -> Data? {
        FileManager.default.contents(atPath: inbox + "/" + relative)
    }

    /// The bytes of `relative` under the sender's `src` folder.
    func original(_ relative: String) -> Data? {
        FileManager.default.contents(atPath: folder + "/src/" + relative)
    }

    /// What the inbox holds, every entry's path relative to it, sorted.
    func inboxListing() -> [String] {
        ((FileManager.default.subpaths(atPath: inbox)) ?? []).sorted()
    }
}

/// Keeps every log line's message, to check what the receiver's log says.
struct CollectingLogHandler: LogHandler {
    let lines: Locked<[String]>
    var logLevel: Logger.Level = .debug
    var metadata: Logger.Metadata = [:]

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        lines.withLock { $0.append("\(event.level): \(event.message)") }
    }
}
