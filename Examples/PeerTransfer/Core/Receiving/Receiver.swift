import Foundation
import Logging
import SalutStreams

/// Which offers a receiver takes.
public enum AcceptPolicy: Sendable {
    /// Every offer from any sender (for scripts and tests).
    case all
    /// Offers from senders whose key is trusted (`peerxfer trust`); others are refused with a
    /// trust failure.
    case known
    /// Each offer is put to `judge`, which returns the indexes of the entries to accept (none
    /// declines), and why when it declines.
    case ask(@Sendable (IncomingOffer) async -> Judgement)

    /// Whether a sender must be trusted here before it may offer anything.
    var takesOnlyKnownSenders: Bool {
        if case .known = self { return true }
        return false
    }
}

/// What the judge of an offer decided: the entries it accepts and, for the rest, who declined
/// them and what the sender is told ("the receiver says: …"), named truthfully (declined by a
/// person is not "no one answered").
public struct Judgement: Sendable, Equatable {
    /// Who or what ended the question, for the entries not accepted.
    public enum Cause: Sendable, Equatable {
        /// The person at the receiver said no.
        case person
        /// The accept hook (`serve --hook`) said no.
        case hook
        /// No one answered in time, or the receiver stopped first: nobody said no.
        case noAnswer
        /// There was no one and nothing to ask (no terminal and no hook, a hook that cannot
        /// start).
        case cannotAsk
    }

    /// The indexes of the entries accepted.
    public var accepted: Set<Int>
    /// Why nothing was accepted, for the sender; nil for the general wording.
    public var reason: String?
    /// Who declined what was not accepted.
    public var cause: Cause

    /// A judgement accepting `accepted`; the rest declined by `cause` (a person by default),
    /// with `reason` when it accepts nothing.
    public init(accepted: Set<Int>, reason: String? = nil, cause: Cause = .person) {
        self.accepted = accepted
        self.reason = reason
        self.cause = cause
    }

    /// Nothing accepted, by `cause`, saying why.
    public static func declined(_ reason: String, by cause: Cause = .person) -> Judgement {
        Judgement(accepted: [], reason: reason, cause: cause)
    }

    /// The failure a sender is told of when nothing was accepted.
    var refusal: PeerTransferError {
        let reason = reason ?? "declined, by the person or the hook that answers offers there"
        switch cause {
        case .person: return .declined(reason)
        case .hook: return .declinedByHook(reason)
        case .noAnswer: return .noAnswer(reason)
        case .cannotAsk: return .cannotAsk(reason)
        }
    }
}

/// An offer as a receiver's policy sees it.
public struct IncomingOffer: Sendable {
    /// The name the sender claims (escaped for printing): anyone can claim any name, so it is
    /// shown after what this device knows of the key.
    public var senderName: String
    /// The SHA-256 of the sender's public key: the thing to decide on.
    public var senderKey: String
    /// The label this device trusts that key under (`peerxfer trust`), escaped; nil when the
    /// key is not trusted here.
    public var senderLabel: String?
    /// The verification code of this receiver's key and the sender's (``VerificationCode``),
    /// which the sender showed when it asked whether to trust this receiver.
    public var code: String
    /// What is offered.
    public var manifest: Manifest

    /// True when the sender's key is trusted here.
    public var senderTrusted: Bool { senderLabel != nil }

    /// Who offers, for a person: the verdict and what this device knows first, the claimed
    /// name last ("trusted sender "laptop" [key 368bc9ff…], calling itself "vm"").
    public var introduction: String {
        let key = "key \(senderKey.prefix(16))…"
        if let senderLabel, senderLabel != KnownPeers.trustedByFingerprint {
            return "trusted sender \"\(senderLabel)\" [\(key)], calling itself \"\(senderName)\""
        }
        if senderLabel != nil { return "trusted sender [\(key)], calling itself \"\(senderName)\"" }
        return "unknown sender [\(key), code \(code)], calling itself \"\(senderName)\""
    }
}

