import Foundation
import SalutStreams

/// One message on a peerxfer connection: a kind byte, a 4-byte big-endian payload length, and
/// the payload (JSON for control messages, a binary header and file bytes for chunks).
struct Frame: Sendable, Equatable {
    enum Kind: UInt8, Sendable {
        case hello = 1, manifest = 2, answer = 3, chunk = 4, fileResult = 5, done = 6, summary = 7, fileEnd = 8
        case failure = 0x7f
    }

    var kind: Kind
    var payload: Data

    /// The bytes on the wire.
    var encoded: Data {
        var data = Data(capacity: 5 + payload.count)
        data.append(kind.rawValue)
        withUnsafeBytes(of: UInt32(payload.count).bigEndian) { data.append(contentsOf: $0) }
        data.append(payload)
        return data
    }

    /// A control message as JSON.
    static func message<M: Encodable>(_ kind: Kind, _ message: M) -> Frame {
        if let written = message as? any HandWrittenJSON {
            return Frame(kind: kind, payload: Data(written.json.utf8))
        }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        // Our own message types always encode (no non-finite numbers, no custom encoders).
        let payload = (try? encoder.encode(message)) ?? Data("{}".utf8)
        return Frame(kind: kind, payload: payload)
    }

    /// The payload decoded as `type`.
    /// - Throws: ``PeerTransferError/protocolViolation(_:)`` naming the message when it is not
    ///   valid JSON of that shape.
    func decode<M: Decodable>(_ type: M.Type) throws -> M {
        if let quick = type as? any HandReadJSON.Type, let message = quick.quickly(from: payload) as? M {
            return message
        }
        do {
            return try JSONDecoder().decode(type, from: payload)
        } catch {
            throw PeerTransferError.protocolViolation("a malformed \(kind) message (\(payload.count) bytes)")
        }
    }
}

/// Splits received bytes into frames, refusing unknown kinds and oversized payloads before
/// buffering them. Feed bytes, take frames; no I/O. A chunk's payload goes into memory of its
/// own (see ``ChunkMemory``) as soon as its header is in; the rest of it can then be read
/// straight into that memory (``directSpace``), without passing through the buffer. While a
/// chunk is arriving the decoder shares that memory with its copies: one owner uses it (the
/// reader of one connection); it is copied only between frames.
struct FrameDecoder {
    private var buffer = Data()
    private var start = 0
    /// The chunk whose payload is arriving, and how many of its bytes are in.
    private var partial: (kind: Frame.Kind, memory: ChunkMemory, filled: Int)?
    /// Bytes lent by ``lend(_:)``, read in place; none are left once ``next(admitting:)``
    /// returns nil (what it could not take then is copied into `buffer`).
    private var lent: UnsafeRawBufferPointer?

    /// Bytes received and not yet taken as frames (a chunk arriving counts its header too).
    var bufferedCount: Int {
        buffer.count - start + (lent?.count ?? 0) + (partial.map { 5 + $0.filled } ?? 0)
    }

    /// Where the rest of the current chunk's payload goes, when one is arriving: a reader may
    /// fill it directly and then call ``directlyFilled(_:)``.
    var directSpace: UnsafeMutableRawBufferPointer? {
        guard let partial else { return nil }
        return UnsafeMutableRawBufferPointer(rebasing: partial.memory.payload[partial.filled...])
    }

    /// `count` bytes were written into ``directSpace``.
    mutating func directlyFilled(_ count: Int) {
        partial!.filled += count
    }

    /// Adds received bytes.
    mutating func append(_ bytes: Data) {
        bytes.withUnsafeBytes { append($0) }
    }

