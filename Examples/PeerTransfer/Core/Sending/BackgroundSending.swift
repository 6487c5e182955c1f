import Foundation
import Logging
import Salut

/// peerxfer's protocol as a background session's upload protocol: the daemon's background
/// session delivers what `peerxfer send --background` queued, with the same checks (key pinned,
/// resume from what the receiver verified) as a foreground send.
public struct PeerTransferUpload: PeerUploadProtocol {
    let configuration: PeerConfiguration
    let displayName: String
    let logger: Logger?
    let status: StatusBook?

    /// An upload protocol sending as this device; `logger` hears of entries left out of a
    /// folder (names the protocol cannot carry, symlinks), which no one else would see, and
    /// `status` of where each send is (for `peerxfer status`).
    public init(
        configuration: PeerConfiguration, displayName: String, logger: Logger? = nil, status: StatusBook? = nil
    ) {
        self.configuration = configuration
        self.displayName = displayName
        self.logger = logger
        self.status = status
    }

    public func upload(_ body: PeerUploadBody, to service: ResolvedService, context: PeerUploadContext) async throws {
        let paths: [String]
        switch body {
        case .file(let url): paths = [url.path]
        case .data(let data):
            guard let listed = PathList.decoded(data) else {
                throw PeerTransferError.usage("a queued send's list of paths cannot be read")
            }
            paths = listed
        case .stream:
            throw PeerTransferError.usage("peerxfer sends files and folders, not streams")
        }
        let description = PathList.description(of: paths)
        let plan = try await TransferPlan.prepare(paths: paths)
        Self.plannedFiles.withLock { $0[context.persistentIdentifier] = plan.manifest.fileCount }
        for skipped in plan.skipped {
            logger?.warning(
                "background send of \(Terminal.escape(description)): skipped \(Terminal.escape(skipped.description))")
        }
        var sender = Sender(configuration: configuration, displayName: displayName)
        sender.findTimeout = 10
        sender.honoursQueuedGrants = true
        // `peerxfer cancel` cancels: the receiver removes what it has of this send. A daemon
        // that stops interrupts: the receiver keeps it, and the send resumes at the next start.
        sender.cancellationMeans = { context.isTaskCancelled ? .cancelled : .interrupted }
        let stopper = SendStopper()
        sender.stopper = stopper
        let key = ObjectIdentifier(stopper)
        Self.sending.withLock { $0[key] = stopper }
        defer { _ = Self.sending.withLock { $0.removeValue(forKey: key) } }
        let total = Int64(clamping: plan.manifest.totalBytes)
        let report: SendReport
        let (task, peer, path) = (context.persistentIdentifier, Terminal.escape(service.service.name), description)
        let status = self.status
        status?.recordOutbound(
            task: task, peer: peer, path: path, state: "connecting", files: plan.manifest.fileCount,
            total: plan.manifest.totalBytes)
        do {
            report = try await sender.send(
                plan, to: service.service.name,
                events: { event in
                    switch event {
                    case .connected(_, let key, _, _):
                        status?.recordOutbound(
                            task: task, peer: peer, path: path, state: "waiting-for-answer", key: key)
                    case .answered(_, let files, _, _, let bytes, _):
                        status?.recordOutbound(
                            task: task, peer: peer, path: path, state: "sending", files: files, sent: 0, total: bytes)
                    case .progress(let sent, let sendTotal):
                        context.reportProgress(sent: Int64(clamping: sent), total: total)
                        status?.recordOutbound(
                            task: task, peer: peer, path: path, state: sent >= sendTotal ? "verifying" : "sending",
                            sent: sent, total: sendTotal)
                    default:
                        break
                    }
                })
        } catch let error as PeerTransferError where error.isTrustFailure {
            // Paused, not given up (see isRetryable): said where the person looks, the log.
            logger?.warning(
                "background send of \(Terminal.escape(description)) to \"\(Terminal.escape(service.service.name))\" paused, it tries again later: \(error.message)"
            )
            throw error
        }
        if !report.failed.isEmpty {
            throw PeerTransferError.fileFailed(
                "\(report.failed.count) file(s) failed verification: \(report.failed.prefix(3).joined(separator: "; "))"
            )
        }
        if !report.declined.isEmpty {
            throw report.declineError("the receiver declined \(report.declined.count) entries")
        }
    }

