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

    /// Called once the sender's hello passed the policy: true when it may transfer (it took
    /// one of the daemon's transfer slots), false when every slot is taken (it is told the
    /// receiver is busy). Until then the connection holds no slot (see ``Admission``).
    var admit: @Sendable () -> Bool = { true }
    /// When set, a connection that ends before any offer (a scan, a silent or slow client, a
    /// failed handshake) is reported here, to be counted, instead of on a log line of its own.
    var endedBeforeOffer: (@Sendable (String) -> Void)?

    /// Runs the exchange to its end; never throws (failures are sent to the peer, logged and
    /// reported as events).
    func run(_ pair: BoundStreamPair) async {
        // Until the hello, the shorter bound: a connection that says nothing holds nothing long.
        let watchdog = ProgressWatchdog(bound: min(helloBound, idleBound))
        let watching = Task { await watchdog.watch(pair, what: "from the sender") }
        defer { watching.cancel() }
        var machine = Receiver.StateMachine(hello: hello, onlyKnownSenders: policy.takesOnlyKnownSenders)
        var sinks: [Int: FileSink] = [:]
        // Small files received into memory, written when their batch is published.
        var buffered: [Int: BufferedFile] = [:]
        // Files whose part file could not be opened, and why: they fail alone.
        var unreceivable: [Int: String] = [:]
        var manifest: Manifest?
        // The offered entries' paths, once validated.
        var offeredPaths: [RelativePath] = []
        var senderKey = ""
        var senderName = "?"
        // How the log and the status name the sender: the label it is trusted under, or the
        // name it claims, marked as claimed; with its key either way.
        var senderShown = "?"
        // What this sender's offer reserved for part files becomes what is on disk once the
        // transfer ends (a cut 4 GiB file counts for the bytes it left, not for 4 GiB).
        defer { inbox.settleParts(of: id) }
        var received: UInt64 = 0
        // Once the offer is answered: since when, and the file bytes received or found already
        // there since (see `pace`).
        var answeredAt: ContinuousClock.Instant?
        var progress: UInt64 = 0
        // Files offered as already here: promised room only once their bytes start coming.
        var heldFiles = Set<Int>()
        // Small files whose sender's part file is in the inbox (see `BufferedFile`).
        var partsFound = Set<Int>()
        // Free space promised to this transfer and not yet written; given back at the end.
        var promised: UInt64 = 0
        defer { inbox.keptPromise(promised) }
        var outcome: PeerTransferError?
        // Set when the connection ended before any offer for a reason not worth a log line
        // of its own (counted instead), or when every transfer slot was taken.
        var quietCause: String?
        var refusedBusy = false
        // Verified files wait here for one syncfs(2) per batch, then get their names on a
        // thread of their own while this task receives on; one batch is published at a time
        // (so results keep their order, and at most two batches hold descriptors).
        var verified = VerifiedBatch()
        var publishing: Task<[FileResult], any Error>?
        // Each folder of a tree is walked to once, not once per file.
        let folders = FolderCache()
        defer {
            for sink in sinks.values { sink.file.closeFiles() }
        }

        /// Waits for the batch being published; returns the machine's actions for its results.
        /// A wait on this disk, not on the peer (a slow disk may take a while to sync a batch of
        /// 256 MiB): the watchdog allows four more minutes for it, and starts again after it.
        func collectPublished() async throws -> [Receiver.StateMachine.Action] {
            guard let batch = publishing else { return [] }
            publishing = nil
            watchdog.touch(bound: idleBound + .seconds(240))
            defer { watchdog.touch(bound: idleBound) }
            return try await batch.value.flatMap { machine.fileFinished($0) }
        }

        /// Starts publishing the verified files (after the batch before them is done); returns
        /// the machine's actions for that earlier batch's results.
        func publishVerified() async throws -> [Receiver.StateMachine.Action] {
            guard !verified.isEmpty else { return [] }
            let actions = try await collectPublished()
            let batch = verified
            verified = VerifiedBatch()
            // The free space promised for the buffered files' bytes stays promised until they
            // are written (see `.write`).
            let writing = min(promised, batch.bufferedBytes)
            promised -= writing
            publishing = Task { [inbox, id, events, senderKey, senderShown, logger] in
                defer { inbox.keptPromise(writing) }
                return try await onThreadOfItsOwn {
                    Result {
                        try batch.publish(in: inbox, for: senderKey) { result, path in
                            if let storedAs = result.storedAs, result.verified {
                                events(.fileVerified(id: id, storedAs: storedAs))
                            } else {
                                let reason = result.error ?? "not named"
                                events(.fileFailed(id: id, path: Terminal.escape(path.description), reason: reason))
                                logger.warning(
                                    "\(Terminal.escape(path.description)) from \(senderShown) failed: \(reason)")
                            }
                        } movedAside: { parent, name, aside in
                            let folder = parent.isEmpty ? "" : parent.joined(separator: "/") + "/"
                            logger.notice(
                                "\"\(Terminal.escape(folder + name))\", sent earlier by an untrusted sender, is now \"\(Terminal.escape(folder + aside))\": its name goes to the file of the trusted sender \(senderShown)"
                            )
                        }
                    }
                }.get()
            }
            return actions
        }

        func fileFailed(_ index: Int, _ entry: ManifestEntry, _ reason: String) -> [Receiver.StateMachine.Action] {
            events(.fileFailed(id: id, path: Terminal.escape(entry.path), reason: reason))
            logger.warning("\(Terminal.escape(entry.path)) from \(senderShown) failed: \(reason)")
            return machine.fileFinished(FileResult(index: index, verified: false, storedAs: nil, error: reason))
        }
        var reader = FrameReader(pair.input)
        do {
            try await pair.open()
            senderKey = pair.peerTrust?.publicKeySHA256 ?? ""
            machine.identified(trusted: trustedLabel(senderKey) != nil)
            var pending: [Receiver.StateMachine.Action] = []
            loop: while true {
                if pending.isEmpty {
                    guard
                        let frame = try await reader.next(admitting: { kind, length in
                            try machine.admit(kind, length: length)
                        })
                    else {
                        outcome = machine.connectionEnded()
                        break loop
                    }
                    // Until the offer has come, the short bound still holds: a sender sends its
                    // hello and its offer together, and a slot is not held by one that stops.
                    watchdog.touch(
                        bound: frame.kind == .manifest || manifest != nil ? idleBound : min(helloBound, idleBound))
                    if let answeredAt, pace.isTooSlow(bytes: progress, since: answeredAt, now: .now) {
                        throw PeerTransferError.limit(pace.refusal)
                    }
                    if frame.kind == .hello, let peer = try? frame.decode(Hello.self) {
                        // Escaped, quotes too: wherever it is shown in quotes, it cannot close them.
                        senderName = Self.quotable(Terminal.escape(Self.shortened(peer.name, toBytes: 100)))
                        senderShown = Self.shown(claimed: senderName, key: senderKey, label: trustedLabel(senderKey))
                    }
                    if frame.kind == .done {
                        // The results of every file go before the summary.
                        pending = try await publishVerified()
                        pending += try await collectPublished()
                    }
                    pending += machine.received(frame)
                    continue
                }
                let action = pending.removeFirst()
                switch action {
                case .reply(let frame):
                    // Replies in a row (a batch's results) go out in one write: one TLS
                    // record and one send for many files, not one each.
                    var wire = frame.encoded
                    while case .reply(let next)? = pending.first {
                        pending.removeFirst()
                        wire.append(next.encoded)
                    }
                    try await pair.output.write(wire)
                case .decide(let offered, let paths):
                    manifest = offered
                    offeredPaths = paths
                    events(
                        .offered(
                            id: id, sender: senderShown, key: senderKey, files: offered.fileCount,
                            bytes: offered.totalBytes))
                    logger.info(
                        "offer from the key \(senderKey.prefix(16))… (calling itself \"\(senderName)\"): \(Wording.counted(offered.fileCount, "file")), \(Wording.counted(Int(clamping: offered.totalBytes), "byte"))"
                    )
                    // A person or a hook may take up to 120 s; the sender waits 150 s.
                    watchdog.touch(bound: .seconds(150))
                    let decision = await decide(
                        offered, paths, senderName: senderName, senderKey: senderKey, reader: &reader,
                        watchdog: watchdog)
                    watchdog.touch(bound: idleBound)
                    switch decision {
                    case .success(let decided):
                        events(.answered(id: id))
                        promised = decided.promised
                        heldFiles = decided.held
                        partsFound = decided.partFound
                        answeredAt = .now
                        // The sender may first hash what this inbox already holds.
                        watchdog.touch(
                            bound: idleBound
                                + TransferLimits.hashingAllowance(
                                    for: decided.answer, chunkSize: offered.chunkSize,
                                    sizes: offered.entries.map(\.size)))
                        pending += machine.decided(decided.answer)
                    case .failure(let error) where ["cancelled", "stopped"].contains(error.outcome):
                        pending += machine.senderLeft(error)  // (it waits for no answer)
                    case .failure(let error):
                        pending += machine.refused(error)
                    }
                case .takeSlot:
                    // Identified and admitted by the policy: only now does it take a slot.
                    pending += machine.slot(taken: admit())
                case .turnAway:
                    let refusal =
                        "this receiver takes files only from known senders, and the key \(senderKey) is not trusted here"
                    // The sender is not told where this receiver keeps its configuration.
                    let failure = PeerTransferError.declinedByPolicy(
                        "\(refusal) (on the receiver: peerxfer trust \(senderKey))")
                    try await send(
                        .message(.failure, Failure(code: failure.wireCode, message: failure.message)), on: pair)
                    outcome = .declinedByPolicy(
                        "\(refusal); to take files from it: peerxfer trust \(senderKey)\(configOption)")
                    events(.turnedAway(sender: senderShown, key: senderKey))
                    // Counted, not logged each: keys are free to make, and the log must not
                    // become the attack. The interval's line names the last one.
                    quietCause = outcome?.message
                    break loop
                case .refuseBusy:
                    refusedBusy = true
                    let busy = Failure(
                        code: "busy",
                        message:
                            "the receiver is busy with \(TransferLimits.maximumConcurrentTransfers) transfers; try again later"
                    )
                    try? await send(.message(.failure, busy), on: pair)
                    try? await pair.finishSending()
                    break loop
                case .makeDirectory(let index):
                    let path = try RelativePath(validating: manifest!.entries[index].path)
                    do {
                        if let fd = try inbox.openDirectory(
                            path.components, create: true, cache: folders, madeFor: senderKey)
                        {
                            close(fd)
                        }
                    } catch let error as PeerTransferError where error.isUnsafePath {
                        // A symlink (or file) planted where the folder goes: nothing is made
                        // through it, and the files below it fail alone when they open.
                        logger.warning(
                            "folder \(Terminal.escape(path.description)) from \(senderShown) not made: \(error.message)"
                        )
                    }
                case .openFile(let index, let offset):
                    if heldFiles.remove(index) != nil {
                        // The sender's file differs from the one here after all: it comes whole.
                        let size = manifest!.entries[index].size
                        try inbox.promise(size)
                        promised += size
                    }
                    let path = try RelativePath(validating: manifest!.entries[index].path)
                    let size = manifest!.entries[index].size
                    do {
                        if BufferedFile.isBuffered(size: size, from: offset) {
                            // Written, synced and named with its batch, on the publishing thread.
                            let claim = try inbox.claim(path, for: senderKey)
                            buffered[index] = BufferedFile(
                                path: path, size: size, replacesPart: partsFound.contains(index), claim: claim)
                            break
                        }
                        let file = try inbox.openPart(path, for: senderKey, cache: folders)
                        let hasher = SHA256Hasher()
                        do {
                            try file.keepPrefix(offset, feeding: hasher)
                        } catch {
                            file.closeFiles()
                            throw error
                        }
                        sinks[index] = FileSink(file: file, continuing: hasher, size: size)
                    } catch let error as PeerTransferError where error.failsOneFileOnly {
                        // This file cannot be received (something planted where its part file
                        // or a folder of it goes, another transfer writing it): its bytes are
                        // read and dropped, and it fails alone when it ends; the other files go
                        // on. Anything else (no space, I/O errors) still ends the transfer.
                        unreceivable[index] = error.message
                    }
                case .alreadyHeld(let index):
                    progress += manifest!.entries[index].size
                case .write(let index, let offset, let data):
                    if buffered[index] != nil {
                        // Its room stays promised until its batch writes it.
                        buffered[index]!.append(data, at: offset)
                    } else if let sink = sinks[index] {
                        // Written and hashed on the sink's queues while this task reads on.
                        try await sink.append(data, at: offset)
                        let kept = min(promised, UInt64(data.count))
                        inbox.keptPromise(kept)
                        promised -= kept
                    } else {
                        break  // a file that fails alone
                    }
                    received += UInt64(data.count)
                    progress += UInt64(data.count)
                    events(.progress(id: id, bytes: received))
                case .finishFile(let index, let offered):
                    let entry = manifest!.entries[index]
                    if let reason = unreceivable.removeValue(forKey: index) {
                        pending += fileFailed(index, entry, reason)
                        break
                    }
                    if let file = buffered.removeValue(forKey: index) {
                        let digest = file.digest
                        if offered == FileEnd.withdrawn {
                            pending += fileFailed(index, entry, Receiver.StateMachine.withdrawnReason)
                        } else if digest.hex == offered {
                            if !verified.hasRoom(forBuffered: file.size) { pending += try await publishVerified() }
                            verified.append(
                                index, buffered: file, mode: storedMode(entry.mode), modified: entry.modified)
                            if verified.isFull { pending += try await publishVerified() }
                        } else {
                            pending += fileFailed(
                                index, entry,
                                "its SHA-256 is \(digest.hex), not the \(Terminal.escape(offered)) the sender read; nothing of it was kept"
                            )
                        }
                        break
                    }
                    let sink = sinks.removeValue(forKey: index)!
                    let file = sink.file
                    let digest: SHA256Digest
                    // A large file's last flush may still run: a wait on this disk, not on the
                    // peer, allowed for as the wait for a batch's sync is.
                    watchdog.touch(bound: idleBound + .seconds(240))
                    do {
                        digest = try await sink.finish()
                    } catch {
                        file.closeFiles()
                        throw error
                    }
                    watchdog.touch(bound: idleBound)
                    if offered == FileEnd.withdrawn {
                        file.discard()
                        file.closeFiles()
                        pending += fileFailed(index, entry, Receiver.StateMachine.withdrawnReason)
                    } else if digest.hex == offered {
                        do {
                            try file.finishWriting(mode: storedMode(entry.mode), modified: entry.modified)
                            verified.append(index, file, size: entry.size)
                        } catch let error as PeerTransferError {
                            file.closeFiles()
                            pending += fileFailed(index, entry, error.message)
                        }
                    } else {
                        file.discard()
                        file.closeFiles()
                        pending += fileFailed(
                            index, entry,
                            "its SHA-256 is \(digest.hex), not the \(Terminal.escape(offered)) the sender read; the part file was removed"
                        )
                    }
                    if verified.isFull {
                        pending += try await publishVerified()
                    }
                case .fail(let error, let tellPeer):
                    outcome = error
                    // Before any offer: counted with the other connections that offered nothing,
                    // not a log line each (a failure frame costs a peer nothing to send).
                    if manifest == nil { quietCause = error.message }
                    if tellPeer {
                        try? await send(
                            .message(.failure, Failure(code: error.wireCode, message: error.message)), on: pair)
                        try? await pair.finishSending()
                    }
                    break loop
                case .close:
                    break loop
                }
            }
            if outcome == nil && !refusedBusy {
                // The summary is out and every file has its verdict and its name: what is on
                // this disk is done. Ending our side can still fail (a sender that closed first
                // makes it ENOTCONN, a reset ECONNRESET); either way the sender learns its
                // results from the summary or, missing it, sends again and finds them complete.
                try? await pair.finishSending()
                // A clean close: the sender's end of the data too, briefly (it sent all it had).
                watchdog.touch(bound: .seconds(5))
                // (Its bytes no longer matter: the exchange is complete either way.)
                while case .some(.some) = try? await reader.next() {}
            }
        } catch let error as PeerTransferError {
            outcome = error
            if manifest == nil { quietCause = error.message }
            try? await send(.message(.failure, Failure(code: error.wireCode, message: error.message)), on: pair)
            try? await pair.finishSending()
        } catch is CancellationError where manifest != nil {
            // This daemon is stopping (its task group cancels the transfers it runs).
            outcome = .interrupted(
                "this receiver stopped during the transfer; what came is kept, and the same send resumes from it")
        } catch {
            let cause = watchdog.expired ?? "\(error)"
            // For a person: a sender whose program ended without a word (killed, a machine that
            // slept) or a lost link, said plainly; the TLS detail goes to the debug log only.
            let plainly =
                watchdog.expired.map { "the sender went silent (\($0))" }
                ?? "the sender stopped without a word, or the link to it was lost"
            if manifest != nil { logger.debug("the connection from \(senderShown) ended: \(cause)") }
            if manifest == nil {
                // A scan, a client of another protocol, a failed handshake: no transfer began.
                outcome = .runtime("the connection ended before any offer: \(cause)")
                quietCause = cause
            } else if answeredAt == nil {
                outcome = .runtime("\(plainly) before the offer was accepted")
            } else if received == 0 {
                outcome = .interrupted("\(plainly), after the offer was accepted and before any file's bytes came")
            } else {
                outcome = .interrupted(plainly)
            }
        }
        // Writes still queued for files left unfinished end before their descriptors close.
        for sink in sinks.values { await sink.drain() }
        // Files verified before a failure still get their names (their results cannot be sent),
        // even when the batch before them failed.
        _ = try? await collectPublished()
        _ = try? await publishVerified()
        _ = try? await collectPublished()
        pair.input.close()
        pair.output.close()
        // A cancelled send leaves nothing behind: its sender's part files for what it offered
        // go (files verified before the cancellation keep their names). Any other end keeps
        // them, for the same send to resume from.
        var partsRemoved = 0
        if outcome?.outcome == "cancelled" {
            // The files being written now, here; the others' part files (an offer may name many,
            // deep in folders) on a thread of its own, each folder walked to once.
            var others: [RelativePath] = []
            for (index, entry) in (manifest?.entries ?? []).enumerated()
            where entry.kind == .file && offeredPaths.indices.contains(index) {
                if let sink = sinks.removeValue(forKey: index) {
                    sink.file.discard()
                    sink.file.closeFiles()
                    partsRemoved += 1
                } else {
                    others.append(offeredPaths[index])
                }
            }
            partsRemoved += await onThreadOfItsOwn { [inbox, senderKey, others] in
                let folders = FolderCache()
                return others.filter { inbox.discardPart($0, for: senderKey, cache: folders) }.count
            }
        }
        let summary = machine.summaryCounts
        if refusedBusy {
            logger.debug("refused a sender (\(senderShown)): every transfer slot is busy")
            return
        }
        if let quietCause, let endedBeforeOffer {
            logger.debug("a connection ended before any offer: \(quietCause)")
            endedBeforeOffer(quietCause)
            events(.ended(id: id, verified: 0, failed: 0, error: outcome))
            return
        }
        if let outcome, manifest != nil, outcome.outcome == "cancelled" {
            logger.notice(
                "transfer from \(senderShown) cancelled by the sender after \(Wording.bytes(received)): \(Wording.counted(partsRemoved, "part file")) removed"
            )
        } else if let outcome, manifest != nil, outcome.outcome == "stopped" {
            let kept =
                received == 0 || outcome.message.contains("what came is kept")
                ? "" : "; what came is kept in part files, and the same send resumes from them"
            logger.notice(
                "transfer from \(senderShown) stopped after \(Wording.bytes(received)): \(outcome.message)\(kept)")
        } else if let outcome {
            logger.warning("transfer from \(senderShown) ended: \(outcome.message)")
        } else {
            logger.info("transfer from \(senderShown) complete: \(summary.verified) verified, \(summary.failed) failed")
        }
        events(.ended(id: id, verified: summary.verified, failed: summary.failed, error: outcome))
    }

    private func send(_ frame: Frame, on pair: BoundStreamPair) async throws {
        try await pair.output.write(frame.encoded)
    }

    /// The policy's answer, with what the inbox already has, and the bytes of free space
    /// promised to the transfer (see ``Inbox/promise(_:)``).
    private func decide(
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
