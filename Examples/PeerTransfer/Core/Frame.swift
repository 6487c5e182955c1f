import Foundation

/// One message on a peerxfer connection: a kind byte, a 4-byte big-endian payload length, and
/// the payload (JSON for control messages, a binary header and file bytes for chunks).
struct Frame: Sendable, Equatable {
    enum Kind: UInt8, Sendable {
        case hello = 1, manifest = 2, answer = 3, chunk = 4, fileResult = 5, done = 6, summary = 7
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
        do {
            return try JSONDecoder().decode(type, from: payload)
        } catch {
            throw PeerTransferError.protocolViolation("a malformed \(kind) message (\(payload.count) bytes)")
        }
    }
}

/// Splits received bytes into frames, refusing unknown kinds and oversized payloads before
/// buffering them. A pure value: feed bytes, take frames.
struct FrameDecoder {
    private var buffer = Data()
    private var start = 0

    /// Bytes received and not yet taken as frames.
    var bufferedCount: Int { buffer.count - start }

    /// Adds received bytes.
    mutating func append(_ bytes: Data) {
        bytes.withUnsafeBytes { append($0) }
    }

    /// Adds received bytes from a buffer the caller keeps.
    mutating func append(_ bytes: UnsafeRawBufferPointer) {
        if start > 0 && start == buffer.count {
            buffer.removeAll(keepingCapacity: true)
            start = 0
        } else if start > (1 << 20) && start * 2 > buffer.count {
            buffer.removeSubrange(buffer.startIndex..<buffer.startIndex + start)
            start = 0
        }
        buffer.append(contentsOf: bytes)
    }

    /// The next complete frame, or nil when more bytes are needed.
    /// - Throws: ``PeerTransferError/protocolViolation(_:)`` for an unknown kind,
    ///   ``PeerTransferError/limit(_:)`` for a payload over the kind's limit.
    mutating func next() throws -> Frame? {
        guard bufferedCount >= 5 else { return nil }
        let base = buffer.startIndex + start
        guard let kind = Frame.Kind(rawValue: buffer[base]) else {
            throw PeerTransferError.protocolViolation("unknown message kind \(buffer[base])")
        }
        let length = buffer[base + 1..<base + 5].reduce(0) { $0 << 8 | Int($1) }
        let limit = kind == .chunk ? TransferLimits.maximumChunkFrame : TransferLimits.maximumControlMessage
        guard length <= limit else {
            throw PeerTransferError.limit("a \(kind) message of \(length) bytes (the limit is \(limit))")
        }
        guard bufferedCount >= 5 + length else { return nil }
        let payload = Data(buffer[base + 5..<base + 5 + length])
        start += 5 + length
        return Frame(kind: kind, payload: payload)
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

    /// The wire bytes of a chunk frame for `data` (one copy, no intermediate frame).
    static func encoded(index: UInt32, offset: UInt64, data: UnsafeRawBufferPointer) -> Data {
        var wire = Data(capacity: 5 + headerSize + data.count)
        wire.append(Frame.Kind.chunk.rawValue)
        withUnsafeBytes(of: UInt32(headerSize + data.count).bigEndian) { wire.append(contentsOf: $0) }
        withUnsafeBytes(of: index.bigEndian) { wire.append(contentsOf: $0) }
        withUnsafeBytes(of: offset.bigEndian) { wire.append(contentsOf: $0) }
        wire.append(contentsOf: data)
        return wire
    }

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
            throw PeerTransferError.protocolViolation("a chunk message of \(payload.count) bytes, shorter than its header")
        }
        let base = payload.startIndex
        index = payload[base..<base + 4].reduce(0) { $0 << 8 | UInt32($1) }
        offset = payload[base + 4..<base + 12].reduce(0) { $0 << 8 | UInt64($1) }
        data = payload[(base + 12)...]
    }
}
