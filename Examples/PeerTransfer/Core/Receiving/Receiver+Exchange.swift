import Foundation
import Logging
import SalutStreams

extension Receiver {
    /// One connection's exchange while ``Receiver/run(_:senderKey:)`` drives it: the state the
    /// ``Receiver/StateMachine``'s actions act on (the files being written, the batch being
    /// published, the free space promised, how the sender is named) and one method per action.
    ///
    /// Owned by the one task that runs the connection and never handed to another, so its state
    /// needs no lock (it is not `Sendable`; the tasks it starts get copies of what they need).
    final class Exchange {
        private typealias Action = StateMachine.Action

        private let receiver: Receiver
        private let pair: BoundStreamPair
        /// Bounds every wait on the sender; its bound changes with what is awaited.
        private let watchdog: ProgressWatchdog
        private var machine: StateMachine
        private var reader: FrameReader
        /// The machine's actions not yet performed.
        private var pending: [Action] = []

        /// The files being written to their part files.
        private var sinks: [Int: FileSink] = [:]
        /// Small files received into memory, written when their batch is published.
        private var buffered: [Int: BufferedFile] = [:]
        /// Files whose part file could not be opened, and why: they fail alone.
        private var unreceivable: [Int: String] = [:]
        private var manifest: Manifest?
        /// The offered entries' paths, once validated.
        private var offeredPaths: [RelativePath] = []
        /// Files offered as already here: promised room only once their bytes start coming.
        private var heldFiles = Set<Int>()
        /// Small files whose sender's part file is in the inbox (see `BufferedFile`).
        private var partsFound = Set<Int>()
        /// Each folder of a tree is walked to once, not once per file.
        private let folders = FolderCache()

        private var senderKey = ""
        private var senderName = "?"
        /// How the log and the status name the sender: the label it is trusted under, or the
        /// name it claims, marked as claimed; with its key either way.
        private var senderShown = "?"

        /// The file bytes received.
        private var received: UInt64 = 0
        /// Once the offer is answered: since when, and the file bytes received or found already
        /// there since (see ``Receiver/pace``).
        private var answeredAt: ContinuousClock.Instant?
        private var progress: UInt64 = 0
        /// Free space promised to this transfer and not yet written; given back at the end.
        private var promised: UInt64 = 0

        /// Verified files wait here for one syncfs(2) per batch, then get their names on a
        /// thread of their own while this task receives on; one batch is published at a time
        /// (so results keep their order, and at most two batches hold descriptors).
        private var verified = VerifiedBatch()
        private var publishing: Task<[FileResult], any Error>?

        /// How the exchange ended: nil when it ended cleanly.
        private var outcome: PeerTransferError?
        /// Set when the connection ended before any offer for a reason not worth a log line
        /// of its own (counted instead).
        private var quietCause: String?
        /// Set when every transfer slot was taken.
        /// Why the sender was refused as busy, once it was.
        private var refusedBusy: ReceiverService.AdmissionStateMachine.Busy?

        private var inbox: Inbox { receiver.inbox }
        private var id: Int { receiver.id }
        private var logger: Logger { receiver.logger }
        private func report(_ event: ReceiveEvent) { receiver.events(event) }

        /// The sender's key as given (see ``Receiver/run(_:senderKey:)``), else nil.
        private let givenKey: String?

        init(_ receiver: Receiver, on pair: BoundStreamPair, senderKey: String?, watchdog: ProgressWatchdog) {
            self.receiver = receiver
            self.pair = pair
            givenKey = senderKey
            self.watchdog = watchdog
            machine = StateMachine(hello: receiver.hello, onlyKnownSenders: receiver.policy.takesOnlyKnownSenders)
            reader = FrameReader(pair.input)
        }

        // MARK: - The conversation

        /// Reads the sender's frames and performs the machine's actions until the exchange
        /// ends; never throws (how it ended is kept for ``report(partsRemoved:)``).
        func converse() async {
            do {
                try await pair.open()
                senderKey = givenKey ?? pair.peerTrust?.publicKeySHA256 ?? ""
                machine.identified(trusted: receiver.trustedLabel(senderKey) != nil)
                while true {
                    if pending.isEmpty {
                        guard try await readFrame() else { break }
                        continue
                    }
                    guard try await perform(pending.removeFirst()) else { break }
                }
                if outcome == nil && refusedBusy == nil { await closeCleanly() }
            } catch let error as PeerTransferError {
                await failed(error)
            } catch is CancellationError where manifest != nil {
                // This daemon is stopping (its task group cancels the transfers it runs).
                outcome = .interrupted(
                    "this receiver stopped during the transfer; what came is kept, and the same send resumes from it")
            } catch {
                ended(by: error)
            }
        }