/// What a receiver reports about its transfers, for logs and `peerxfer status`.
public enum ReceiveEvent: Sendable {
    case offered(id: Int, sender: String, key: String, files: Int, bytes: UInt64)
    /// The offer was accepted (all or part of it): its bytes may come.
    case answered(id: Int)
    /// A sender was turned away by the policy before it could offer anything (`--accept
    /// known`, and its key is not trusted): `sender` as shown, `key` its whole key.
    case turnedAway(sender: String, key: String)
    case progress(id: Int, bytes: UInt64)
    case fileVerified(id: Int, storedAs: String)
    case fileFailed(id: Int, path: String, reason: String)
    case ended(id: Int, verified: Int, failed: Int, error: PeerTransferError?)
}

/// Receives one transfer on an accepted connection: drives a ``Receiver.StateMachine`` with
/// the frames read, and performs its actions on the inbox.
struct Receiver {
    let id: Int
    let inbox: Inbox
    let policy: AcceptPolicy
    let hello: Hello
    /// The label a key is trusted under here (`peerxfer trust`), nil when it is not trusted.
    let trustedLabel: @Sendable (String) -> String?
    /// This receiver's own key (for the verification code shown with an offer).
    var ownKey = ""
    let events: @Sendable (ReceiveEvent) -> Void
    let logger: Logger
    /// What `peerxfer trust` needs besides the key to act on this receiver's configuration
    /// (``PeerConfiguration/configOption``): shown in this receiver's own log, never sent.
    var configOption = ""
    /// How long the sender may make no progress before the connection is dropped.
    var idleBound: Duration = .seconds(60)
    /// How slowly an accepted transfer may go before it is cut.
    var pace = TransferPace()
    /// How long a connection has, from its start, to carry the sender's hello (TLS included).
    var helloBound: Duration = .seconds(10)
    /// Whether received files keep the execute bits their sender gave them (`serve
    /// --keep-execute-bits`); by default they are cleared, so that nothing a peer sends is
    /// runnable here until someone makes it so.
    var keepsExecuteBits = false

    /// The mode a received file is stored with.
    func storedMode(_ offered: UInt32) -> UInt32 { keepsExecuteBits ? offered : offered & ~0o111 }

    /// Called once the sender's hello passed the policy: nil when it may transfer (it took one
    /// of the daemon's transfer slots), or why it is refused as busy (it is told so). Until then
    /// the connection holds no slot (see ``ReceiverService/AdmissionStateMachine``).
    var admit: @Sendable () -> ReceiverService.AdmissionStateMachine.Busy? = { nil }
    /// When set, a connection that ends before any offer (a scan, a silent or slow client, a
    /// failed handshake) is reported here, to be counted, instead of on a log line of its own.
    var endedBeforeOffer: (@Sendable (String) -> Void)?

    /// Runs the exchange to its end; never throws (failures are sent to the peer, logged and
    /// reported as events). A thin shell: ``Exchange`` performs the machine's actions.
    /// `senderKey`: the sender's key when the streams carry no TLS (the two ends of an
    /// in-memory connection, whose other end is known); nil: the key its TLS handshake proved.
    func run(_ pair: BoundStreamPair, senderKey: String? = nil) async {
        // Until the hello, the shorter bound: a connection that says nothing holds nothing long.
        let watchdog = ProgressWatchdog(bound: min(helloBound, idleBound))
        let watching = Task { await watchdog.watch(pair, what: "from the sender") }
        defer { watching.cancel() }
        let exchange = Exchange(self, on: pair, senderKey: senderKey, watchdog: watchdog)
        defer { exchange.release() }
        await exchange.converse()
        await exchange.settle()
        exchange.reportEnd(partsRemoved: await exchange.removePartsIfCancelled())
    }

