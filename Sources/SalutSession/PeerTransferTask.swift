import Foundation
import SalutDiscovery
import SalutStreams

/// The app's side of a long transfer run by a ``PeerTransferTask``: what to send or receive
/// over the task's connection, and how to pick up where an earlier attempt stopped.
///
/// The library knows nothing about files; `peerxfer` implements this for files (header,
/// offset negotiation, integrity check). Save a checkpoint whenever the peer has acknowledged
/// progress, so that resume data can restart from there.
public protocol PeerTransfer: Sendable {
    /// Runs the transfer on a connected stream task. `context.checkpoint` is the state saved by
    /// the attempt this one resumes (nil for a fresh start).
    /// - Throws: anything; the task completes with it (wrapped in
    ///   ``PeerSessionError/transferFailed(_:)`` unless it is already a `PeerSessionError`).
    func run(_ context: PeerTransferContext) async throws
}

/// What a running ``PeerTransfer`` works with.
public final class PeerTransferContext: @unchecked Sendable {
    // @unchecked: `saved` is guarded by `lock`; the stream task is thread-safe.

    /// The connected stream task to read and write through.
    public let streamTask: PeerStreamTask
    /// The checkpoint this attempt resumes from (nil for a fresh start).
    public let checkpoint: Data?
    private let lock = StateLock()
    private var saved: Data?

    init(streamTask: PeerStreamTask, checkpoint: Data?) {
        self.streamTask = streamTask
        self.checkpoint = checkpoint
        self.saved = checkpoint
    }

    /// Remembers how far the transfer has safely come; resume data carries the latest one.
    public func save(checkpoint: Data) {
        lock.withLock { saved = checkpoint }
    }

    /// Sets the task's progress (in units the app chooses, bytes of a file for example).
    public func reportProgress(completed: Int64, total: Int64) {
        streamTask.progress.totalUnitCount = total
        streamTask.progress.completedUnitCount = completed
    }

    var latestCheckpoint: Data? { lock.withLock { saved } }
}

/// A stream task that runs a ``PeerTransfer`` once connected, and can be cancelled into resume
/// data and re-created from it (like `URLSessionDownloadTask`).
///
/// ```swift
/// let task = session.transferTask(with: service, transfer: FileSend(url: file))
/// task.resume()
/// …
/// let resumeData = await task.cancelByProducingResumeData()
/// let again = try session.transferTask(withResumeData: resumeData!, transfer: FileSend(url: file))
/// again.resume()
/// ```
///
/// The task completes when the transfer's `run` returns (success) or throws; its connection is
/// closed then.
open class PeerTransferTask: PeerStreamTask, @unchecked Sendable {
    // @unchecked: `runner` and `context` are guarded by the inherited `lock`.

    private let transfer: any PeerTransfer
    private let initialCheckpoint: Data?
    private var runner: Task<Void, Never>?
    /// The running transfer's context (it holds this task: dropped when the task finishes).
    private var context: PeerTransferContext?
    /// The context's latest checkpoint, kept once the context is dropped.
    private var finalCheckpoint: Data?

    init(session: PeerSession, identifier: Int, target: Target, transfer: any PeerTransfer, checkpoint: Data?) {
        self.transfer = transfer
        self.initialCheckpoint = checkpoint
        super.init(session: session, identifier: identifier, target: target)
    }

    override func startWork() {
        super.startWork()
        let context = PeerTransferContext(streamTask: self, checkpoint: initialCheckpoint)
        let transfer = self.transfer
        let runner = Task.detached {
            do {
                try await transfer.run(context)
                self.complete(with: nil)
            } catch {
                self.complete(with: self.isFinished ? self.failure : PeerSessionError.wrap(error))
            }
        }
        lock.withLock {
            self.context = context
            self.runner = runner
        }
    }

