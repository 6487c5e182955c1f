import Foundation
import Logging
import Salut

/// A peerxfer receiver on the network: publishes `_peerxfer._tcp` (with the protocol version,
/// the device id and the key's fingerprint in its TXT record), listens with TLS 1.3 asking each
/// sender for its certificate, and receives up to ``TransferLimits/maximumConcurrentTransfers``
/// transfers at once into the inbox.
public final class ReceiverService: Sendable {
    private let advertisement: ServiceAdvertisement
    private let inbox: Inbox
    private let policy: AcceptPolicy
    private let pace: TransferPace
    private let hello: Hello
    private let configuration: PeerConfiguration
    private let logger: Logger
    private let events: @Sendable (ReceiveEvent) -> Void
    /// Greeting places and transfer slots (see ``AdmissionStateMachine``), and the streams of the
    /// connections still greeting, to close one when it is evicted.
    private let admission = Locked(AdmissionStateMachine())
    private let greetingPairs = Locked([Int: BoundStreamPair]())
    private let tally = RefusalTally()
    /// Once no transfer runs: the chunk memory kept for reuse, then malloc's free memory, go
    /// back to the system (a receiver between transfers holds what it held before them).
    private let memoryTrim = MemoryTrim {
        ChunkMemory.emptyPool()
        MemoryTrim.mallocTrim()
    }
    /// Whether received files keep their execute bits (see ``Receiver/keepsExecuteBits``).
    public let keepsExecuteBits: Bool
    /// What clears part files no one came back for (set before ``run()``).
    public var sweeper: PartSweeper { sweeperValue.withLock { $0 } }
    private let sweeperValue = Locked(PartSweeper())

    /// Sets how part files no one came back for are cleared (before ``run()``).
    public func clearParts(with sweeper: PartSweeper) {
        sweeperValue.withLock { $0 = sweeper }
        inbox.partShareOfOneSender.withLock { $0 = sweeper.shareOfOneSender }
    }
    private let nextID = Locked(0)

    /// The name the service is published under (differs from the one asked for after a
    /// collision).
    public var name: String { advertisement.name }
    /// The port it listens on.
    public var port: UInt16 { advertisement.listener?.port ?? 0 }
    /// The inbox folder.
    public var inboxPath: String { inbox.path }

    /// Checks that `path` can be the inbox (made if missing, and written to), before anything
    /// else is made or published.
    /// - Throws: ``PeerTransferError/usage(_:)`` naming what is wrong.
    public static func checkInbox(_ path: String) throws {
        _ = try Inbox(path: path)
    }

    /// Opens the inbox, listens and publishes: on the link, or with `wideArea` in the
    /// wide-area `domain` (signed DNS updates). A daemon should set up malloc first
    /// (``MemoryTrim/configureMalloc(arenas:)``), as `peerxfer serve` does.
    /// - Throws: ``PeerTransferError/runtime(_:)`` when the inbox cannot be opened or the
    ///   service cannot be published (no avahi-daemon, port taken).
    public static func start(
        name: String, inbox inboxPath: String, configuration: PeerConfiguration,
        policy: AcceptPolicy, port: Int = 0, pace: TransferPace = TransferPace(),
        domain: String = "local", wideArea: WideAreaPublishing? = nil, keepsExecuteBits: Bool = false, logger: Logger,
        events: @escaping @Sendable (ReceiveEvent) -> Void = { _ in }
    ) async throws -> ReceiverService {
        let knownFile = configuration.knownPeersFile
        // A file that cannot be read trusts no one (fails closed).
        let inbox = try Inbox(path: inboxPath) { key in (try? KnownPeers.load(from: knownFile))?.trusted[key] != nil }
        if !inbox.recordsSenders {
            logger.warning(
                "the inbox's file system keeps no extended attributes: part files cannot be told apart by sender (any peer may resume or discard another's interrupted file), and files sent again are sent whole"
            )
        }
        let tls = configuration.receiverTLS
        let txt: TXTRecord
        do {
            txt = try TXTRecord([
                "v": "\(TransferLimits.protocolVersion)", "id": configuration.deviceID,
                "fp": configuration.identity.publicKeySHA256,
            ])
        } catch {
            throw PeerTransferError.runtime("cannot make the TXT record: \(error)")
        }
        var limits = ConnectionLimits()
        limits.maximumConnectionsSettingUp = 16
        let advertisement: ServiceAdvertisement
        do {
            if let wideArea {
                advertisement = try await ServiceAdvertisement.listen(
                    name: name, type: TransferLimits.serviceType, domain: domain,
                    port: port, txtRecord: txt, tls: tls, limits: limits,
                    bufferSize: TransferLimits.connectionBufferSize, wideArea: wideArea)
            } else {
                advertisement = try await ServiceAdvertisement.listen(
                    name: name, type: TransferLimits.serviceType, port: port,
                    txtRecord: txt, tls: tls, limits: limits,
                    bufferSize: TransferLimits.connectionBufferSize)
            }
        } catch {
            throw PeerTransferError.runtime("cannot publish \"\(name)\": \(error)")
        }
        let hello = Hello(
            protocolVersion: TransferLimits.protocolVersion, device: configuration.deviceID, name: advertisement.name)
        return ReceiverService(
            advertisement: advertisement, inbox: inbox, policy: policy, hello: hello,
            configuration: configuration, pace: pace, keepsExecuteBits: keepsExecuteBits, logger: logger, events: events
        )
    }