    /// Adds received bytes from a buffer the caller keeps.
    mutating func append(_ bytes: UnsafeRawBufferPointer) {
        guard !bytes.isEmpty else { return }
        var bytes = bytes
        if let space = directSpace {
            let taken = min(space.count, bytes.count)
            space.baseAddress!.copyMemory(from: bytes.baseAddress!, byteCount: taken)
            partial!.filled += taken
            bytes = UnsafeRawBufferPointer(rebasing: bytes[taken...])
            if bytes.isEmpty { return }
        }
        if start > 0 && start == buffer.count {
            buffer.removeAll(keepingCapacity: true)
            start = 0
        } else if start > (1 << 20) && start * 2 > buffer.count {
            buffer.removeSubrange(buffer.startIndex..<buffer.startIndex + start)
            start = 0
        }
        buffer.append(contentsOf: bytes)
    }

    /// Adds received bytes without copying them: frames are taken from them in place (a
    /// chunk's payload copied once, into its own memory) until ``next(admitting:)`` returns
    /// nil, which copies what is left of them, an incomplete frame, into the decoder. The
    /// caller keeps `bytes` unchanged until then. Saves a copy of each read into the decoder's
    /// buffer, which for bulk data is a quarter of the payload (what a read takes after each
    /// chunk) and, for many small files, nearly all of it.
    mutating func lend(_ bytes: UnsafeRawBufferPointer) {
        guard !bytes.isEmpty else { return }
        precondition(lent == nil, "bytes lent before the last ones were taken")
        if directSpace != nil || start < buffer.count {
            append(bytes)  // (behind bytes already kept, or into a chunk's own memory)
        } else {
            lent = bytes
        }
    }

    /// The next complete frame, or nil when more bytes are needed. `admit` judges each frame
    /// from its header, before its payload is kept, and throws to refuse it.
    /// - Throws: ``PeerTransferError/protocolViolation(_:)`` for an unknown kind,
    ///   ``PeerTransferError/limit(_:)`` for a payload over the kind's limit; what `admit` throws.
    mutating func next(admitting admit: (Frame.Kind, Int) throws -> Void = { _, _ in }) throws -> Frame? {
        if let current = partial {
            guard current.filled == current.memory.payload.count else { return nil }
            partial = nil
            return Frame(kind: current.kind, payload: current.memory.handedOver())
        }
        if let bytes = lent {
            // (A frame refused here stays first, as in the buffer: asked again, it is refused again.)
            guard let (frame, used) = try take(from: bytes, admitting: admit) else {
                lent = nil
                append(bytes)  // an incomplete frame: kept until the rest comes
                return nil
            }
            lent = used < bytes.count ? UnsafeRawBufferPointer(rebasing: bytes[used...]) : nil
            return try frame ?? next(admitting: admit)
        }
        let kept = buffer
        guard
            let (frame, used) = try kept.withUnsafeBytes({ bytes in
                try take(from: UnsafeRawBufferPointer(rebasing: bytes[start...]), admitting: admit)
            })
        else { return nil }
        start += used
        return try frame ?? next(admitting: admit)
    }

    /// Takes the frame at the start of `bytes`: the frame and the bytes it used; nil as the
    /// frame when a chunk began (its payload, as much as is here, went into its own memory:
    /// ``partial``); nil when the frame is not complete yet.
    private mutating func take(
        from bytes: UnsafeRawBufferPointer, admitting admit: (Frame.Kind, Int) throws -> Void
    ) throws -> (frame: Frame?, used: Int)? {
        guard bytes.count >= 5 else { return nil }
        guard let kind = Frame.Kind(rawValue: bytes[0]) else {
            throw PeerTransferError.protocolViolation("unknown message kind \(bytes[0])")
        }
        let length = bytes[1..<5].reduce(0) { $0 << 8 | Int($1) }
        let limit =
            switch kind {
            case .chunk: TransferLimits.maximumChunkFrame
            case .fileEnd: FileEnd.size
            default: TransferLimits.maximumControlMessage
            }
        guard length <= limit else {
            throw PeerTransferError.limit("a \(kind) message of \(length) bytes (the limit is \(limit))")
        }
        try admit(kind, length)
        if kind == .chunk && length > ChunkFrame.headerSize {
            // Its own memory now; what has arrived of it moves there, the rest may go there
            // directly.
            let memory = ChunkMemory(payloadSize: length)
            let have = min(bytes.count - 5, length)
            memory.payload.baseAddress!.copyMemory(from: bytes.baseAddress! + 5, byteCount: have)
            partial = (kind, memory, have)
            return (nil, 5 + have)
        }
        guard bytes.count >= 5 + length else { return nil }
        return (Frame(kind: kind, payload: Data(bytes[5..<5 + length])), 5 + length)
    }
}

