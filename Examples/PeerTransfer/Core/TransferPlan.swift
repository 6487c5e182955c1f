import Foundation
import SalutStreams
import Synchronization

/// What a sender offers: the manifest, and where each file's bytes come from.
public struct TransferPlan: Sendable {
    /// The manifest to send.
    public var manifest: Manifest
    /// The local file behind each manifest entry (nil for folders), by index.
    public var sources: [String?]
    /// Things left out, for the user (symlinks, sockets, unreadable entries).
    public var skipped: [String]

    /// Walks `paths` (files and folders; each lands in the receiver's inbox under its last
    /// component) and hashes every file (see ``hashed()``).
    /// - Throws: ``PeerTransferError/usage(_:)`` for a path that does not exist, two arguments
    ///   with the same last component, or names the protocol cannot carry;
    ///   ``PeerTransferError/limit(_:)`` beyond the protocol's limits;
    ///   ``PeerTransferError/runtime(_:)`` when a file cannot be read.
    /// With `hashing` false the digests are left as zeros (to check the paths only).
    public static func make(paths: [String], hashing: Bool = true) throws -> TransferPlan {
        var plan = TransferPlan(manifest: Manifest(chunkSize: TransferLimits.chunkSize, entries: []), sources: [], skipped: [])
        var roots = Set<String>()
        for argument in paths {
            let url = URL(fileURLWithPath: argument).standardizedFileURL
            var info = stat()
            guard lstat(url.path, &info) == 0 else {
                throw PeerTransferError.usage("\(argument): \(String(cString: strerror(errno)))")
            }
            let rootName = url.lastPathComponent
            guard rootName != "/" && !rootName.isEmpty else { throw PeerTransferError.usage("cannot send the root folder itself") }
            guard roots.insert(rootName).inserted else {
                throw PeerTransferError.usage("two arguments are named \"\(rootName)\"; they would land on the same path")
            }
            try plan.add(url.path, as: rootName, info: info)
            guard plan.manifest.entries.count <= TransferLimits.maximumEntries else {
                throw PeerTransferError.limit("more than \(TransferLimits.maximumEntries) files and folders")
            }
        }
        do {
            _ = try plan.manifest.validate()
        } catch let error as PeerTransferError {
            throw PeerTransferError.usage(error.message)
        }
        return hashing ? try plan.hashed() : plan
    }

    /// ``make(paths:hashing:)`` on a thread outside Swift's cooperative pool: hashing a large
    /// tree takes seconds of blocking reads, which must not hold up a daemon's other tasks.
    /// - Throws: what ``make(paths:hashing:)`` throws.
    public static func prepare(paths: [String]) async throws -> TransferPlan {
        try await withCheckedThrowingContinuation { done in
            DispatchQueue.global().async { done.resume(with: Result { try make(paths: paths) }) }
        }
    }

    /// The plan with every file's SHA-256 filled in, files hashed on all cores at once.
    /// - Throws: ``PeerTransferError/runtime(_:)`` when a file cannot be read (the first such
    ///   failure; the other files are then not hashed).
    public func hashed() throws -> TransferPlan {
        let files = manifest.entries.indices.filter { manifest.entries[$0].kind == .file }
        struct Progress {
            var next = 0
            var digests: [Int: String] = [:]
            var failure: PeerTransferError?
        }
        let progress = Mutex(Progress())
        let workers = min(files.count, max(1, ProcessInfo.processInfo.activeProcessorCount))
        DispatchQueue.concurrentPerform(iterations: workers) { _ in
            while true {
                let taken = progress.withLock { state -> Int? in
                    guard state.failure == nil, state.next < files.count else { return nil }
                    defer { state.next += 1 }
                    return files[state.next]
                }
                guard let index = taken else { return }
                do {
                    let digest = try FileHashing.digest(ofFile: sources[index]!, length: manifest.entries[index].size).hex
                    progress.withLock { $0.digests[index] = digest }
                } catch {
                    let failure = error as? PeerTransferError ?? .runtime("\(sources[index]!): \(error)")
                    progress.withLock { $0.failure = $0.failure ?? failure }
                }
            }
        }
        var plan = self
        try progress.withLock { state in
            if let failure = state.failure { throw failure }
            for (index, digest) in state.digests { plan.manifest.entries[index].sha256 = digest }
        }
        return plan
    }

    private mutating func add(_ path: String, as relative: String, info: stat) throws {
        let kind = info.st_mode & S_IFMT
        let modified = Double(info.st_mtim.tv_sec) + Double(info.st_mtim.tv_nsec) / 1e9
        switch kind {
        case S_IFREG:
            manifest.entries.append(ManifestEntry(path: relative, kind: .file, size: UInt64(info.st_size),
                                                  mode: UInt32(info.st_mode & 0o777), modified: modified,
                                                  sha256: String(repeating: "0", count: 64)))
            sources.append(path)
        case S_IFDIR:
            manifest.entries.append(ManifestEntry(path: relative, kind: .directory, size: 0,
                                                  mode: UInt32(info.st_mode & 0o777), modified: modified, sha256: ""))
            sources.append(nil)
            let children: [String]
            do {
                children = try FileManager.default.contentsOfDirectory(atPath: path).sorted()
            } catch {
                throw PeerTransferError.runtime("cannot list \(path): \(error.localizedDescription)")
            }
            for child in children {
                let childPath = (path as NSString).appendingPathComponent(child)
                var childInfo = stat()
                guard lstat(childPath, &childInfo) == 0 else {
                    skipped.append("\(childPath): \(String(cString: strerror(errno)))")
                    continue
                }
                try add(childPath, as: relative + "/" + child, info: childInfo)
                guard manifest.entries.count <= TransferLimits.maximumEntries else {
                    throw PeerTransferError.limit("more than \(TransferLimits.maximumEntries) files and folders")
                }
            }
        case S_IFLNK:
            skipped.append("\(path): a symlink (not followed)")
        default:
            skipped.append("\(path): not a regular file or folder")
        }
    }
}