        /// Reads the next frame and queues the machine's actions for it; false at the end of
        /// the connection (the outcome is then the machine's).
        private func readFrame() async throws -> Bool {
            let machine = self.machine
            guard let frame = try await reader.next(admitting: { try machine.admit($0, length: $1) }) else {
                outcome = self.machine.connectionEnded()
                return false
            }
            // Until the offer has come, the short bound still holds: a sender sends its hello
            // and its offer together, and a slot is not held by one that stops.
            watchdog.touch(
                bound: frame.kind == .manifest || manifest != nil
                    ? receiver.idleBound : min(receiver.helloBound, receiver.idleBound))
            if let answeredAt, receiver.pace.isTooSlow(bytes: progress, since: answeredAt, now: .now) {
                throw PeerTransferError.limit(receiver.pace.refusal)
            }
            if frame.kind == .hello, let peer = try? frame.decode(Hello.self) {
                // Escaped, quotes too: wherever it is shown in quotes, it cannot close them.
                senderName = Receiver.quotable(Terminal.escape(Receiver.shortened(peer.name, toBytes: 100)))
                senderShown = Receiver.shown(
                    claimed: senderName, key: senderKey, label: receiver.trustedLabel(senderKey))
            }
            if frame.kind == .done {
                // The results of every file go before the summary.
                pending += try await publishVerified()
                pending += try await collectPublished()
            }
            pending += self.machine.received(frame)
            return true
        }

        /// Performs one action; false when the exchange is over.
        private func perform(_ action: Action) async throws -> Bool {
            switch action {
            case .reply(let frame): try await reply(frame)
            case .decide(let offered, let paths): await answer(offered, paths)
            case .takeSlot:
                // Identified and admitted by the policy: only now does it take a slot.
                pending += machine.slot(refused: receiver.admit())
            case .turnAway:
                try await turnAway()
                return false
            case .refuseBusy(let why):
                await refuseBusy(why)
                return false
            case .makeDirectory(let index): try makeDirectory(index)
            case .openFile(let index, let offset): try openFile(index, keeping: offset)
            case .alreadyHeld(let index): progress += manifest!.entries[index].size
            case .write(let index, let offset, let data): try await write(data, at: offset, of: index)
            case .finishFile(let index, let offered): try await finishFile(index, offered: offered)
            case .fail(let error, let tellPeer):
                await fail(error, tellingThePeer: tellPeer)
                return false
            case .close: return false
            }
            return true
        }

        /// Sends `frame`, with the replies queued right after it: a batch's results go out in
        /// one write (one TLS record and one send for many files, not one each).
        private func reply(_ frame: Frame) async throws {
            var wire = frame.encoded
            while case .reply(let next)? = pending.first {
                pending.removeFirst()
                wire.append(next.encoded)
            }
            try await pair.output.write(wire)
        }

        /// Puts the offer to the policy and the inbox, and answers it.
        private func answer(_ offered: Manifest, _ paths: [RelativePath]) async {
            manifest = offered
            offeredPaths = paths
            report(
                .offered(
                    id: id, sender: senderShown, key: senderKey, files: offered.fileCount, bytes: offered.totalBytes
                ))
            logger.info(
                "offer from the key \(senderKey.prefix(16))… (calling itself \"\(senderName)\"): \(Wording.counted(offered.fileCount, "file")), \(Wording.counted(Int(clamping: offered.totalBytes), "byte"))"
            )
            // A person or a hook may take up to 120 s; the sender waits 150 s.
            watchdog.touch(bound: .seconds(150))
            let decision = await receiver.decide(
                offered, paths, senderName: senderName, senderKey: senderKey, reader: &reader, watchdog: watchdog)
            watchdog.touch(bound: receiver.idleBound)
            switch decision {
            case .success(let decided):
                report(.answered(id: id))
                promised = decided.promised
                heldFiles = decided.held
                partsFound = decided.partFound
                answeredAt = .now
                // The sender may first hash what this inbox already holds.
                watchdog.touch(
                    bound: receiver.idleBound
                        + TransferLimits.hashingAllowance(
                            for: decided.answer, chunkSize: offered.chunkSize, sizes: offered.entries.map(\.size)))
                pending += machine.decided(decided.answer)
            case .failure(let error) where ["cancelled", "stopped"].contains(error.outcome):
                pending += machine.senderLeft(error)  // (it waits for no answer)
            case .failure(let error):
                pending += machine.refused(error)
            }
        }

