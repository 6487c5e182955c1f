import Foundation
import SalutStreams

/// What a background session keeps of each upload task on disk, one JSON file per task.
struct BackgroundTaskRecord: Codable, Sendable, Equatable {
    enum BodyKind: String, Codable, Sendable { case file, data, stream }
    enum Outcome: String, Codable, Sendable { case pending, succeeded, failed }

    var id: String
    var taskIdentifier: Int
    var serviceName: String
    var serviceType: String
    var serviceDomain: String
    var bodyKind: BodyKind
    /// The file to send (file bodies).
    var filePath: String?
    var taskDescription: String?
    var created: Date
    var deadline: Date
    var attempts: Int
    /// The phase, for people and for `allTasks` after a relaunch.
    var phase: String
    var checkpoint: Data?
    var outcome: Outcome
    var error: String?
    var bytesSent: Int64
    var bytesExpected: Int64
    /// Waits for the service and for retries, as metrics report them.
    var waits: [PeerTaskWait]
    /// When the task was first resumed, in whichever process: where its metrics' task interval
    /// starts, across relaunches (nil in records written before it was kept).
    var firstResumed: Date? = nil
}

/// The background session's state folder: a record per task, written whole and atomically
/// (temporary file, fsync, rename, fsync of the folder), so a crash at any point leaves each
/// record either as it was or as it became. No record depends on another, so there is nothing
/// a transaction across records would add (which is why this is files, not SQLite).
final class BackgroundJournal: Sendable {
    let directory: URL
    private var tasksDirectory: URL { directory.appendingPathComponent("tasks") }
    private var bodiesDirectory: URL { directory.appendingPathComponent("bodies") }

    /// Opens (creating, mode 0700) the folder.
    /// - Throws: ``PeerSessionError/transferFailed(_:)`` when it cannot be created.
    init(directory: URL, creatingFolders: Bool = true) throws {
        self.directory = directory
        guard creatingFolders else { return }
        do {
            for folder in [
                directory, directory.appendingPathComponent("tasks"), directory.appendingPathComponent("bodies"),
            ] {
                try FileManager.default.createDirectory(
                    at: folder, withIntermediateDirectories: true,
                    attributes: [.posixPermissions: 0o700])
            }
        } catch {
            throw PeerSessionError.transferFailed(
                "cannot create the background session folder \(directory.path): \(error.localizedDescription)")
        }
    }

    /// Every readable record. One that was read but does not decode is set aside as
    /// `NAME.corrupt` (and left out); one that cannot be read now (out of descriptors, say) is
    /// only left out, never set aside.
    func records() -> [BackgroundTaskRecord] {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: tasksDirectory.path)) ?? []
        let decoder = JSONDecoder()
        var records: [BackgroundTaskRecord] = []
        for name in names where name.hasSuffix(".json") {
            let url = tasksDirectory.appendingPathComponent(name)
            guard let data = try? Data(contentsOf: url) else { continue }
            if let record = try? decoder.decode(BackgroundTaskRecord.self, from: data) {
                records.append(record)
            } else {
                _ = rename(url.path, url.path + ".corrupt")
            }
        }
        return records.sorted { $0.taskIdentifier < $1.taskIdentifier }
    }

    /// Writes `record` atomically.
    /// - Throws: ``PeerSessionError/transferFailed(_:)`` naming the failing call.
    func save(_ record: BackgroundTaskRecord) throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        try Self.writeAtomically(
            try encoder.encode(record), to: tasksDirectory.appendingPathComponent(record.id + ".json"))
    }

    /// Removes a record, its stored body and any cancel request for it.
    func remove(_ id: String) {
        unlink(tasksDirectory.appendingPathComponent(id + ".json").path)
        unlink(bodiesDirectory.appendingPathComponent(id).path)
        clearCancelRequest(id)
    }

    /// Asks the runner (another process) to cancel task `id`: an empty `ID.cancel` file in the
    /// tasks folder, which the runner's watcher sees.
    /// - Throws: ``PeerSessionError/transferFailed(_:)`` when the file cannot be made.
    func requestCancel(_ id: String) throws {
        let path = tasksDirectory.appendingPathComponent(id + ".cancel").path
        let fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0o600)
        guard fd >= 0 else {
            throw PeerSessionError.transferFailed(
                "cannot ask the runner to cancel \(id): \(path): \(String(cString: strerror(errno)))")
        }
        close(fd)
    }

    /// Whether a cancel request for `id` waits for the runner.
    func hasCancelRequest(_ id: String) -> Bool {
        access(tasksDirectory.appendingPathComponent(id + ".cancel").path, F_OK) == 0
    }

    /// The tasks another process asked the runner to cancel.
    func cancelRequests() -> [String] {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: tasksDirectory.path)) ?? []
        return names.filter { $0.hasSuffix(".cancel") }.map { String($0.dropLast(".cancel".count)) }
    }

    /// Forgets the cancel request for `id` (done, or its task is gone).
    func clearCancelRequest(_ id: String) {
        unlink(tasksDirectory.appendingPathComponent(id + ".cancel").path)
    }

    /// Stores a data body for task `id`.
    func saveBody(_ data: Data, for id: String) throws {
        try Self.writeAtomically(data, to: bodiesDirectory.appendingPathComponent(id))
    }

    /// The stored data body of task `id`.
    func body(for id: String) -> Data? {
        try? Data(contentsOf: bodiesDirectory.appendingPathComponent(id))
    }

    /// ``AtomicFile/write(_:to:mode:durable:)`` at mode 0600, its failure as a ``PeerSessionError``.
    static func writeAtomically(_ data: Data, to url: URL) throws {
        do {
            try AtomicFile.write(data, to: url.path, mode: 0o600)
        } catch let failure as AtomicFile.Failure {
            throw PeerSessionError.transferFailed(failure.description)
        }
    }
}

/// Who runs a background session's tasks: the one process holding the folder's lock. Other
/// processes that open the session queue tasks for it, which the runner sees through inotify
/// (`TaskFolderWatcher`).
final class BackgroundRunnerLock: Sendable {
    private let fd: Int32
    /// True when this process holds the lock (and runs the tasks).
    let isHeld: Bool

    init(directory: URL, tryToHold: Bool) {
        fd = open(directory.appendingPathComponent("runner.lock").path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        isHeld = tryToHold && fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) == 0
    }

    deinit {
        if fd >= 0 { close(fd) }  // closing releases the lock
    }
}