    private init(
        advertisement: ServiceAdvertisement, inbox: Inbox, policy: AcceptPolicy, hello: Hello,
        configuration: PeerConfiguration, pace: TransferPace, keepsExecuteBits: Bool, logger: Logger,
        events: @escaping @Sendable (ReceiveEvent) -> Void
    ) {
        self.keepsExecuteBits = keepsExecuteBits
        self.advertisement = advertisement
        self.pace = pace
        self.inbox = inbox
        self.policy = policy
        self.hello = hello
        self.configuration = configuration
        self.logger = logger
        self.events = events
    }

    /// How often each sender's part files are counted anew (see `PartLedger.swift`).
    static let partCountInterval: Duration = .seconds(300)

    /// Receives until the calling task is cancelled, then withdraws the service and waits for
    /// the transfers in progress to end (their part files stay, to be resumed).
    public func run() async {
        let knownFile = configuration.knownPeersFile
        // A file that cannot be read trusts no one (fails closed).
        let trusted: @Sendable (String) -> String? = { key in
            (try? KnownPeers.load(from: knownFile))?.trusted[key]
        }
        // A discarding group: a daemon's finished transfers must not pile up as results.
        await withDiscardingTaskGroup { group in
            group.addTask { [advertisement] in
                // Cancellation of run() ends the accept loop by withdrawing the service.
                await withTaskCancellationHandler {
                    while !Task.isCancelled { try? await Task.sleep(for: .seconds(3600)) }
                } onCancel: {
                    advertisement.cancel()
                }
            }
            group.addTask { await self.sweepPartFiles() }
            group.addTask { await self.countPartFiles() }
            group.addTask { await self.logRefusals() }
            for await connection in advertisement.connections {
                let id = nextID.withLock {
                    $0 += 1; return $0
                }
                let source = connection.remoteAddress.map { Self.sourceAddress($0) } ?? "?"
                greetingPairs.withLock { $0[id] = connection.streams }
                carryOut(admission.withLock { $0.arrived(id, from: source) })
                let receiver = self.receiver(id, trusted: trusted)
                group.addTask { [self] in
                    await receiver.run(connection.streams)
                    ended(id)
                }
            }
            group.cancelAll()
        }
    }

    /// Clears part files no one came back for, at the start and every hour, until cancelled.
    private func sweepPartFiles() async {
        let sweeper = self.sweeper  // one sweeper, its limits as logged
        while !Task.isCancelled {
            let swept = await onThreadOfItsOwn { [sweeper, inbox] in sweeper.sweep(inbox.path) }
            if swept.removed > 0 {
                await onThreadOfItsOwn { [inbox] in inbox.countParts() }  // what the sweeper removed no longer counts
                logger.notice(
                    "removed \(Wording.counted(swept.removed, "part file")) (\(swept.bytes) bytes) that no sender came back for within \(Wording.duration(Double(sweeper.maximumAge.components.seconds))), or to keep \(Int(sweeper.reserve * 100)) % of the disk free"
                )
            }
            try? await Task.sleep(for: .seconds(3600))
        }
    }