        /// Tells a sender whose key is not trusted that this receiver takes files only from
        /// known senders.
        private func turnAway() async throws {
            let refusal =
                "this receiver takes files only from known senders, and the key \(senderKey) is not trusted here"
            // The sender is not told where this receiver keeps its configuration.
            let failure = PeerTransferError.declinedByPolicy(
                "\(refusal) (on the receiver: peerxfer trust \(senderKey))")
            try await send(.message(.failure, Failure(code: failure.wireCode, message: failure.message)))
            outcome = .declinedByPolicy(
                "\(refusal); to take files from it: peerxfer trust \(senderKey)\(receiver.configOption)")
            report(.turnedAway(sender: senderShown, key: senderKey))
            // Counted, not logged each: keys are free to make, and the log must not become the
            // attack. The interval's line names the last one.
            quietCause = outcome?.message
        }

        /// Tells the sender the receiver is busy, and why: every transfer slot taken, or its
        /// address at its share of them.
        private func refuseBusy(_ why: ReceiverService.AdmissionStateMachine.Busy) async {
            refusedBusy = why
            let message =
                switch why {
                case .everySlotTaken(let limit):
                    "the receiver is busy with \(limit) transfers; try again later"
                case .sourceAtItsShare(let limit):
                    "the receiver already runs \(limit) transfers from your address (as it sees it: machines behind one router may share it), the most it takes from one address; try again when one of them ends"
                }
            let busy = Failure(code: "busy", message: message)
            try? await send(.message(.failure, busy))
            try? await pair.finishSending()
        }

        /// Makes the folder of entry `index`; one that cannot be made safely is left (the files
        /// below it fail alone when they open).
        private func makeDirectory(_ index: Int) throws {
            let path = try RelativePath(validating: manifest!.entries[index].path)
            do {
                if let fd = try inbox.openDirectory(path.components, create: true, cache: folders, madeFor: senderKey) {
                    close(fd)
                }
            } catch let error as PeerTransferError where error.isUnsafePath {
                // A symlink (or file) planted where the folder goes: nothing is made through it.
                logger.warning(
                    "folder \(Terminal.escape(path.description)) from \(senderShown) not made: \(error.message)")
            }
        }

        /// Opens where entry `index`'s bytes go: memory for a small file, its part file (its
        /// first `offset` bytes kept and hashed) otherwise.
        private func openFile(_ index: Int, keeping offset: UInt64) throws {
            let entry = manifest!.entries[index]
            if heldFiles.remove(index) != nil {
                // The sender's file differs from the one here after all: it comes whole.
                try inbox.promise(entry.size)
                promised += entry.size
            }
            let path = try RelativePath(validating: entry.path)
            do {
                if BufferedFile.isBuffered(size: entry.size, from: offset) {
                    // Written, synced and named with its batch, on the publishing thread.
                    let claim = try inbox.claim(path, for: senderKey)
                    buffered[index] = BufferedFile(
                        path: path, size: entry.size, replacesPart: partsFound.contains(index), claim: claim)
                    return
                }
                let file = try inbox.openPart(path, for: senderKey, cache: folders)
                let hasher = SHA256Hasher()
                do {
                    try file.keepPrefix(offset, feeding: hasher)
                } catch {
                    file.closeFiles()
                    throw error
                }
                sinks[index] = FileSink(file: file, continuing: hasher, size: entry.size)
            } catch let error as PeerTransferError where error.failsOneFileOnly {
                // This file cannot be received (something planted where its part file or a
                // folder of it goes, another transfer writing it): its bytes are read and
                // dropped, and it fails alone when it ends; the other files go on. Anything else
                // (no space, I/O errors) still ends the transfer.
                unreceivable[index] = error.message
            }
        }

        /// Writes bytes of entry `index` where they go.
        private func write(_ data: Data, at offset: UInt64, of index: Int) async throws {
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
                return  // a file that fails alone: its bytes are dropped, not counted
            }
            received += UInt64(data.count)
            progress += UInt64(data.count)
            report(.progress(id: id, bytes: received))
        }

