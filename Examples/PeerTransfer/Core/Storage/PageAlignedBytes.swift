import Foundation

/// Bytes in memory that starts on a page (``DirectWrites/alignment``), filled in order up to a
/// capacity fixed when it is made: the memory of a small file received whole (see
/// ``BufferedFile``), laid out so that its pages can go straight to the disk (see
/// ``DirectWrites``).
///
/// `@unchecked Sendable`: the bytes are appended by the one receiving task that owns the
/// buffered file and read only after it handed that file over, whole, to the thread that
/// publishes its batch. ``BufferedFile`` copies them before appending when its value was copied
/// (copy on write), so no two owners ever share a buffer being written.
final class PageAlignedBytes: @unchecked Sendable {
    private let start: UnsafeMutableRawPointer
    /// How many bytes it can hold.
    let capacity: Int
    /// How many it holds.
    private(set) var count = 0

    /// Room for `capacity` bytes, none held yet.
    init(capacity: Int) {
        var block: UnsafeMutableRawPointer?
        let rounded = max(
            DirectWrites.alignment, (capacity + DirectWrites.alignment - 1) & ~(DirectWrites.alignment - 1))
        guard posix_memalign(&block, DirectWrites.alignment, rounded) == 0, let block else {
            fatalError("out of memory for a \(capacity)-byte file buffer")
        }
        start = block
        self.capacity = capacity
    }

    deinit { free(start) }

    /// Adds `bytes` after those held; the caller keeps within ``capacity``.
    func append(_ bytes: UnsafeRawBufferPointer) {
        precondition(count + bytes.count <= capacity, "more bytes than a buffered file's size")
        guard let source = bytes.baseAddress, !bytes.isEmpty else { return }
        (start + count).copyMemory(from: source, byteCount: bytes.count)
        count += bytes.count
    }

    /// A copy of the bytes held, in memory of its own with the same capacity.
    func copy() -> PageAlignedBytes {
        let copy = PageAlignedBytes(capacity: capacity)
        withUnsafeBytes { copy.append($0) }
        return copy
    }

    /// Calls `body` with the bytes held (their start on a page boundary).
    func withUnsafeBytes<Result>(_ body: (UnsafeRawBufferPointer) throws -> Result) rethrows -> Result {
        try body(UnsafeRawBufferPointer(start: start, count: count))
    }
}