    /// The policy's answer, with what the inbox already has, and the bytes of free space
    /// promised to the transfer (see ``Inbox/promise(_:)``).
    func decide(
        _ manifest: Manifest, _ paths: [RelativePath], senderName: String,
        senderKey: String, reader: inout FrameReader, watchdog: ProgressWatchdog
    ) async -> Result<Decision, PeerTransferError> {
        // Before anyone is asked: an offer this sender's leftovers leave no room for is refused
        // whatever the answer (see ``Inbox/checkPartRoom(for:adding:replacing:transfer:)``).
        if let refusal = Self.partRoomRefusal(manifest, paths, inbox: inbox, senderKey: senderKey, transfer: id) {
            return .failure(refusal)
        }
        var chosen: Set<Int>
        var decliner = Judgement.Cause.person
        switch policy {
        case .all, .known:
            chosen = Set(manifest.entries.indices)
        case .ask(let judge):
            let offer = IncomingOffer(
                senderName: senderName, senderKey: senderKey, senderLabel: trustedLabel(senderKey).map(Terminal.escape),
                code: VerificationCode.between(ownKey, senderKey), manifest: manifest)
            switch await Self.judge(offer, with: judge, reader: &reader, watchdog: watchdog) {
            case .success(var judged):
                judged.accepted = judged.accepted.filter { manifest.entries.indices.contains($0) }
                // (The sender shows it as "the receiver says: …", and its outcome by the cause.)
                if judged.accepted.isEmpty { return .failure(judged.refusal) }
                chosen = judged.accepted
                decliner = judged.cause
            case .failure(let error): return .failure(error)
            }
        }
        // What the inbox already holds is found by hashing files (earlier transfers' results and
        // part files, up to the whole offer's size): on a thread of its own, so that the shared
        // pool of async threads goes on serving other peers meanwhile.
        // Raced against the sender leaving, as the question is: a sender that hangs up stops
        // the hashing (between chunks), and what was hashed in full is remembered for its next
        // offer (see ``Inbox/partDigests``).
        let stop = StopFlag()
        let hashings = inbox.partDigests.hashings  // (for the debug log: the count is the daemon's)
        let held = await Self.race(
            { [inbox, chosen] in
                await withTaskCancellationHandler {
                    await onThreadOfItsOwn { () -> Decision in
                        Self.whatIsHeld(manifest, paths, chosen: chosen, inbox: inbox, senderKey: senderKey, stop: stop)
                    }
                } onCancel: {
                    stop.set()
                }
            }, reader: &reader, watchdog: watchdog)
        defer {
            let more = inbox.partDigests.hashings - hashings
            if more > 0 {
                logger.debug(
                    "hashed part files \(more) time(s) while answering an offer from the key \(senderKey.prefix(16))…")
            }
        }
        guard case .success(var decision) = held else {
            if case .failure(let error) = held { return .failure(error) }
            return .failure(.runtime(Self.leftBeforeTheAnswer))
        }
        do {
            try inbox.promise(decision.promised)
        } catch let error as PeerTransferError {
            return .failure(error)
        } catch {
            return .failure(.runtime("\(error)"))
        }
        let declined = manifest.entries.count - decision.answer.accepted.count
        if declined > 0 {
            let who = decliner == .hook ? "the receiver's accept hook" : "the person at the receiver"
            decision.answer.reason = "\(who) declined \(declined) of \(manifest.entries.count) entries"
            decision.answer.cause = Judgement(accepted: [], cause: decliner).refusal.wireCode
        }
        return .success(decision)
    }

    /// Puts `offer` to `judge` while watching the connection: a sender that leaves (or breaks
    /// the protocol by sending before the answer) withdraws its question, which is cancelled,
    /// instead of staying open for a person to answer in vain, with later offers waiting
    /// behind it. Only the judging is raced: nothing is promised in the inbox until it ends.
    private static func judge(
        _ offer: IncomingOffer, with judge: @escaping @Sendable (IncomingOffer) async -> Judgement,
        reader: inout FrameReader, watchdog: ProgressWatchdog
    ) async -> Result<Judgement, PeerTransferError> {
        await race({ await judge(offer) }, reader: &reader, watchdog: watchdog, asking: true)
    }

    /// What a raced task came to: the work's result, or what the connection said meanwhile
    /// (nil when the read was cancelled first), with the reader as the read left it.
    private enum Raced<T: Sendable>: Sendable {
        case worked(T)
        case read(PeerTransferError?, FrameReader)
    }

