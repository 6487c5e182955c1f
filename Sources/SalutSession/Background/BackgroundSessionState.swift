import Foundation
import SalutStreams
import SalutDiscovery

/// What a background session keeps beyond an ordinary one: its state folder, whether this
/// process runs its tasks (holds the runner lock) or only queues them, and the watcher that
/// lets the runner see tasks other processes queue.
final class BackgroundSessionState: @unchecked Sendable {
    // @unchecked: `watcher` and `known` are guarded by `lock`; the rest is set in init.
    let identifier: String
    let journal: BackgroundJournal
    private let runnerLock: BackgroundRunnerLock
    private let lock = StateLock()
    private var watcher: TaskFolderWatcher?
    /// Records this process has a task object for.
    private var known = Set<String>()
    /// The runner is going away (its process is stopping): tasks it stops stay pending on
    /// disk for the next runner instead of ending as cancelled.
    private var leaving = false

    /// True once ``leave()`` was called.
    var isLeaving: Bool { lock.withLock { leaving } }

    /// From now on, a task stopped by this process is left pending for the next runner.
    func leave() { lock.withLock { leaving = true } }
    /// In a process that only queues: views of the tasks the runner has (not the session's
    /// own tasks: they never complete here).
    private var views: [PeerUploadTask] = []

    var snapshots: [PeerUploadTask] { lock.withLock { views } }

    func addSnapshot(_ task: PeerUploadTask) { lock.withLock { views.append(task) } }

    /// Lets go of the views (they hold the session).
    func dropSnapshots() { lock.withLock { views = [] } }

    /// True when this process runs the session's tasks.
    var runsTasks: Bool { runnerLock.isHeld }

    init(identifier: String, directory: URL, wantsToRun: Bool, standIn: Bool = false) throws {
        self.identifier = identifier
        journal = try BackgroundJournal(directory: directory, creatingFolders: !standIn)
        runnerLock = BackgroundRunnerLock(directory: directory, tryToHold: wantsToRun)
    }

    /// Marks a record as having a task object here; false when it already had one.
    func adopt(_ id: String) -> Bool {
        lock.withLock { known.insert(id).inserted }
    }

    /// Starts watching the tasks folder (runner only); `onChange` runs on the watcher's thread.
    func watch(onChange: @escaping @Sendable () -> Void) {
        guard runsTasks else { return }
        let watcher = TaskFolderWatcher(
            folder: journal.directory.appendingPathComponent("tasks").path, onChange: onChange)
        lock.withLock { self.watcher = watcher }
    }

    func stopWatching() {
        let watcher = lock.withLock { () -> TaskFolderWatcher? in
            defer { self.watcher = nil }
            return self.watcher
        }
        watcher?.stop()
    }
}

extension PeerSession {
    // MARK: Background upload tasks

    /// A background upload of the file (or folder, for protocols that send trees) at `fileURL`
    /// to `service`, suspended: call `resume()`. Background sessions only.
    public func uploadTask(to service: DiscoveredService, fromFile fileURL: URL) -> PeerUploadTask {
        makeUploadTask(to: service, kind: .file, filePath: fileURL.path, body: .file(fileURL), data: nil)
    }

    /// A background upload of `data` to `service` (the bytes are kept in the session's state
    /// folder until the task ends), suspended.
    public func uploadTask(to service: DiscoveredService, from data: Data) -> PeerUploadTask {
        makeUploadTask(to: service, kind: .data, filePath: nil, body: .data(data), data: data)
    }

    /// A background upload of `stream` to `service`, suspended. A retry (or a relaunch) asks
    /// the delegate for a fresh stream (``PeerSessionUploadDelegate``).
    public func uploadTask(to service: DiscoveredService, fromStream stream: InputStream) -> PeerUploadTask {
        makeUploadTask(to: service, kind: .stream, filePath: nil, body: .stream(stream), data: nil)
    }