/// Memory for one chunk frame's payload, placed so that the file bytes after its 12-byte
/// header start on a ``ChunkFrame/dataAlignment`` boundary (a page), and taken
/// from a small pool: a receiver goes through a megabyte of it per chunk, and fresh memory
/// each time would cost a page fault and a zeroed page every 4 KiB.
///
/// `@unchecked Sendable`: the memory is written by the one decoder that owns it, then handed
/// over, once, to a `Data` that only reads it and gives it back to the pool when released.
final class ChunkMemory: @unchecked Sendable {
    /// Bytes before the payload, so that its data starts on the boundary.
    private static let lead = ChunkFrame.dataAlignment - ChunkFrame.headerSize
    private static let capacity = lead + TransferLimits.maximumChunkFrame
    /// Blocks kept for reuse (their addresses), at most ``poolLimit``.
    private static let pool = Locked<[Int]>([])
    private static let poolLimit = 48

    /// Where the payload goes.
    let payload: UnsafeMutableRawBufferPointer
    private var block: UnsafeMutableRawPointer?

    init(payloadSize: Int) {
        precondition(payloadSize <= TransferLimits.maximumChunkFrame)
        let block =
            Self.pool.withLock { $0.popLast() }.flatMap(UnsafeMutableRawPointer.init(bitPattern:)) ?? Self.allocate()
        self.block = block
        payload = UnsafeMutableRawBufferPointer(start: block + Self.lead, count: payloadSize)
    }

    deinit {
        if let block { Self.giveBack(block) }
    }

    /// The payload as `Data`, which gives the memory back to the pool when it goes.
    func handedOver() -> Data {
        let handed = block!
        block = nil
        return Data(
            bytesNoCopy: handed + Self.lead, count: payload.count,
            deallocator: .custom { start, _ in ChunkMemory.giveBack(start - ChunkMemory.lead) })
    }

    /// Frees the blocks kept for reuse (those in use come back to the pool as they are
    /// released): once no transfer runs, the memory goes back to the system instead of waiting
    /// for the next large transfer. Returns how many were freed.
    @discardableResult
    static func emptyPool() -> Int {
        let kept = pool.withLock { blocks -> [Int] in
            defer { blocks = [] }
            return blocks
        }
        for address in kept { free(UnsafeMutableRawPointer(bitPattern: address)) }
        return kept.count
    }

    /// How many blocks wait in the pool (for tests).
    static var pooled: Int { pool.withLock { $0.count } }

    private static func allocate() -> UnsafeMutableRawPointer {
        var block: UnsafeMutableRawPointer?
        guard posix_memalign(&block, ChunkFrame.dataAlignment, capacity) == 0, let block else {
            fatalError("out of memory for a \(capacity)-byte chunk buffer")
        }
        return block
    }

    private static func giveBack(_ block: UnsafeMutableRawPointer) {
        let address = Int(bitPattern: block)
        let kept = pool.withLock { blocks -> Bool in
            guard blocks.count < poolLimit else { return false }
            blocks.append(address)
            return true
        }
        if !kept { free(block) }
    }
}

/// A chunk of file data: which entry, where in it, the bytes.
struct ChunkFrame: Equatable {
    static let headerSize = 12

    var index: UInt32
    var offset: UInt64
    var data: Data