    /// Runs `work` while reading the connection through `reader` (the connection's own, so
    /// that nothing it already holds, such as a failure frame that came with the offer, is
    /// missed, and nothing is lost): the sender sends nothing until it has the answer but, when
    /// it stops, a failure frame saying why (cancelled, stopped); that, the end or an error
    /// ends the offer, and `work` is cancelled; anything else breaks the protocol. Its result
    /// otherwise. `asking`: the work is a question put to a person or a hook (a sender that
    /// stops withdraws it).
    private static func race<T: Sendable>(
        _ work: @escaping @Sendable () async -> T, reader: inout FrameReader,
        watchdog: ProgressWatchdog, asking: Bool = false
    ) async -> Result<T, PeerTransferError> {
        let start = reader
        let (outcome, after) = await withTaskGroup(of: Raced<T>.self) { group in
            group.addTask { .worked(await work()) }
            group.addTask {
                var reader = start
                do {
                    let frame = try await reader.next(admitting: { kind, length in
                        guard kind == .failure, length <= 4096 else {
                            throw PeerTransferError.protocolViolation(
                                "the sender sent data before its offer was answered")
                        }
                    })
                    guard let frame else { return .read(.runtime(Self.leftBeforeTheAnswer), reader) }
                    let stopped = StateMachine.senderStopped(
                        try frame.decode(Failure.self), beforeTheAnswer: true, whileAsking: asking)
                    return .read(stopped, reader)
                } catch is CancellationError {
                    return .read(nil, reader)  // (what it read stays in the reader)
                } catch let error as PeerTransferError {
                    return .read(error, reader)
                } catch {
                    // Cut by this receiver's own bound on the wait, or by the sender (gone
                    // without a goodbye: a TLS stream cut short, a reset).
                    if let expired = watchdog.expired {
                        return .read(.runtime("the offer was not answered in time (\(expired))"), reader)
                    }
                    return .read(.runtime(Self.leftBeforeTheAnswer), reader)
                }
            }
            var outcome: Result<T, PeerTransferError>?
            var after = start
            for await next in group {
                switch next {
                case .worked(let value):
                    if outcome == nil { outcome = .success(value) }
                case .read(let failure, let reader):
                    after = reader
                    // What the connection said decides, even as the work ends with it.
                    if let failure { outcome = .failure(failure) }
                }
                group.cancelAll()
            }
            return (outcome ?? .failure(.runtime(leftBeforeTheAnswer)), after)
        }
        reader = after
        return outcome
    }

    /// Why a transfer ended whose sender went away while its offer was being decided.
    static let leftBeforeTheAnswer = "the sender left before its offer was answered; its question was withdrawn"

    /// What the receiver answers to an offer, and what it found in the inbox for it.
    struct Decision {
        var answer: Answer
        /// The bytes of free space promised to the transfer.
        var promised: UInt64 = 0
        /// The files offered as `existing` (their room is promised only if their bytes come).
        var held: Set<Int> = []
        /// Small files for which the sender's own part file was found (see
        /// ``BufferedFile/replacesPart``).
        var partFound: Set<Int> = []
    }

    /// The answer's entries for the `chosen` ones (with what the inbox already holds of each),
    /// the bytes still to come, the files offered as `existing` and the small files whose part
    /// file was found. Blocking: it hashes files.
    private static func whatIsHeld(
        _ manifest: Manifest, _ paths: [RelativePath], chosen: Set<Int>,
        inbox: Inbox, senderKey: String, stop: StopFlag? = nil
    ) -> Decision {
        var accepted: [Answer.Entry] = []
        var needed: UInt64 = 0
        var held = Set<Int>()
        var partFound = Set<Int>()
        // Each folder is looked up once (the offer's entries come folder by folder).
        let folders = FolderCache()
        for index in chosen.sorted() {
            let entry = manifest.entries[index], path = paths[index]
            // Every entry takes room of its own (an inode, a folder's block), whatever its size:
            // counted so that many folders or empty files cannot fill the disk unpromised.
            needed += Self.roomPerEntry
            guard entry.kind == .file else {
                accepted.append(Answer.Entry(index: index))
                continue
            }
            if let existing = inbox.digest(ofFile: path, size: entry.size, deliveredBy: senderKey, cache: folders) {
                // Not promised now: a transfer sent again needs no room for it. Should the
                // sender's file differ after all, its room is promised when its bytes start.
                held.insert(index)
                accepted.append(Answer.Entry(index: index, existing: existing.hex))
                continue
            }
            if stop?.isSet == true { break }  // the sender left: no one will read the answer
            let part = inbox.resumablePart(
                path, chunkSize: manifest.chunkSize, for: senderKey, cache: folders, stop: stop)
            let have = part ?? []
            if part != nil, entry.size <= BufferedFile.sizeLimit { partFound.insert(index) }
            needed += entry.size - min(entry.size, UInt64(have.count) * UInt64(manifest.chunkSize))
            accepted.append(Answer.Entry(index: index, have: have.map(\.hex)))
        }
        return Decision(
            answer: Answer(accepted: accepted, reason: nil), promised: needed, held: held, partFound: partFound)
    }
}

