import Foundation

/// Writes that go from the receiver's memory to the disk without passing through the page
/// cache (`O_DIRECT`), for the large files a receiver writes in whole, page-aligned chunks.
///
/// Why: a file the receiver writes is not read again (it is hashed from the same memory on its
/// way to the disk), so copying it into the page cache is work that buys nothing. On the virtual
/// machines peerxfer is measured on, it can cost far more than a copy: memory the guest freed is
/// handed back to the host, and the first write to each such page faults into the host. Writing
/// a 1 GiB file into freshly handed-back pages took 3–5 s of the receiver's processor time
/// here, against under 1 s for pages in use; direct writes skip both.
///
/// The kernel takes a direct write only when the memory address, the length and the file
/// offset are multiples of the device's block size; ``alignment`` (a page) covers the usual
/// 512-byte and 4 KiB blocks. A write that is not aligned, or that the file system refuses
/// (`EINVAL`: tmpfs before Linux 6.6, FUSE file systems, a larger block size), is written
/// through the page cache instead, and so is everything after it in that file.
enum DirectWrites {
    /// What address, length and offset of a direct write must be multiples of.
    static let alignment = 4096

    /// `O_DIRECT`, which Swift's Glibc module leaves out (it sits behind `_GNU_SOURCE`); nil
    /// on an architecture whose value is not spelled out here (files are then written through
    /// the page cache).
    static let flag: Int32? = {
        #if arch(x86_64) || arch(i386)
        return 0o40000
        #elseif arch(arm64) || arch(arm)
        return 0o200000
        #else
        return nil
        #endif
    }()

    /// How many of `count` bytes at `address`, to be written at `offset`, may go directly: the
    /// largest aligned part, or 0 when the start is not aligned.
    static func directPart(of count: Int, at address: UnsafeRawPointer, offset: off_t) -> Int {
        guard Int(bitPattern: address) % alignment == 0, offset % off_t(alignment) == 0 else { return 0 }
        return count - count % alignment
    }

    /// Sets or clears `O_DIRECT` on `fd`; false when the file system refuses it (or the flag is
    /// not known here).
    static func set(_ on: Bool, on fd: Int32) -> Bool {
        guard let flag else { return !on }
        let flags = fcntl(fd, F_GETFL)
        guard flags >= 0 else { return false }
        return fcntl(fd, F_SETFL, on ? flags | flag : flags & ~flag) == 0
    }
}
