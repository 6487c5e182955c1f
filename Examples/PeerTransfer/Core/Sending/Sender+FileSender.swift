import Foundation
import Salut

extension Sender {
    /// Sends the accepted files one after another: each file's chunks, then its end (its
    /// digest, or its withdrawal when it changed while it was read). Used by the one task that
    /// sends, then released (it is not `Sendable`).
    ///
    /// A few chunk slots, each the frame's header with the file's bytes read straight behind
    /// it. The stream copies a frame out before `write` returns; the hashing queue reads a
    /// slot's bytes meanwhile, so a slot is reused only once its hash ran. Room behind the bytes
    /// for the file's end: a file sent whole in one chunk goes out with its `fileEnd` in one
    /// write (one send instead of two, for each small file).
    final class FileSender {
        private static let slots = 3
        private static let headerSize = 5 + ChunkFrame.headerSize
        private static let endSize = 5 + FileEnd.size

        private let plan: TransferPlan
        private let output: OutputStream
        private let stopper: SendStopper
        private let watchdog: ProgressWatchdog
        private let verdicts: Locked<VerdictStateMachine>
        private let events: @Sendable (SendEvent) -> Void
        /// The file bytes this run sends.
        private let total: UInt64
        private let slotSize: Int
        private let buffer: UnsafeMutableRawBufferPointer
        private let hashing = HashPipeline()
        private var slot = 0
        /// The file bytes sent so far.
        private(set) var sent: UInt64 = 0

        init(
            _ plan: TransferPlan, output: OutputStream, stopper: SendStopper, watchdog: ProgressWatchdog,
            verdicts: Locked<VerdictStateMachine>, total: UInt64, events: @escaping @Sendable (SendEvent) -> Void
        ) {
            (self.plan, self.output, self.stopper, self.watchdog) = (plan, output, stopper, watchdog)
            (self.verdicts, self.total, self.events) = (verdicts, total, events)
            slotSize = Self.headerSize + plan.manifest.chunkSize + Self.endSize
            buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: Self.slots * slotSize, alignment: 16)
        }

        private var released = false

        /// Waits for the hashing queue and frees the slots, when sending ended (once: later
        /// calls do nothing).
        func release() {
            guard !released else { return }
            released = true
            hashing.drain()
            buffer.deallocate()
        }

        /// Sends what `item` says of its file: its end alone when the receiver has it already
        /// or it must be withdrawn, else its bytes from the receiver's resume point.
        func send(_ item: Outgoing) async throws {
            if let digest = item.unchanged {
                try await sendEnd(of: item.index, digest: digest, withdrawn: false)
            } else if item.withdrawn {
                // It could not be read up to the receiver's part (it shrank, or went).
                try await sendEnd(of: item.index, digest: FileEnd.withdrawn, withdrawn: true)
            } else {
                try await sendBytes(of: item)
            }
        }

        private func sendEnd(of index: Int, digest: String, withdrawn: Bool) async throws {
            verdicts.withLock { $0.fileEnding(index, withdrawn: withdrawn) }
            try await stopper.write(FileEnd(index: UInt32(index), sha256: digest).frame.encoded, to: output)
        }

        /// Sends the file's chunks from `item.offset`, then its end.
        private func sendBytes(of item: Outgoing) async throws {
            let entry = plan.manifest.entries[item.index], source = plan.sources[item.index]!
            events(.fileStarted(index: item.index, path: entry.path, size: entry.size, offset: item.offset))
            let file = try SourceFile(source, listed: entry)
            defer { file.close() }
            var offset = item.offset
            while offset < entry.size && !file.changed {
                let length = Int(min(UInt64(plan.manifest.chunkSize), entry.size - offset))
                guard let endWentWithIt = try await sendChunk(of: item, from: file, at: offset, length: length) else {
                    break  // it shrank: withdrawn below
                }
                offset += UInt64(length)
                if endWentWithIt { return }
            }
            await hashing.settle(toAtMost: 0)
            try await stopper.write(fileEnd(of: item, file), to: output)
        }

        /// Sends `length` bytes of the file from `offset` in the next slot: true when the file's
        /// end went with them (the whole file in one chunk), nil when the file ended before
        /// them (it shrank).
        private func sendChunk(
            of item: Outgoing, from file: SourceFile, at offset: UInt64, length: Int
        ) async throws -> Bool? {
            await hashing.settle(toAtMost: Self.slots - 1)
            let frame = UnsafeMutableRawBufferPointer(rebasing: buffer[slot * slotSize..<(slot + 1) * slotSize])
            slot = (slot + 1) % Self.slots
            let headerSize = Self.headerSize
            let data = UnsafeMutableRawBufferPointer(rebasing: frame[headerSize..<headerSize + length])
            do {
                try Sender.readFully(file.fd, into: data, count: length, at: offset, path: file.path)
            } catch is FileShrank {
                file.changed = true
                return nil
            }
            let whole = offset == item.offset && offset + UInt64(length) == file.listed.size
            var wireSize = headerSize + length
            if whole {
                // The whole file in one chunk: hashed here, as a hop to the hashing queue and
                // back would cost more than it overlaps, and its end goes right behind it.
                item.hasher.update(UnsafeRawBufferPointer(data))
                let end = fileEnd(of: item, file)
                end.copyBytes(to: UnsafeMutableRawBufferPointer(rebasing: frame[wireSize..<wireSize + end.count]))
                wireSize += end.count
            } else {
                hashing.submit(UnsafeRawBufferPointer(data), to: item.hasher)
            }
            ChunkFrame.writeHeader(into: frame, index: UInt32(item.index), offset: offset, length: length)
            try await stopper.write(
                Data(bytesNoCopy: frame.baseAddress!, count: wireSize, deallocator: .none), to: output)
            watchdog.touch()
            sent += UInt64(length)
            events(.progress(sent: sent, total: total))
            return whole
        }

        /// The file's end, once every hash of it has run: its digest, or withdrawn when it
        /// changed while it was read (a torn copy, some old bytes and some new, is never
        /// delivered as something it never was).
        private func fileEnd(of item: Outgoing, _ file: SourceFile) -> Data {
            if Sender.identity(of: file.fd) != file.before { file.changed = true }
            verdicts.withLock { $0.fileEnding(item.index, withdrawn: file.changed) }
            let digest = file.changed ? FileEnd.withdrawn : item.hasher.finish().hex
            return FileEnd(index: UInt32(item.index), sha256: digest).frame.encoded
        }
    }

    /// A file being sent, open: it must still be the one the plan listed (size and time), and
    /// stay so while it is read; otherwise it is withdrawn.
    final class SourceFile {
        let path: String
        let fd: Int32
        /// The entry the plan listed for it.
        let listed: ManifestEntry
        /// What it was when opened.
        let before: Identity?
        /// Set once it is known not to be what the plan listed.
        var changed: Bool

        /// Opens `path`, listed in the plan as `listed`.
        /// - Throws: ``PeerTransferError/runtime(_:)`` when it cannot be opened.
        init(_ path: String, listed: ManifestEntry) throws {
            let fd = open(path, O_RDONLY | O_CLOEXEC)
            guard fd >= 0 else {
                throw PeerTransferError.runtime("cannot open \(path): \(String(cString: strerror(errno)))")
            }
            (self.path, self.fd, self.listed) = (path, fd, listed)
            before = Sender.identity(of: fd)
            changed = before.map { $0.size != listed.size || $0.modified != listed.modified } ?? true
        }

        /// Closes it.
        func close() { _ = Glibc.close(fd) }
    }
}