    /// Refusals and bad input will not pass by waiting (``PeerTransferError/isFinal``); the
    /// rest may: an offer no one answered is made again later. A trust failure (a
    /// receiver answering its name with another key) pauses the send rather than ending it:
    /// an impostor that is there for a moment must not cost a week's queue. The send waits and
    /// tries again, `peerxfer status` showing why ("last error: KEY CHANGED…"), until the real
    /// receiver answers, the user pairs or untrusts, or cancels it.
    /// The stoppers of the sends under way in this process.
    private static let sending = Locked([ObjectIdentifier: SendStopper]())

    /// Waits, at most `seconds` in all, until every send that was stopped (by its session's
    /// invalidation: a daemon stopping) has told its receiver: for a process about to exit.
    public static func waitForStoppedSendsToTellTheirReceivers(seconds: Double) {
        let deadline = Date().addingTimeInterval(seconds)
        for stopper in sending.value.values where stopper.reason != nil {
            _ = stopper.waitUntilTold(seconds: max(0, deadline.timeIntervalSinceNow))
        }
    }

    /// How many files the last plan made for each task (by its id) held, for the status of its
    /// send once it ends (the session's task knows its paths, not what the folders held).
    static let plannedFiles = Locked([String: Int]())

    public func isRetryable(_ error: any Error) -> Bool {
        if error is CancellationError { return false }
        if let transfer = error as? PeerTransferError {
            return !transfer.isFinal
        }
        return true
    }
}

extension PeerConfiguration {
    /// The configuration of this device's background session (its folder is
    /// `CONFIG/background`). `runsTasks`: true for the daemon, false for `send --background`.
    public func backgroundSessionConfiguration(
        runsTasks: Bool, displayName: String, logger: Logger? = nil, status: StatusBook? = nil
    ) -> PeerSessionConfiguration {
        var session = PeerSessionConfiguration.background(withIdentifier: "peerxfer")
        session.backgroundStateDirectory = URL(
            fileURLWithPath: (directory as NSString).appendingPathComponent("background"))
        session.runsBackgroundTasks = runsTasks
        session.uploadProtocol = PeerTransferUpload(
            configuration: self, displayName: displayName, logger: logger, status: status)
        if let attempts = ProcessInfo.processInfo.environment["PEERXFER_MAX_ATTEMPTS"].flatMap(Int.init), attempts > 0 {
            session.maximumAttempts = attempts
        }
        if let delay = ProcessInfo.processInfo.environment["PEERXFER_RETRY_DELAY"].flatMap(Double.init), delay > 0,
            delay.isFinite
        {
            session.retryDelay = delay
        }
        return session
    }
}

/// The daemon's delegate for its background session: logs each event.
public final class BackgroundSendLog: PeerSessionUploadDelegate, @unchecked Sendable {
    // @unchecked: immutable lets only (a thread-safe logger, a Sendable status book, a string);
    // calls arrive one at a time.
    private let logger: Logger
    private let status: StatusBook?
    /// A folder whose files are copies made for sending (the web page's uploads): a send of
    /// one of them that ends, delivered, cancelled or failed for good, removes its copy.
    private let copiesFolder: String?

    /// A log that also records ended sends in `status` (for `peerxfer status`); the copies
    /// in `copiesFolder` (see ``copiesFolder``) are removed once sent.
    public init(logger: Logger, status: StatusBook? = nil, copiesFolder: String? = nil) {
        self.logger = logger
        self.status = status
        self.copiesFolder = copiesFolder
    }

    public func peerSession(_ session: PeerSession, task: PeerUploadTask, isWaiting phase: PeerUploadTask.Phase) {
        logger.info("background send \(Self.describe(task)): \(phase)")
        let state: String
        switch phase {
        case .waitingForService: state = "waiting-for-receiver"
        case .waitingToRetry: state = "waiting-to-retry"
        default: return
        }
        status?.recordOutbound(
            task: task.persistentIdentifier, peer: Terminal.escape(task.service.name),
            path: task.taskDescription ?? "?", state: state)
    }