        /// Every byte of entry `index` is in: verifies it against the SHA-256 the sender
        /// `offered` and queues it for its name, or fails it alone.
        private func finishFile(_ index: Int, offered: String) async throws {
            let entry = manifest!.entries[index]
            if let reason = unreceivable.removeValue(forKey: index) {
                pending += fileFailed(index, entry, reason)
            } else if let file = buffered.removeValue(forKey: index) {
                try await finishBuffered(file, index, entry, offered: offered)
            } else {
                try await finishPart(sinks.removeValue(forKey: index)!, index, entry, offered: offered)
            }
        }

        private func finishBuffered(
            _ file: BufferedFile, _ index: Int, _ entry: ManifestEntry, offered: String
        ) async throws {
            let digest = file.digest
            if offered == FileEnd.withdrawn {
                pending += fileFailed(index, entry, StateMachine.withdrawnReason)
            } else if digest.hex == offered {
                if !verified.hasRoom(forBuffered: file.size) { pending += try await publishVerified() }
                verified.append(index, buffered: file, mode: receiver.storedMode(entry.mode), modified: entry.modified)
                if verified.isFull { pending += try await publishVerified() }
            } else {
                pending += fileFailed(
                    index, entry,
                    "its SHA-256 is \(digest.hex), not the \(Terminal.escape(offered)) the sender read; nothing of it was kept"
                )
            }
        }