    private func makeUploadTask(
        to service: DiscoveredService, kind: BackgroundTaskRecord.BodyKind, filePath: String?,
        body: PeerUploadBody, data: Data?
    ) -> PeerUploadTask {
        guard let background else {
            let task = register { identifier in
                PeerUploadTask(
                    session: self, identifier: identifier, background: .unavailable,
                    record: .fresh(
                        service: service, kind: kind, filePath: filePath, identifier: identifier, deadline: Date()),
                    body: body)
            }
            task.complete(
                with: PeerSessionError.notAllowed(
                    backgroundFailure.map { "the background session's state folder cannot be used: \($0)" }
                        ?? "upload tasks need a background session (PeerSessionConfiguration.background(withIdentifier:))"
                ))
            return task
        }
        let deadline = Date().addingTimeInterval(min(configuration.timeoutIntervalForResource, 1e9))
        if !background.runsTasks {
            // Unique beside the tasks other processes queued since this session was made.
            reserveIdentifiers(through: background.journal.records().map(\.taskIdentifier).max() ?? 0)
        }
        return register { identifier in
            var record = BackgroundTaskRecord.fresh(
                service: service, kind: kind, filePath: filePath, identifier: identifier, deadline: deadline)
            if let data {
                // Kept with the task; if it cannot be, the first attempt sends what it has.
                try? background.journal.saveBody(data, for: record.id)
            }
            if case .file = kind,
                let size = try? FileManager.default.attributesOfItem(atPath: filePath ?? "")[.size] as? Int64
            {
                record.bytesExpected = size
            } else if let data {
                record.bytesExpected = Int64(data.count)
            }
            _ = background.adopt(record.id)
            return PeerUploadTask(
                session: self, identifier: identifier, background: background, record: record, body: body)
        }
    }

    /// Runner side: makes task objects for records it has none for (queued by other
    /// processes, or left by an earlier run of this one), resumes the pending ones, and
    /// delivers the completions no delegate heard. Returns how many completions it delivered,
    /// and the identifiers of the tasks it resumed.
    @discardableResult
    func adoptQueuedTasks() -> (delivered: Int, resumed: [Int]) {
        guard let background, background.runsTasks else { return (0, []) }
        var delivered = 0
        var resumed: [Int] = []
        for record in background.journal.records() where background.adopt(record.id) {
            let body: PeerUploadBody
            switch record.bodyKind {
            case .file: body = .file(URL(fileURLWithPath: record.filePath ?? ""))
            case .data: body = .data(background.journal.body(for: record.id) ?? Data())
            case .stream: body = .stream(InputStream(data: Data()))  // a fresh one is asked for before use
            }
            let task = registerKeeping(record.taskIdentifier) { identifier in
                PeerUploadTask(
                    session: self, identifier: identifier, background: background, record: record, body: body,
                    reloaded: true)
            }
            switch record.outcome {
            case .pending:
                resumed.append(task.taskIdentifier)
                task.resume()
            case .succeeded, .failed:
                delivered += 1
                task.completeFromRecord(record)
            }
        }
        // Cancels asked for by processes that only queue.
        let requests = background.journal.cancelRequests()
        if !requests.isEmpty {
            let uploads = allTasks.compactMap { $0 as? PeerUploadTask }
            for id in requests {
                uploads.first { $0.persistentIdentifier == id }?.cancel()
                background.journal.clearCancelRequest(id)
            }
        }
        return (delivered, resumed)
    }
}

extension PeerSession {
    /// Queuing side: task objects (phase ``PeerUploadTask/Phase/queuedWithRunner``) for the
    /// pending records another process runs, so that ``allTasks`` lists them.
    func viewQueuedTasks() {
        guard let background, !background.runsTasks else { return }
        let records = background.journal.records()
        // Identifiers unique in this process's view: the new tasks it makes count on from the
        // last one recorded, whoever made it.
        reserveIdentifiers(through: records.map(\.taskIdentifier).max() ?? 0)
        for record in records where record.outcome == .pending && background.adopt(record.id) {
            let task = PeerUploadTask(
                session: self, identifier: record.taskIdentifier, background: background, record: record,
                body: .file(URL(fileURLWithPath: record.filePath ?? "")), reloaded: true, snapshot: true)
            task.markQueued()
            background.addSnapshot(task)
        }
    }
}

extension BackgroundSessionState {
    /// A stand-in for upload tasks made on a session that is not a background session (they
    /// complete at once with an error and touch no disk).
    static let unavailable: BackgroundSessionState = {
        // Nothing is made on disk for it (any user, any folder's permissions).
        let directory = URL(fileURLWithPath: "/nonexistent/salut-no-background")
        do {
            return try BackgroundSessionState(identifier: "", directory: directory, wantsToRun: false, standIn: true)
        } catch {
            preconditionFailure("a stand-in that touches no disk cannot fail: \(error)")
        }
    }()
}

extension BackgroundTaskRecord {
    static func fresh(
        service: DiscoveredService, kind: BodyKind, filePath: String?, identifier: Int, deadline: Date
    ) -> BackgroundTaskRecord {
        BackgroundTaskRecord(
            id: UUID().uuidString.lowercased(), taskIdentifier: identifier, serviceName: service.name,
            serviceType: service.type, serviceDomain: service.domain, bodyKind: kind, filePath: filePath,
            taskDescription: nil, created: Date(), deadline: deadline, attempts: 0, phase: "not started",
            checkpoint: nil, outcome: .pending, error: nil, bytesSent: 0, bytesExpected: -1, waits: [])
    }
}
