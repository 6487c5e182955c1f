import Foundation
import SalutStreams
import SalutTestSupport
import XCTest
@testable import PeerTransferCore

/// A large file's chunks go from the receiver's memory to the disk without a copy in the page
/// cache, and the file is the same either way.
final class DirectWritesTests: XCTestCase {
    private var folder = ""

    override func setUpWithError() throws {
        folder = FileManager.default.temporaryDirectory.appendingPathComponent("px-direct-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
    }

    override func tearDown() {
        try? FileManager.default.removeItem(atPath: folder)
    }

    /// Skips unless `folder` is on a file system direct writes are used on (ext4, XFS).
    private func requireDirectWrites(in folder: String) throws {
        let probe = open(folder, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        defer { if probe >= 0 { close(probe) } }
        guard probe >= 0, DirectWrites.isSuitable(probe) else {
            throw XCTSkip("\(folder) is not on a file system direct writes are used on (ext4, XFS)")
        }
    }

    /// Runs `arguments` and returns its status and output.
    @discardableResult
    private func run(_ arguments: [String]) throws -> (status: Int32, output: String) {
        let process = try Foreign(arguments)
        let output = process.finish(seconds: 60)
        return (process.process.terminationStatus, output)
    }

    /// `bytes` in memory of its own that starts `shift` bytes past a page boundary (a chunk's
    /// data arrives on one, see ``ChunkMemory``).
    private func pageAligned(_ bytes: Data, shift: Int = 0) -> Data {
        var block: UnsafeMutableRawPointer?
        guard posix_memalign(&block, DirectWrites.alignment, bytes.count + shift) == 0, let block else {
            fatalError("no memory for a test chunk")
        }
        bytes.withUnsafeBytes { (block + shift).copyMemory(from: $0.baseAddress!, byteCount: $0.count) }
        return Data(bytesNoCopy: block + shift, count: bytes.count, deallocator: .custom { _, _ in free(block) })
    }

    private let pageSize = Int(sysconf(Int32(_SC_PAGESIZE)))

    /// For each page of the file at `path`, whether the page cache holds it (mincore(2)).
    private func cachedPages(_ path: String, size: Int) throws -> [Bool] {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw POSIXError(.init(rawValue: errno) ?? .EIO) }
        defer { close(fd) }
        let mapped = mmap(nil, size, PROT_READ, MAP_SHARED, fd, 0)
        guard let mapped, mapped != MAP_FAILED else { throw POSIXError(.init(rawValue: errno) ?? .EIO) }
        defer { munmap(mapped, size) }
        var pages = [UInt8](repeating: 0, count: (size + pageSize - 1) / pageSize)
        guard mincore(mapped, size, &pages) == 0 else { throw POSIXError(.init(rawValue: errno) ?? .EIO) }
        return pages.map { $0 & 1 == 1 }
    }

    private func receive(
        _ data: Data, as name: String, shift: Int = 0, into inboxPath: String? = nil
    ) async throws -> (PartFile, String) {
        let inboxPath = inboxPath ?? folder + "/inbox"
        try requireDirectWrites(in: (inboxPath as NSString).deletingLastPathComponent)
        let inbox = try Inbox(path: inboxPath)
        let file = try inbox.openPart(try RelativePath(validating: name), for: "k")
        let sink = FileSink(file: file, continuing: SHA256Hasher(), size: UInt64(data.count))
        XCTAssertTrue(file.writesDirectly, "the file system refused O_DIRECT")
        let digest: SHA256Digest
        do {
            for offset in stride(from: 0, to: data.count, by: TransferLimits.chunkSize) {
                let chunk = data[offset..<min(data.count, offset + TransferLimits.chunkSize)]
                try await sink.append(pageAligned(chunk, shift: shift), at: UInt64(offset))
            }
            digest = try await sink.finish()
        } catch {
            // Nothing left open (a mounted test file system must unmount).
            await sink.drain()
            file.closeFiles()
            throw error
        }
        XCTAssertEqual(digest, SHA256Hasher.hash(data), name)
        try file.finishWriting(mode: 0o644, modified: 0)
        file.closeFiles()
        return (file, inboxPath + "/" + TransferLimits.partName(of: name, from: "k"))
    }

    func testALargeFilesAlignedChunksBypassThePageCacheAndItsShortTailDoesNot() async throws {
        let chunk = TransferLimits.chunkSize
        let data = seededData(6 * chunk + 5, seed: 6)
        let (file, path) = try await receive(data, as: "direct.bin")
        XCTAssertFalse(
            file.writesDirectly, "the 5-byte tail cannot go directly; it and what follows go through the cache")
        let cached = try cachedPages(path, size: data.count)
        let whole = 6 * chunk / pageSize
        XCTAssertEqual(cached.prefix(whole).filter { $0 }.count, 0, "pages written directly are not in the page cache")
        XCTAssertTrue(cached.last!, "the tail was written through the page cache")
        XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: path)), data)
    }

    func testALastChunkOfWholePagesAndAPartGoesDirectlyUpToItsLastPage() async throws {
        let chunk = TransferLimits.chunkSize
        let data = seededData(5 * chunk + 3 * DirectWrites.alignment + 100, seed: 7)
        let (file, path) = try await receive(data, as: "tail.bin")
        XCTAssertFalse(file.writesDirectly, "the last 100 bytes went through the cache")
        let cached = try cachedPages(path, size: data.count)
        XCTAssertEqual(cached.dropLast().filter { $0 }.count, 0, "every whole page went directly")
        XCTAssertTrue(cached.last!)
        XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: path)), data)
    }

    /// (The fallback itself: any path to it gives this; a file system that refuses a direct
    /// write with `EINVAL` takes the same branch.)
    func testChunksInMemoryOffAPageBoundaryAreWrittenThroughTheCacheAlike() async throws {
        let data = seededData(5 * TransferLimits.chunkSize, seed: 8)
        let (file, path) = try await receive(data, as: "shifted.bin", shift: 8)
        XCTAssertFalse(file.writesDirectly)
        XCTAssertEqual(try cachedPages(path, size: data.count).filter { !$0 }.count, 0, "written through the cache")
        XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: path)), data)
    }

    func testADirectWriteTheFileSystemRefusesIsWrittenThroughTheCache() async throws {
        // XFS on a disk of 8 KiB sectors takes direct writes in multiples of 8 KiB only: the
        // chunks go directly, and the tail's 4 KiB page is refused with EINVAL, then written
        // through the page cache (the fallback a file system's own rules can force).
        guard getuid() == 0, FileManager.default.isExecutableFile(atPath: "/sbin/mkfs.xfs") else {
            throw XCTSkip("needs root and mkfs.xfs (xfsprogs, installed by Scripts/bootstrap)")
        }
        let image = folder + "/xfs.img", mount = folder + "/xfs"
        try FileManager.default.createDirectory(atPath: mount, withIntermediateDirectories: true)
        guard try run(["/usr/bin/truncate", "-s", "400M", image]).status == 0 else { return XCTFail("truncate") }
        let attached = try run(["/sbin/losetup", "--find", "--show", "--sector-size", "8192", image])
        guard attached.status == 0 else { throw XCTSkip("no loop device here: \(attached.output)") }
        let device = attached.output.trimmingCharacters(in: .whitespacesAndNewlines)
        var detached = false
        defer { if !detached { _ = try? run(["/sbin/losetup", "-d", device]) } }
        let made = try run(["/sbin/mkfs.xfs", "-q", "-f", "-b", "size=8192", "-s", "size=8192", device])
        guard made.status == 0 else { throw XCTSkip("mkfs.xfs with 8 KiB blocks refused: \(made.output)") }
        let mounted = try run(["/bin/mount", device, mount])
        guard mounted.status == 0 else {
            throw XCTSkip("this kernel cannot mount XFS with 8 KiB blocks: \(mounted.output)")
        }
        // Detached at once: the kernel frees the loop device when the file system is unmounted.
        detached = try run(["/sbin/losetup", "-d", device]).status == 0
        defer {
            if (try? run(["/bin/umount", mount]))?.status != 0 {
                XCTFail("could not unmount \(mount)")
                _ = try? run(["/bin/umount", "-l", mount])
            }
        }

        let chunk = TransferLimits.chunkSize
        // The tail is one whole 4 KiB page: on ext4 it would go directly (and direct writes
        // would stay on); here it is refused, and goes through the cache.
        let data = seededData(5 * chunk + DirectWrites.alignment, seed: 10)
        let (file, path) = try await receive(data, as: "refused.bin", into: mount + "/inbox")
        XCTAssertFalse(file.writesDirectly, "the refused write turned direct writes off")
        let cached = try cachedPages(path, size: data.count)
        XCTAssertEqual(cached.prefix(5 * chunk / pageSize).filter { $0 }.count, 0, "the whole chunks went directly")
        XCTAssertTrue(cached[5 * chunk / pageSize], "the refused page went through the cache")
        XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: path)), data)
    }
}