    var frame: Frame {
        var payload = Data(capacity: Self.headerSize + data.count)
        withUnsafeBytes(of: index.bigEndian) { payload.append(contentsOf: $0) }
        withUnsafeBytes(of: offset.bigEndian) { payload.append(contentsOf: $0) }
        payload.append(data)
        return Frame(kind: .chunk, payload: payload)
    }

    /// Writes a chunk frame's 17 bytes of header (kind, length, index, offset) at the start of
    /// `buffer`, for `length` bytes of data that follow it there.
    static func writeHeader(into buffer: UnsafeMutableRawBufferPointer, index: UInt32, offset: UInt64, length: Int) {
        buffer[0] = Frame.Kind.chunk.rawValue
        buffer.storeBytes(of: UInt32(headerSize + length).bigEndian, toByteOffset: 1, as: UInt32.self)
        buffer.storeBytes(of: index.bigEndian, toByteOffset: 5, as: UInt32.self)
        buffer.storeBytes(of: offset.bigEndian, toByteOffset: 9, as: UInt64.self)
    }

    /// Where a chunk's file bytes start in a receiver's memory: on a page boundary, so that a
    /// receiver can write them straight to the disk (see ``DirectWrites``).
    static let dataAlignment = 4096

    init(index: UInt32, offset: UInt64, data: Data) {
        self.index = index
        self.offset = offset
        self.data = data
    }

    /// - Throws: ``PeerTransferError/protocolViolation(_:)`` when the payload is shorter than
    ///   the header.
    init(_ frame: Frame) throws {
        let payload = frame.payload
        guard payload.count >= Self.headerSize else {
            throw PeerTransferError.protocolViolation(
                "a chunk message of \(payload.count) bytes, shorter than its header")
        }
        let base = payload.startIndex
        index = payload[base..<base + 4].reduce(0) { $0 << 8 | UInt32($1) }
        offset = payload[base + 4..<base + 12].reduce(0) { $0 << 8 | UInt64($1) }
        data = payload[(base + 12)...]
    }
}

/// The end of one file's bytes: which entry, and the SHA-256 of the whole file as the sender
/// read it while sending (a digest of 32 zero bytes withdraws the file: it changed while it
/// was being read). Binary: the entry index (u32, big end), then the 32 bytes of the digest.
struct FileEnd: Equatable {
    static let size = 4 + 32

    var index: UInt32
    /// The digest, lower-case hex.
    var sha256: String

    /// The digest that withdraws a file.
    static let withdrawn = String(repeating: "0", count: 64)

    var frame: Frame {
        var payload = Data(capacity: Self.size)
        withUnsafeBytes(of: index.bigEndian) { payload.append(contentsOf: $0) }
        var hex = sha256.utf8.makeIterator()
        while let high = hex.next(), let low = hex.next() {
            payload.append(UInt8(Self.nibble(high) << 4 | Self.nibble(low)))
        }
        return Frame(kind: .fileEnd, payload: payload)
    }

    init(index: UInt32, sha256: String) {
        self.index = index
        self.sha256 = sha256
    }

    /// - Throws: ``PeerTransferError/protocolViolation(_:)`` when the payload is not exactly
    ///   an index and a digest.
    init(_ frame: Frame) throws {
        let payload = frame.payload
        guard payload.count == Self.size else {
            throw PeerTransferError.protocolViolation(
                "a fileEnd message of \(payload.count) bytes (it is \(Self.size))")
        }
        let base = payload.startIndex
        index = payload[base..<base + 4].reduce(0) { $0 << 8 | UInt32($1) }
        let digits = Array("0123456789abcdef".utf8)
        var hex: [UInt8] = []
        hex.reserveCapacity(64)
        for byte in payload[(base + 4)...] {
            hex.append(digits[Int(byte >> 4)])
            hex.append(digits[Int(byte & 0xf)])
        }
        sha256 = String(decoding: hex, as: UTF8.self)
    }

    private static func nibble(_ digit: UInt8) -> UInt8 {
        switch digit {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): digit - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): digit - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): digit - UInt8(ascii: "A") + 10
        default: 0
        }
    }
}
