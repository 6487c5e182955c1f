/// The protocol's fixed sizes and bounds (docs/peerxfer-protocol.md).
public enum TransferLimits {
    /// The protocol version this build speaks.
    public static let protocolVersion = 2
    /// The DNS-SD service type peerxfer daemons publish.
    public static let serviceType = "_peerxfer._tcp"
    /// File data travels in chunks of this size (the last one of a file may be shorter); resume
    /// compares SHA-256 digests of whole chunks.
    public static let chunkSize = 1 << 20
    /// Seconds the person at a receiver (or its accept hook) has to answer an offer; the
    /// sender waits ``Sender/answerWait``, a little longer.
    public static let answerTime: Double = 120
    /// The largest control message (JSON) a peer may send.
    public static let maximumControlMessage = 16 << 20
    /// The largest hello message (a device id and a name; the receiver shows 100 bytes of it).
    public static let maximumHello = 64 << 10
    /// The largest chunk frame: the header and one chunk.
    public static let maximumChunkFrame = chunkSize + 64
    /// Entries (files and folders) in one manifest.
    public static let maximumEntries = 100_000
    /// Bytes in one relative path (UTF-8).
    public static let maximumPathBytes = 4_096
    /// Bytes in one path component (what Linux file systems allow).
    public static let maximumNameBytes = 255
    /// Folders deep a path may go.
    public static let maximumDepth = 64
    /// The largest file a manifest may announce (1 TiB).
    public static let maximumFileSize: UInt64 = 1 << 40
    /// Transfers one daemon receives at once, half of them at most from one source address;
    /// more are refused with a "busy" failure.
    public static let maximumConcurrentTransfers = 8
    /// Bytes buffered in each direction of a received connection, allocated when the first
    /// byte moves that way and freed with the connection. With the listener's default of
    /// 64 KiB, the socket could run only 64 KiB ahead of the connection's task, which was woken
    /// about 45 times a megabyte of chunks; a chunk's worth lets the task wake once per
    /// ``FrameReader/wakeSize`` bytes. Only ``maximumConcurrentTransfers`` connections are
    /// sent chunks at once.
    static let connectionBufferSize = 1 << 20
    /// The TLS 1.3 cipher suites both ends offer, in this order: AES-128-GCM first, as it
    /// costs the processor less per byte than AES-256-GCM, OpenSSL's first choice (about 10 %
    /// less in `openssl speed` on this project's test machine), and bulk data is what peerxfer
    /// moves. Peers that prefer another suite still connect.
    static let cipherSuites = "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256"
    /// The suffix of a file still arriving.
    public static let partSuffix = ".peerxfer-part"
    /// Hex digits of the sender's key in a part file's name (`NAME.<24 hex>.peerxfer-part`):
    /// each sender has a part file of its own for a path. 96 bits: no one can make a key whose
    /// tag matches another sender's (the recorded key tells two such apart anyway).
    static let partTagDigits = 24
    /// The longest file name that can be received: its part file's name must fit in 255 bytes.
    public static let maximumReceivedNameBytes = maximumNameBytes - partSuffix.utf8.count - partTagDigits - 1

    /// True when `name` ends in the part-file suffix in any ASCII case, compared as bytes (a
    /// character such as U+0D4E joins the dot after it into one grapheme, which would hide the
    /// suffix from a comparison of characters; vfat, exFAT and case-folding folders ignore case).
    static func isPartName(_ name: String) -> Bool {
        let lowered = name.utf8.reversed().lazy.map { (0x41...0x5A).contains($0) ? $0 + 0x20 : $0 }
        return lowered.starts(with: partSuffix.utf8.reversed())
    }

    /// The name of the part file in which `sender` (its key, as hex) sends the file `name`.
    static func partName(of name: String, from sender: String) -> String {
        // The key's first hex digits, lowercased (byte by byte: this runs for every file).
        var digits: [UInt8] = []
        digits.reserveCapacity(partTagDigits)
        for byte in sender.utf8 where digits.count < partTagDigits {
            let lowered = (0x41...0x46).contains(byte) ? byte + 0x20 : byte
            if (0x30...0x39).contains(lowered) || (0x61...0x66).contains(lowered) { digits.append(lowered) }
        }
        let tag = String(decoding: digits, as: UTF8.self)
        return name + "." + (tag.isEmpty ? "unknown" : tag) + partSuffix
    }

    /// Extra time both ends allow, after the answer, for the sender to hash what the receiver
    /// already holds (the files it called `existing`, the chunks of part files) before its
    /// first frame: those bytes at 100 MiB/s, well below any disk's reading speed.
    /// Each index counts once, for no more than its file's size: an answer that lists an
    /// index many times, or more chunk digests than the file has, buys no more time.
    static func hashingAllowance(for answer: Answer, chunkSize: Int, sizes: [UInt64]) -> Duration {
        var bytes: UInt64 = 0
        var counted = Set<Int>()
        for entry in answer.accepted where sizes.indices.contains(entry.index) && counted.insert(entry.index).inserted {
            let size = sizes[entry.index]
            if entry.existing != nil { bytes += size }
            bytes += min(size, UInt64(min(entry.have.count, Int(UInt32.max))) * UInt64(chunkSize))
        }
        return .seconds(bytes / (100 << 20))
    }
}