extension Receiver {
    /// `text` with its quotes escaped (`\"`), once: a quote escaped already stays as it is.
    static func quotable(_ text: String) -> String {
        var out = ""
        var escaping = false
        for character in text {
            if character == "\"" && !escaping { out.append("\\") }
            escaping = character == "\\" && !escaping
            out.append(character)
        }
        return out
    }

    /// A sender as the log and the status name it: `"Laptop" [key 368bc9ff…]` for a key trusted
    /// under the label Laptop, `"vm" (claimed) [key 368bc9ff…]` for one that is not (the name is
    /// whatever the peer chose to say). `claimed` is already escaped for a terminal.
    static func shown(claimed: String, key: String, label: String?) -> String {
        let short = "[key \(key.prefix(8))…]"
        // Quotes in a claimed name are escaped: `Laptop" [key …]` cannot pass for a label.
        let quoted = "\"" + quotable(claimed) + "\""
        switch label {
        case KnownPeers.trustedByFingerprint?: return "\(quoted) (claimed, key trusted) \(short)"
        case let label? where Terminal.escape(label).lowercased() == claimed.lowercased() || claimed.isEmpty:
            return "\"\(Terminal.escape(label))\" \(short)"
        case let label?:
            // Trusted under one name, calling itself another now: both, the label first.
            return "\"\(Terminal.escape(label))\" (calling itself \(quoted)) \(short)"
        case nil: return "\(quoted) (claimed) \(short)"
        }
    }

    /// Why `sender` may not send `manifest` for want of room for its part files (files past
    /// one chunk arrive in part files), or nil. Never blocks on the disk: it reads the inbox's
    /// ledger of part files (see `PartLedger.swift`).
    static func partRoomRefusal(
        _ manifest: Manifest, _ paths: [RelativePath], inbox: Inbox, senderKey: String, transfer: Int
    ) -> PeerTransferError? {
        var bytes: UInt64 = 0
        var parts: [String: UInt64] = [:]
        for (entry, path) in zip(manifest.entries, paths)
        where entry.kind == .file && entry.size > BufferedFile.sizeLimit {
            bytes += entry.size
            parts[(path.parent + [TransferLimits.partName(of: path.name, from: senderKey)]).joined(separator: "/")] =
                entry.size
        }
        do {
            try inbox.checkPartRoom(for: senderKey, adding: bytes, replacing: parts, transfer: transfer)
            return nil
        } catch {
            return error as? PeerTransferError ?? .runtime("\(error)")
        }
    }

    /// The room promised for each accepted entry besides its bytes: one file-system block.
    static let roomPerEntry: UInt64 = 4_096

    /// `text` cut to at most `limit` bytes of UTF-8, at a character boundary (a name can be
    /// one "character" of millions of combining marks, so characters are not the measure).
    static func shortened(_ text: String, toBytes limit: Int) -> String {
        guard text.utf8.count > limit else { return text }
        var out = ""
        var used = 0
        for scalar in text.unicodeScalars {
            let size = String(scalar).utf8.count
            guard used + size <= limit else { break }
            out.unicodeScalars.append(scalar)
            used += size
        }
        return out
    }
}