    public func peerSession(_ session: PeerSession, task: PeerSessionTask, didCompleteWithError error: (any Error)?) {
        guard let upload = task as? PeerUploadTask else { return }
        if (error as? PeerSessionError) == .sessionInvalidated {
            logger.info("background send \(Self.describe(upload)) stays queued for the next start")
            return
        }
        if upload.isQueuedElsewhere {
            // Handed to the daemon that runs this configuration's queue: it delivers it (and
            // its copies stay, for it to read).
            logger.info("background send \(Self.describe(upload)) handed to the daemon that runs the queue")
            return
        }
        // Cancelled by the user (`peerxfer cancel`): an outcome of its own, not a failure; a
        // refusal by the receiver is named as the sender's own error names it.
        let sessionError = error as? PeerSessionError
        let cancelled = sessionError?.code == .cancelled
        let transferError = (error as? PeerTransferError) ?? (sessionError?.underlyingError as? PeerTransferError)
        let path = upload.taskDescription ?? "?"
        status?.recordOutboundEnd(
            task: upload.persistentIdentifier, peer: Terminal.escape(upload.service.name), path: path,
            files: PeerTransferUpload.plannedFiles.withLock { $0.removeValue(forKey: upload.persistentIdentifier) },
            bytes: UInt64(max(0, upload.countOfBytesSent)),
            state: cancelled ? "cancelled" : error == nil ? "done" : transferError?.outcome ?? "failed",
            error: cancelled ? nil : transferError?.message ?? error.map { "\($0)" })
        if let copiesFolder, path.hasPrefix(copiesFolder + "/"),
            let folder = path.dropFirst(copiesFolder.count + 1).split(separator: "/").first,
            folder != "..", folder != "."
        {
            // The copies are in a folder of their own, named for the send: it goes whole.
            try? FileManager.default.removeItem(
                atPath: (copiesFolder as NSString).appendingPathComponent(String(folder)))
        }
        if cancelled {
            logger.info("background send \(Self.describe(upload)) cancelled")
        } else if let error {
            logger.warning("background send \(Self.describe(upload)) failed: \(error)")
        } else {
            logger.info(
                "background send \(Self.describe(upload)) delivered and verified (\(upload.attempts) attempt(s))")
        }
    }

    /// "task 1a2b3c4d (/path) to "Name"": the id as `send --background` printed it and
    /// `status` and `cancel` show and take it, not the session's per-process number.
    static func describe(_ task: PeerUploadTask) -> String {
        "task \(TaskID.short(task.persistentIdentifier)) (\(Terminal.escape(task.taskDescription ?? "?"))) to \"\(Terminal.escape(task.service.name))\""
    }

    public func peerSessionDidFinishEvents(forBackgroundSession session: PeerSession) {
        logger.debug("background session: earlier events delivered")
    }
}

/// How a background send's id is shown: its first 8 hex digits, as `send --background` prints
/// it and `cancel` takes it (JSON carries the whole id).
public enum TaskID {
    /// The first 8 characters of `id`.
    public static func short(_ id: String) -> String { String(id.prefix(8)) }
}

/// Several paths sent as one background send (one task, one offer, one question at the
/// receiver): the task's body is their list, as data.
public enum PathList {
    private static let header = Data("peerxfer paths 1\n".utf8)

    /// `paths` (absolute) as a task's body.
    public static func encoded(_ paths: [String]) -> Data {
        header + ((try? JSONEncoder().encode(paths)) ?? Data("[]".utf8))
    }

    /// The paths a body lists; nil when it is not such a list.
    public static func decoded(_ data: Data) -> [String]? {
        guard data.starts(with: header) else { return nil }
        guard let paths = try? JSONDecoder().decode([String].self, from: data.dropFirst(header.count)),
            !paths.isEmpty
        else { return nil }
        return paths
    }

    /// How a send of `paths` is named in the queue and the status: the path, or the first one
    /// and how many more.
    public static func description(of paths: [String]) -> String {
        guard let first = paths.first else { return "?" }
        return paths.count == 1 ? first : "\(first) and \(paths.count - 1) more"
    }
}
