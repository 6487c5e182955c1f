import Foundation
import Logging
import Salut
import XCTest
@testable import PeerTransferCore

/// A sender and a receiver in this process, over a TLS 1.3 connection on loopback: the
/// protocol's conversations without processes or avahi-daemon. The sender is the one
/// `peerxfer send` runs once it has found and judged the receiver; the receiver is the one the
/// daemon runs on each accepted connection.
final class Conversation {
    let folder: String
    let sender: PeerConfiguration
    let receiver: PeerConfiguration
    /// Where the receiver stores what it accepts.
    var inbox: String { folder + "/inbox" }
    /// Which offers the receiver takes.
    var policy: AcceptPolicy = .all
    /// Whether the receiver has a transfer slot for the sender.
    var hasSlot = true
    /// Sender keys the receiver trusts, with their labels.
    var trusted: [String: String] = [:]
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
        let listener = try StreamListener(port: 0, tls: receiver.receiverTLS)
        defer { listener.stop() }
        let (cutAfterBytes, senderEnd) = (self.cutAfterBytes, Locked<BoundStreamPair?>(nil))
        let (stopper, stopWhenReceived) = (self.stopper, self.stopWhenReceived)
        let receiverDone = try startReceiver(on: listener, events: events, log: log) { event in
            // Cut once the receiver has that much (the bytes in flight would not count).
            if case .progress(_, let bytes) = event, let cutAfterBytes, bytes >= cutAfterBytes {
                senderEnd.value?.reset()
            }
            if case .progress(_, let bytes) = event, let stopWhenReceived, bytes >= stopWhenReceived.bytes {
                stopper.stop(stopWhenReceived.reason)
            }
        }
        let plan = try await TransferPlan.prepare(paths: paths.map { folder + "/src/" + $0 })
        let pair = SocketStreams.pair(
            toHost: "127.0.0.1", port: Int(listener.port),
            tls: sender.senderTLS(pinning: receiver.identity.publicKeySHA256))
        senderEnd.withLock { $0 = pair }
        let sent: Result<SendReport, PeerTransferError>
        do {
            try await pair.open()
            defer {
                pair.input.close()
                pair.output.close()
            }
            var sending = Sender(configuration: sender, displayName: "Sender")
            let stopSending = self.stopSending
            sending.stopper = stopper
            sent = .success(
                try await sending.transfer(
                    plan, over: pair, to: "Receiver",
                    events: { event in
                        if case .progress(let bytes, _) = event, let stopSending, bytes >= stopSending.afterBytes {
                            stopper.stop(stopSending.reason)
                        }
                    }))
        } catch let error as PeerTransferError {
            sent = .failure(error)
        }
        for await _ in receiverDone {}
        (self.stopper, self.stopSending, self.cutAfterBytes, self.stopWhenReceived) = (SendStopper(), nil, nil, nil)
        return Outcome(sent: sent, received: events.withLock { $0 }, log: log.withLock { $0 })
    }

    /// Writes `frames` to the receiver in one write, as a hostile or hasty sender could, then
    /// reads until the receiver closes; returns what the receiver reported and logged.
    func offerRaw(_ frames: [Frame]) async throws -> Outcome {
        let events = Locked([ReceiveEvent]())
        let log = Locked([String]())
        let listener = try StreamListener(port: 0, tls: receiver.receiverTLS)
        defer { listener.stop() }
        let receiverDone = try startReceiver(on: listener, events: events, log: log)
        let pair = SocketStreams.pair(
            toHost: "127.0.0.1", port: Int(listener.port),
            tls: sender.senderTLS(pinning: receiver.identity.publicKeySHA256))
        try await pair.open()
        try await pair.output.write(frames.reduce(Data()) { $0 + $1.encoded })
        var reader = FrameReader(pair.input)
        while case .some(.some) = try? await reader.next() {}
        pair.input.close()
        pair.output.close()
        for await _ in receiverDone {}
        return Outcome(
            sent: .failure(.runtime("raw")), received: events.withLock { $0 }, log: log.withLock { $0 })
    }

    /// Starts the receiver on `listener`, its events kept in `events` (and passed to `watch`),
    /// its log in `log`; the stream ends once it has run its connection to the end.
    private func startReceiver(
        on listener: StreamListener, events: Locked<[ReceiveEvent]>, log: Locked<[String]>,
        watch: @escaping @Sendable (ReceiveEvent) -> Void = { _ in }
    ) throws -> AsyncStream<Void> {
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
        let slot = hasSlot
        receiving.admit = { slot }
        let receiverDone = AsyncStream<Void>.makeStream()
        listener.accept { [receiving] connection in
            Task {
                await receiving.run(connection.streams)
                receiverDone.continuation.finish()
            }
        }
        return receiverDone.stream
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