        private func finishPart(_ sink: FileSink, _ index: Int, _ entry: ManifestEntry, offered: String) async throws {
            let file = sink.file
            let digest: SHA256Digest
            // A large file's last flush may still run: a wait on this disk, not on the peer,
            // allowed for as the wait for a batch's sync is.
            watchdog.touch(bound: receiver.idleBound + .seconds(240))
            do {
                digest = try await sink.finish()
            } catch {
                file.closeFiles()
                throw error
            }
            watchdog.touch(bound: receiver.idleBound)
            if offered == FileEnd.withdrawn {
                file.discard()
                file.closeFiles()
                pending += fileFailed(index, entry, StateMachine.withdrawnReason)
            } else if digest.hex == offered {
                do {
                    try file.finishWriting(mode: receiver.storedMode(entry.mode), modified: entry.modified)
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
            if verified.isFull { pending += try await publishVerified() }
        }

        /// Reports entry `index` failed for `reason`; the machine's actions for it.
        private func fileFailed(_ index: Int, _ entry: ManifestEntry, _ reason: String) -> [Action] {
            report(.fileFailed(id: id, path: Terminal.escape(entry.path), reason: reason))
            logger.warning("\(Terminal.escape(entry.path)) from \(senderShown) failed: \(reason)")
            return machine.fileFinished(FileResult(index: index, verified: false, storedAs: nil, error: reason))
        }

        /// The exchange ends over `error`, told to the sender when `tellingThePeer`.
        private func fail(_ error: PeerTransferError, tellingThePeer: Bool) async {
            outcome = error
            // Before any offer: counted with the other connections that offered nothing, not a
            // log line each (a failure frame costs a peer nothing to send).
            if manifest == nil { quietCause = error.message }
            if tellingThePeer {
                try? await send(.message(.failure, Failure(code: error.wireCode, message: error.message)))
                try? await pair.finishSending()
            }
        }

        /// Ends this side after a complete exchange, then reads the sender's end briefly.
        private func closeCleanly() async {
            // The summary is out and every file has its verdict and its name: what is on this
            // disk is done. Ending our side can still fail (a sender that closed first makes it
            // ENOTCONN, a reset ECONNRESET); either way the sender learns its results from the
            // summary or, missing it, sends again and finds them complete.
            try? await pair.finishSending()
            // A clean close: the sender's end of the data too, briefly (it sent all it had).
            watchdog.touch(bound: .seconds(5))
            // (Its bytes no longer matter: the exchange is complete either way.)
            while case .some(.some) = try? await reader.next() {}
        }

        /// The exchange broke on `error` (a limit, a protocol violation, the disk): the sender
        /// is told.
        private func failed(_ error: PeerTransferError) async {
            outcome = error
            if manifest == nil { quietCause = error.message }
            try? await send(.message(.failure, Failure(code: error.wireCode, message: error.message)))
            try? await pair.finishSending()
        }

        /// The connection broke on `error` (a bound expired, the link was lost, the sender
        /// vanished): the outcome says so plainly.
        private func ended(by error: any Error) {
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

        private func send(_ frame: Frame) async throws {
            try await pair.output.write(frame.encoded)
        }

        // MARK: - Publishing verified files

        /// Waits for the batch being published; returns the machine's actions for its results.
        /// A wait on this disk, not on the peer (a slow disk may take a while to sync a batch of
        /// 256 MiB): the watchdog allows four more minutes for it, and starts again after it.
        private func collectPublished() async throws -> [Action] {
            guard let batch = publishing else { return [] }
            publishing = nil
            watchdog.touch(bound: receiver.idleBound + .seconds(240))
            defer { watchdog.touch(bound: receiver.idleBound) }
            return try await batch.value.flatMap { machine.fileFinished($0) }
        }

        /// Starts publishing the verified files (after the batch before them is done); returns
        /// the machine's actions for that earlier batch's results.
        private func publishVerified() async throws -> [Action] {
            guard !verified.isEmpty else { return [] }
            let actions = try await collectPublished()
            let batch = verified
            verified = VerifiedBatch()
            // The free space promised for the buffered files' bytes stays promised until they
            // are written (see `write`).
            let writing = min(promised, batch.bufferedBytes)
            promised -= writing
            let (inbox, id, events, senderKey, senderShown, logger) =
                (inbox, id, receiver.events, senderKey, senderShown, logger)
            publishing = Task {
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

        // MARK: - The end

        /// After the conversation: writes still queued end, files verified before a failure
        /// still get their names (their results cannot be sent, even when the batch before them
        /// failed), and the connection closes.
        func settle() async {
            // Writes still queued for files left unfinished end before their descriptors close.
            for sink in sinks.values { await sink.drain() }
            _ = try? await collectPublished()
            _ = try? await publishVerified()
            _ = try? await collectPublished()
            pair.input.close()
            pair.output.close()
        }

        /// A cancelled send leaves nothing behind: its sender's part files for what it offered
        /// go (files verified before the cancellation keep their names). Any other end keeps
        /// them, for the same send to resume from. Returns how many were removed.
        func removePartsIfCancelled() async -> Int {
            guard outcome?.outcome == "cancelled" else { return 0 }
            var removed = 0
            // The files being written now, here; the others' part files (an offer may name many,
            // deep in folders) on a thread of its own, each folder walked to once.
            var others: [RelativePath] = []
            for (index, entry) in (manifest?.entries ?? []).enumerated()
            where entry.kind == .file && offeredPaths.indices.contains(index) {
                if let sink = sinks.removeValue(forKey: index) {
                    sink.file.discard()
                    sink.file.closeFiles()
                    removed += 1
                } else {
                    others.append(offeredPaths[index])
                }
            }
            removed += await onThreadOfItsOwn { [inbox, senderKey, others] in
                let folders = FolderCache()
                return others.filter { inbox.discardPart($0, for: senderKey, cache: folders) }.count
            }
            return removed
        }

        /// Logs how the exchange ended, once, and reports it as ``ReceiveEvent/ended(id:verified:failed:error:)``
        /// (a refusal for want of a slot is not reported).
        func reportEnd(partsRemoved: Int) {
            let summary = machine.summaryCounts
            switch refusedBusy {
            case .everySlotTaken(let limit):
                logger.debug("refused a sender (\(senderShown)): all \(limit) transfer slots are busy")
                return
            case .sourceAtItsShare(let limit):
                logger.debug(
                    "refused a sender (\(senderShown)): its address already runs \(limit) transfers, the most one address may"
                )
                return
            case nil:
                break
            }
            if let quietCause, let endedBeforeOffer = receiver.endedBeforeOffer {
                logger.debug("a connection ended before any offer: \(quietCause)")
                endedBeforeOffer(quietCause)
                report(.ended(id: id, verified: 0, failed: 0, error: outcome))
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
                logger.info(
                    "transfer from \(senderShown) complete: \(summary.verified) verified, \(summary.failed) failed")
            }
            report(.ended(id: id, verified: summary.verified, failed: summary.failed, error: outcome))
        }

        /// Gives back what the exchange holds: the descriptors of files left open, the free
        /// space promised and not written, and what its offer reserved for part files (which
        /// becomes what is on disk: a cut 4 GiB file counts for the bytes it left).
        func release() {
            for sink in sinks.values { sink.file.closeFiles() }
            inbox.keptPromise(promised)
            inbox.settleParts(of: id)
        }
    }
}