    /// Counts each sender's part files at the start and every few minutes, off any offer's way
    /// (see PartLedger.swift), until cancelled.
    private func countPartFiles() async {
        while !Task.isCancelled {
            await onThreadOfItsOwn { [inbox] in inbox.countParts() }
            try? await Task.sleep(for: Self.partCountInterval)
        }
    }

    /// Logs one line per interval for the connections refused or cut before they offered
    /// anything, not one each, until cancelled.
    private func logRefusals() async {
        while !Task.isCancelled {
            try? await Task.sleep(for: Self.tallyInterval)
            // Loud only in aggregate: a few such connections (a `peers` look, a scan) are
            // information; many are an attack, or a misconfigured peer, worth a warning.
            if let (line, count) = tally.drain(over: Self.tallyInterval) {
                logger.log(level: count >= Self.loudTally ? .warning : .info, "\(line)")
            }
        }
    }

    /// The receiver that runs connection `id`: this service's settings, and its admission
    /// asked once the sender said hello.
    private func receiver(_ id: Int, trusted: @escaping @Sendable (String) -> String?) -> Receiver {
        var receiver = Receiver(
            id: id, inbox: inbox, policy: policy, hello: hello, trustedLabel: trusted, events: events, logger: logger)
        receiver.pace = pace
        receiver.idleBound = pace.idleBound
        receiver.configOption = configuration.configOption
        receiver.ownKey = configuration.identity.publicKeySHA256
        receiver.keepsExecuteBits = keepsExecuteBits
        receiver.admit = { [self] in
            let (actions, slots) = admission.withLock { ($0.identified(id), $0.limits.transfers) }
            greetingPairs.withLock { _ = $0.removeValue(forKey: id) }
            carryOut(actions)
            if actions.contains(.admit(id)) { return nil }
            for case .refuseBusy(id, let why) in actions { return why }
            // No longer greeting (closed to make room meanwhile): no slot either. Its connection
            // is closed already, so no one reads this reason; it only ends the receiver.
            return .everySlotTaken(limit: slots)
        }
        receiver.endedBeforeOffer = { [tally] cause in tally.endedBeforeOffer(cause) }
        return receiver
    }

    /// Connection `id` ended: its slot is given back.
    private func ended(_ id: Int) {
        greetingPairs.withLock { _ = $0.removeValue(forKey: id) }
        let idle = admission.withLock { machine -> Bool in
            machine.ended(id)
            return machine.transferring.isEmpty
        }
        // A large offer's manifest can leave a hundred MiB free in malloc's arenas; once
        // nothing runs, it goes back to the system (one trim at a time, off the shared pool: a
        // flood of connections asks thousands of times).
        if idle { memoryTrim.request() }
    }

    /// How often refused and cut connections are summed up in the log.
    static let tallyInterval: Duration = .seconds(10)
    /// How many such connections in one interval make the summary a warning.
    static let loudTally = 20

    /// Carries out what ``AdmissionStateMachine`` decided: an evicted connection is closed (its receiver
    /// then ends quietly, counted), a busy refusal is counted (its receiver tells the sender).
    private func carryOut(_ actions: [AdmissionStateMachine.Action]) {
        for action in actions {
            switch action {
            case .evict(let id):
                if let pair = greetingPairs.withLock({ $0.removeValue(forKey: id) }) {
                    pair.input.close()
                    pair.output.close()
                }
                tally.evicted()
            case .refuseBusy(_, let why):
                tally.busy(why)
            case .admit:
                break
            }
        }
    }

    /// The unit of fairness a peer's socket address belongs to: the whole address (an IPv6
    /// link-local one with its scope). Not an IPv6 /64: on a LAN every neighbour shares the
    /// link's /64 (fe80::/64 for all of them), so one attacker speaking IPv6 would take every
    /// IPv6 neighbour's share with its own; the library's listener counts whole addresses too.
    static func sourceAddress(_ address: SocketAddress) -> String {
        address.host
    }
}
