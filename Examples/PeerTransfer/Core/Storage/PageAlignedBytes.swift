import Foundation

/// Memory that starts on a page (``DirectWrites/alignment``), for bytes on their way to a direct
/// write: a writer of small files copies a group's whole pages here, side by side (see
/// ``VerifiedBatch/writeBuffered(in:for:)``), and keeps it for the next group. One such buffer a
/// writer, grown to the largest group it meets, costs far less memory than keeping every waiting
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

    /// Page-aligned memory for at least `count` bytes, grown when it is too small (what it held
    /// is then gone), or nil for none (`count` is 0 and nothing is held: a group of files smaller
    /// than a page needs none). It stays valid until the next call or the buffer's end.
    func reserve(_ count: Int) -> UnsafeMutableRawPointer? {
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
        return start
    }
}