    override func finishWork() {
        let runner = lock.withLock { () -> Task<Void, Never>? in
            finalCheckpoint = context?.latestCheckpoint ?? finalCheckpoint
            context = nil  // breaks the task ↔ context cycle
            defer { self.runner = nil }
            return self.runner
        }
        runner?.cancel()
        super.finishWork()
    }

    /// Cancels the transfer and hands over resume data built from its latest checkpoint (nil
    /// when it never saved one and did not start from one).
    public func cancel(byProducingResumeData completionHandler: @escaping @Sendable (Data?) -> Void) {
        let data = resumeData()
        cancel()
        session.deliver { completionHandler(data) }
    }

    /// ``cancel(byProducingResumeData:)`` as an async call.
    public func cancelByProducingResumeData() async -> Data? {
        await withCheckedContinuation { continuation in
            cancel { continuation.resume(returning: $0) }
        }
    }

    private func resumeData() -> Data? {
        let checkpoint = lock.withLock { context?.latestCheckpoint ?? finalCheckpoint } ?? initialCheckpoint
        guard let checkpoint else { return nil }
        return ResumeRecord(target: target, checkpoint: checkpoint, description: taskDescription).encoded()
    }
}

/// What resume data holds: where to connect and the transfer's checkpoint.
struct ResumeRecord: Codable {
    var version = 1
    var host: String?
    var port: Int?
    var serviceName: String?
    var serviceType: String?
    var serviceDomain: String?
    var checkpoint: Data
    var description: String?

    init(target: PeerStreamTask.Target, checkpoint: Data, description: String?) {
        switch target {
        case .host(let host, let port):
            self.host = host
            self.port = port
        case .service(let service):
            serviceName = service.name
            serviceType = service.type
            serviceDomain = service.domain
        }
        self.checkpoint = checkpoint
        self.description = description
    }

    func encoded() -> Data? { try? JSONEncoder().encode(self) }

    /// - Throws: ``PeerSessionError/invalidResumeData(_:)`` saying what is wrong.
    static func decode(_ data: Data) throws -> (PeerStreamTask.Target, Data, String?) {
        let record: ResumeRecord
        do { record = try JSONDecoder().decode(ResumeRecord.self, from: data) } catch {
            throw PeerSessionError.invalidResumeData("not Salut resume data (\(error))")
        }
        guard record.version == 1 else {
            throw PeerSessionError.invalidResumeData("version \(record.version) is not supported")
        }
        if let host = record.host, let port = record.port {
            return (.host(host, port), record.checkpoint, record.description)
        }
        if let name = record.serviceName, let type = record.serviceType {
            return (
                .service(DiscoveredService(name: name, type: type, domain: record.serviceDomain ?? "local")),
                record.checkpoint, record.description
            )
        }
        throw PeerSessionError.invalidResumeData("no host or service to connect to")
    }
}

extension PeerSession {
    /// A transfer task to `hostname`:`port`, suspended.
    public func transferTask(withHostName hostname: String, port: Int, transfer: any PeerTransfer) -> PeerTransferTask {
        register {
            PeerTransferTask(
                session: self, identifier: $0, target: .host(hostname, port), transfer: transfer, checkpoint: nil)
        }
    }

    /// A transfer task to a discovered service, suspended.
    public func transferTask(with service: DiscoveredService, transfer: any PeerTransfer) -> PeerTransferTask {
        register {
            PeerTransferTask(
                session: self, identifier: $0, target: .service(service), transfer: transfer, checkpoint: nil)
        }
    }

    /// A transfer task that resumes from resume data (same destination; the transfer gets the
    /// saved checkpoint), suspended.
    /// - Throws: ``PeerSessionError/invalidResumeData(_:)`` when the data is not resume data.
    public func transferTask(withResumeData resumeData: Data, transfer: any PeerTransfer) throws -> PeerTransferTask {
        let (target, checkpoint, description) = try ResumeRecord.decode(resumeData)
        let task = register {
            PeerTransferTask(session: self, identifier: $0, target: target, transfer: transfer, checkpoint: checkpoint)
        }
        task.taskDescription = description
        return task
    }
}
