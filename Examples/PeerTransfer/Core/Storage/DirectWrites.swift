import CFileSystems
import Foundation

/// Writes that go from the receiver's memory to the disk without passing through the page
/// cache (`O_DIRECT`): a large file's whole, page-aligned chunks as they arrive, and the whole
/// pages of a small file received into memory (``BufferedFile``) when its batch is written.
///
/// Why: the transfer that writes a file does not read it back (it hashes the bytes from the
/// same memory on their way to the disk), so a copy in the page cache buys it nothing. (A later
/// offer of the same file, or a resume, reads it from the disk instead.) On the virtual machine
/// peerxfer is measured on, that copy can cost far more than a copy: memory the guest freed
/// goes back to the host, and the first write to each such page faults into the host. Writing
/// 1 GiB into such pages took 3–5 s of the receiver's processor time, against about 0.12 s for
/// pages in use; direct writes skip both.
///
/// The kernel takes a direct write only when its memory address, length and file offset are
/// multiples of the device's logical block size; ``alignment`` covers blocks of 512 bytes and
/// 4 KiB. A write that is not aligned (a file's last, partial page), or that the file system
/// refuses (`EINVAL`), is written through the page cache instead, and so is everything after it
/// in that file. Direct writes are used only on file systems built for them (``isSuitable(_:)``).
enum DirectWrites {
    /// What the address, length and offset of a direct write are multiples of: 4 KiB, which
    /// 512-byte blocks divide. A chunk's bytes arrive in memory laid out on it
    /// (``ChunkFrame/dataAlignment``), at offsets that are multiples of the chunk size.
    static let alignment = ChunkFrame.dataAlignment

    /// ext2/3/4 and XFS (their `statfs` magic numbers). Elsewhere files go through the page
    /// cache: NFS makes each direct write a synchronous call to the server, FUSE file systems
    /// may refuse or emulate them, and tmpfs is the page cache.
    private static let fileSystems: Set<Int> = [0xEF53, 0x5846_5342]

    /// Whether the file `fd` is on a file system direct writes are used on.
    static func isSuitable(_ fd: Int32) -> Bool {
        var info = statfs()
        guard fstatfs(fd, &info) == 0 else { return false }
        return fileSystems.contains(Int(info.f_type))
    }

    /// How many of `count` bytes at `address`, to be written at `offset`, may go directly: the
    /// largest aligned part, or 0 when the start is not aligned.
    static func directPart(of count: Int, at address: UnsafeRawPointer, offset: off_t) -> Int {
        guard Int(bitPattern: address) % alignment == 0, offset % off_t(alignment) == 0 else { return 0 }
        return wholePages(of: count)
    }

    /// The bytes of the whole pages (``alignment``) among the first `count` bytes of a file:
    /// what of them may be written directly, the rest being its last, partial page.
    static func wholePages(of count: Int) -> Int { count - count % alignment }

    /// Sets or clears `O_DIRECT` on `fd`; false when the file system refuses it or `fcntl`
    /// fails.
    static func set(_ on: Bool, on fd: Int32) -> Bool {
        let flags = fcntl(fd, F_GETFL)
        guard flags >= 0 else { return false }
        return fcntl(fd, F_SETFL, on ? flags | __O_DIRECT : flags & ~__O_DIRECT) == 0
    }
}
