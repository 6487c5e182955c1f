import Foundation
import SalutStreams
import XCTest
@testable import PeerTransferCore

/// A large file's chunks go from the receiver's memory to the disk without a copy in the page
/// cache, and the file is the same either way.
final class DirectWritesTests: XCTestCase {
    private var folder = ""

    override func setUpWithError() throws {
        folder = FileManager.default.temporaryDirectory.appendingPathComponent("px-direct-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        // Direct writes are used on ext4 and XFS only: elsewhere there is nothing to check.
        let probe = open(folder, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        defer { if probe >= 0 { close(probe) } }
        guard probe >= 0, DirectWrites.isSuitable(probe) else {
            throw XCTSkip("\(folder) is not on a file system direct writes are used on (ext4, XFS)")
        }
    }

    override func tearDown() {
        try? FileManager.default.removeItem(atPath: folder)
    }

    private func randomData(_ count: Int, seed: UInt64) -> Data {
        var state = seed
        return Data((0..<count).map { _ in
            state = state &* 6364136223846793005 &+ 1442695040888963407
            return UInt8(truncatingIfNeeded: state >> 33)
        })
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

    private func receive(_ data: Data, as name: String, shift: Int = 0) async throws -> (PartFile, String) {
        let inbox = try Inbox(path: folder + "/inbox")
        let file = try inbox.openPart(try RelativePath(validating: name), for: "k")
        let sink = FileSink(file: file, continuing: SHA256Hasher(), size: UInt64(data.count))
        XCTAssertTrue(file.writesDirectly, "ext4 refused O_DIRECT")
        for offset in stride(from: 0, to: data.count, by: TransferLimits.chunkSize) {
            let chunk = data[offset..<min(data.count, offset + TransferLimits.chunkSize)]
            try await sink.append(pageAligned(chunk, shift: shift), at: UInt64(offset))
        }
        let digest = try await sink.finish()
        XCTAssertEqual(digest, SHA256Hasher.hash(data), name)
        try file.finishWriting(mode: 0o644, modified: 0)
        file.closeFiles()
        return (file, folder + "/inbox/" + TransferLimits.partName(of: name, from: "k"))
    }

    func testALargeFilesAlignedChunksBypassThePageCacheAndItsShortTailDoesNot() async throws {
        let chunk = TransferLimits.chunkSize
        let data = randomData(6 * chunk + 5, seed: 6)
        let (file, path) = try await receive(data, as: "direct.bin")
        XCTAssertFalse(file.writesDirectly, "the 5-byte tail cannot go directly; it and what follows go through the cache")
        let cached = try cachedPages(path, size: data.count)
        let whole = 6 * chunk / pageSize
        XCTAssertEqual(cached.prefix(whole).filter { $0 }.count, 0, "pages written directly are not in the page cache")
        XCTAssertTrue(cached.last!, "the tail was written through the page cache")
        XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: path)), data)
    }

    func testALastChunkOfWholePagesAndAPartGoesDirectlyUpToItsLastPage() async throws {
        let chunk = TransferLimits.chunkSize
        let data = randomData(5 * chunk + 3 * DirectWrites.alignment + 100, seed: 7)
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
        let data = randomData(5 * TransferLimits.chunkSize, seed: 8)
        let (file, path) = try await receive(data, as: "shifted.bin", shift: 8)
        XCTAssertFalse(file.writesDirectly)
        XCTAssertEqual(try cachedPages(path, size: data.count).filter { !$0 }.count, 0, "written through the cache")
        XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: path)), data)
    }
}
