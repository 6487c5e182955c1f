import Foundation

/// Memory that starts on a page (``DirectWrites/alignment``), for bytes on their way to a direct
/// write: a writer of small files copies each file's whole pages here (see
/// ``VerifiedBatch/writeBuffered(in:for:)``), and keeps it for the next file. One such buffer a
/// writer, grown to the largest file it meets, costs far less memory than keeping every waiting
/// file in page-aligned memory of its own (which rounds each up to whole pages and fragments the
/// heap: about 6 MiB more at the receiver's peak on 10,000 small files).
///
/// Not thread-safe: each writer keeps its own.
final class PageAlignedBytes {
    private var start: UnsafeMutableRawPointer?
    private var capacity = 0

    /// An empty buffer (memory comes with the first bytes).
    init() {}

    deinit { free(start) }

    /// Copies the first `count` bytes of `bytes` into page-aligned memory (grown to fit when it
    /// is too small) and calls `body` with them there.
    func withCopy<Result>(
        of bytes: UnsafeRawBufferPointer, count: Int, _ body: (UnsafeRawBufferPointer) throws -> Result
    ) rethrows -> Result {
        precondition(count <= bytes.count)
        if count > capacity {
            free(start)
            start = nil
            capacity = 0
            // In steps of 64 KiB: a tree's files of many sizes grow it only a few times.
            let rounded = (count + 0xFFFF) & ~0xFFFF
            var block: UnsafeMutableRawPointer?
            guard posix_memalign(&block, DirectWrites.alignment, rounded) == 0, let block else {
                fatalError("out of memory for a \(rounded)-byte write buffer")
            }
            start = block
            capacity = rounded
        }
        guard let start, count > 0, let source = bytes.baseAddress else {
            return try body(UnsafeRawBufferPointer(start: nil, count: 0))
        }
        start.copyMemory(from: source, byteCount: count)
        return try body(UnsafeRawBufferPointer(start: start, count: count))
    }
}
