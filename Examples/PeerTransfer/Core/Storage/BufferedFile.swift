import Foundation
import SalutStreams

/// A small file received whole into memory before any of it touches the disk. The receiving
/// task only collects and hashes its bytes; the file is created and written by one of the
/// batch's writers, then synced and named on the publishing thread with the rest of its batch
/// (see ``VerifiedBatch``), as a file without
/// a name (`O_TMPFILE`) linked under its final name: no part file is made, locked, tagged and
/// removed for it, and none of that holds up the connection.
///
/// A buffered file is never resumable: should its transfer end before its bytes are all in, or
/// fail before its batch is written, nothing of it is on disk, and the next offer sends it
/// again (at most ``sizeLimit`` bytes). Its path is claimed for its sender while it waits (see
/// ``Inbox/claim(_:for:)``), as a part file's lock would.
struct BufferedFile {
    /// Files up to this size, received from their first byte, are buffered.
    static let sizeLimit: UInt64 = UInt64(TransferLimits.chunkSize)

    /// Where it goes, below the inbox.
    let path: RelativePath
    /// Its size in the manifest.
    let size: UInt64
    /// True when the sender's own part file for this path was found when the offer was
    /// answered (left by an earlier try): the file is then written there, emptied first, so
    /// that naming it also takes the part file away.
    let replacesPart: Bool
    /// The bytes so far, in their own memory (a chunk's buffer goes back to its pool at once).
    private(set) var data: Data
    /// The claim on its path, given back when the last copy of this value goes.
    let claim: ReceivingClaim?

    /// A file of `size` bytes for `path`, nothing received yet, holding `claim` while it waits.
    init(path: RelativePath, size: UInt64, replacesPart: Bool = false, claim: ReceivingClaim? = nil) {
        precondition(size <= Self.sizeLimit)
        self.path = path
        self.size = size
        self.replacesPart = replacesPart
        self.claim = claim
        data = Data(capacity: Int(size))
    }

    /// True when a file of `size` bytes, received from `offset`, is buffered rather than
    /// written as it comes (a resumed file goes on in its part file).
    static func isBuffered(size: UInt64, from offset: UInt64) -> Bool {
        offset == 0 && size <= sizeLimit
    }

    /// Adds `bytes`, which start at `offset`. The receiver's state machine admits only the
    /// next bytes of a file, inside its size; anything else is a bug here.
    mutating func append(_ bytes: Data, at offset: UInt64) {
        precondition(
            offset == UInt64(data.count) && offset + UInt64(bytes.count) <= size,
            "buffered file bytes out of order")
        data.append(bytes)
    }

    /// The SHA-256 of the bytes received.
    var digest: SHA256Digest { SHA256Hasher.hash(data) }
}
