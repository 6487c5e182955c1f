import Foundation
import SalutDiscovery
@testable import SalutSession
import SalutStreams
import SalutTestSupport
import XCTest

/// A toy upload protocol: send the whole body, end the data, and expect the byte count back.
struct CountingUpload: PeerUploadProtocol {
    /// Whether it reports its progress to the session (once, at the end).
    var reportsProgress = true

    func upload(_ body: PeerUploadBody, to service: ResolvedService, context: PeerUploadContext) async throws {
        let bytes: Data
        switch body {
        case .data(let data): bytes = data
        case .file(let url): bytes = try Data(contentsOf: url)
        case .stream(let stream):
            var collected = Data()
            for try await chunk in stream.chunks { collected.append(chunk) }
            bytes = collected
        }
        // Through the context: the session records the connection in the task's metrics.
        let pair = try await context.connect(to: service)
        defer { pair.input.close(); pair.output.close() }
        try await pair.output.write(bytes)
        try await pair.finishSending()
        var answer = Data()
        for try await chunk in pair.input.chunks { answer.append(chunk) }
        guard String(decoding: answer, as: UTF8.self) == "\(bytes.count)" else {
            throw PeerSessionError.transferFailed(
                "the receiver counted \(String(decoding: answer, as: UTF8.self)), not \(bytes.count)")
        }
        if reportsProgress { context.reportProgress(sent: Int64(bytes.count), total: Int64(bytes.count)) }
    }
}

/// An upload protocol that reports half its body sent, then waits until it is stopped.
struct HalfwayUpload: PeerUploadProtocol {
    func upload(_ body: PeerUploadBody, to service: ResolvedService, context: PeerUploadContext) async throws {
        context.reportProgress(sent: 500, total: 1000)
        while !Task.isCancelled { try? await Task.sleep(nanoseconds: 10_000_000) }
        throw CancellationError()
    }
}

/// A published service that counts what each connection sends, after cutting the first
/// `failures` connections as soon as they arrive.
final class CountingReceiver: @unchecked Sendable {
    // @unchecked: `received` and `cutsLeft` are touched only under `lock` (after init); the rest is constant.
    let advertisement: ServiceAdvertisement
    private let lock = StateLock()
    private var received: [Data] = []
    private var cutsLeft: Int

    init(name: String, type: String, failures: Int = 0) async throws {
        cutsLeft = failures
        advertisement = try await ServiceAdvertisement.listen(name: name, type: type, allowRename: false)
        Task { [self] in
            for await connection in advertisement.connections {
                let cut = lock.withLock { () -> Bool in
                    defer { cutsLeft = max(0, cutsLeft - 1) }
                    return cutsLeft > 0
                }
                Task {
                    if cut { return connection.streams.reset(.connectionLost("cut by the test")) }
                    try await connection.streams.open()
                    var data = Data()
                    for try await chunk in connection.input.chunks { data.append(chunk) }
                    self.lock.withLock { self.received.append(data) }
                    try await connection.output.write(Data("\(data.count)".utf8))
                    try await connection.streams.finishSending()
                }
            }
        }
    }

    var deliveries: [Data] { lock.withLock { received } }

    func stop() { advertisement.cancel() }
}

/// Records background-upload delegate calls and answers new-body-stream requests.
final class UploadDelegate: PeerSessionUploadDelegate, @unchecked Sendable {
    // @unchecked: every stored var but `freshBody` (set before the session exists) is touched only under `lock`.
    private let lock = StateLock()
    private var log: [String] = []
    private var waiters: [(String, CheckedContinuation<Void, Never>)] = []
    private var completions: [Int: String] = [:]
    private var collected: [Int: PeerTaskMetrics] = [:]
    /// What to hand out when asked for a fresh stream (nil: none).
    var freshBody: Data?

    var events: [String] { lock.withLock { log } }
    func outcome(of task: PeerSessionTask) -> String? { lock.withLock { completions[task.taskIdentifier] } }
    func metrics(of task: PeerSessionTask) -> PeerTaskMetrics? { lock.withLock { collected[task.taskIdentifier] } }

    private func record(_ event: String) {
        let ready = lock.withLock { () -> [CheckedContinuation<Void, Never>] in
            log.append(event)
            let ready = waiters.filter { event.hasPrefix($0.0) }.map(\.1)
            waiters.removeAll { event.hasPrefix($0.0) }
            return ready
        }
        ready.forEach { $0.resume() }
    }

    func wait(for prefix: String, seconds: Double = 30) async throws {
        try await withDeadline(seconds, "delegate event \(prefix)") {
            await withCheckedContinuation { continuation in
                let done = self.lock.withLock { () -> Bool in
                    if self.log.contains(where: { $0.hasPrefix(prefix) }) { return true }
                    self.waiters.append((prefix, continuation))
                    return false
                }
                if done { continuation.resume() }
            }
        }
    }

    func peerSession(
        _ session: PeerSession, task: PeerUploadTask,
        needNewBodyStream completionHandler: @escaping @Sendable (InputStream?) -> Void
    ) {
        let body = lock.withLock { freshBody }
        record("needNewBodyStream \(task.taskIdentifier)")
        completionHandler(body.map { InputStream(data: $0) })
    }

    func peerSession(_ session: PeerSession, task: PeerUploadTask, isWaiting phase: PeerUploadTask.Phase) {
        record("waiting \(task.taskIdentifier) \(phase)")
    }

    func peerSession(_ session: PeerSession, task: PeerSessionTask, didFinishCollecting metrics: PeerTaskMetrics) {
        lock.withLock { collected[task.taskIdentifier] = metrics }
    }

    func peerSession(_ session: PeerSession, task: PeerSessionTask, didCompleteWithError error: (any Error)?) {
        lock.withLock { completions[task.taskIdentifier] = error.map { "\($0)" } ?? "ok" }
        record("complete \(task.taskIdentifier)")
    }

    func peerSessionDidFinishEvents(forBackgroundSession session: PeerSession) {
        record("finishedEvents")
    }

    func peerSession(_ session: PeerSession, didBecomeInvalidWithError error: (any Error)?) {
        record("invalid")
    }
}

/// Background sessions against the real avahi-daemon: waiting for a service, retrying after a
/// lost connection, fresh body streams, the give-up deadline, and tasks that outlive the
/// session that made them.
final class BackgroundSessionTests: SalutTestCase {
    private var folders: [URL] = []

    override func tearDown() {
        for folder in folders { try? FileManager.default.removeItem(at: folder) }
        super.tearDown()
    }

    private func configuration(_ tweak: (inout PeerSessionConfiguration) -> Void = { _ in }) -> PeerSessionConfiguration
    {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent(
            "salut-bg-\(UUID().uuidString.prefix(8))")
        folders.append(folder)
        var configuration = PeerSessionConfiguration.background(withIdentifier: "test")
        configuration.backgroundStateDirectory = folder
        configuration.uploadProtocol = CountingUpload()
        configuration.retryDelay = 0.05
        tweak(&configuration)
        return configuration
    }

    private func uniqueType() -> String { "_b\(String(UInt32.random(in: 0..<UInt32.max), radix: 36))._tcp" }

    private static func recordCount(_ configuration: PeerSessionConfiguration) -> Int {
        let tasks = configuration.backgroundStateDirectory!.appendingPathComponent("tasks")
        return ((try? FileManager.default.contentsOfDirectory(atPath: tasks.path)) ?? []).filter {
            $0.hasSuffix(".json")
        }.count
    }

    func testAnUploadWaitsForItsServiceThenDeliversAndForgetsItsRecord() async throws {
        let type = uniqueType()
        let delegate = UploadDelegate()
        let configuration = configuration()
        let session = PeerSession(configuration: configuration, delegate: delegate)
        defer { session.invalidateAndCancel() }
        XCTAssertTrue(session.runsBackgroundTasks)
        let body = Data("background bytes".utf8)
        let task = session.uploadTask(to: DiscoveredService(name: "Later", type: type), from: body)
        task.resume()
        try await delegate.wait(for: "waiting \(task.taskIdentifier) waiting for the service")
        XCTAssertEqual(task.phase, .waitingForService)
        XCTAssertEqual(Self.recordCount(configuration), 1, "the waiting task is on disk")
        XCTAssertEqual(session.allTasks.map(\.taskIdentifier), [task.taskIdentifier])

        let receiver = try await CountingReceiver(name: "Later", type: type)
        defer { receiver.stop() }
        try await delegate.wait(for: "complete \(task.taskIdentifier)")
        XCTAssertEqual(delegate.outcome(of: task), "ok")
        XCTAssertEqual(receiver.deliveries, [body])
        // One transaction for the one connection, measured by the session around the protocol.
        let transactions = try XCTUnwrap(delegate.metrics(of: task)).transactionMetrics
        XCTAssertEqual(transactions.count, 1, "\(transactions)")
        XCTAssertNotNil(transactions.first?.connectEndDate)
        XCTAssertEqual(transactions.first?.remotePort, Int(receiver.advertisement.listener?.port ?? 0))
        XCTAssertNotNil(transactions.first?.remoteAddress)
        XCTAssertEqual(transactions.first?.countOfRequestBodyBytesSent, Int64(body.count))
        XCTAssertEqual(
            transactions.first?.countOfResponseBodyBytesReceived, Int64("\(body.count)".utf8.count),
            "the receiver's answer, counted on the connection")
        XCTAssertEqual(task.countOfBytesSent, Int64(body.count))
        let metrics = try XCTUnwrap(delegate.metrics(of: task))
        XCTAssertEqual(metrics.attempts, 1)
        XCTAssertEqual(metrics.waits.first?.reason, .serviceNotVisible)
        XCTAssertNotNil(metrics.waits.first?.end, "the wait ended when the service appeared")
        try await eventually("the record is removed once delivered", timeout: 5) {
            Self.recordCount(configuration) == 0
        }
    }

    /// The transaction's bytes are what the connection carried, counted by the session: a
    /// protocol that reports no progress still gets them.
    func testATransactionCountsTheConnectionsBytesWhateverTheProtocolReports() async throws {
        let type = uniqueType()
        let receiver = try await CountingReceiver(name: "Quiet", type: type)
        defer { receiver.stop() }
        let delegate = UploadDelegate()
        let session = PeerSession(
            configuration: configuration { $0.uploadProtocol = CountingUpload(reportsProgress: false) },
            delegate: delegate)
        defer { session.invalidateAndCancel() }
        let body = Data(repeating: 3, count: 300_000)
        let task = session.uploadTask(to: DiscoveredService(name: "Quiet", type: type), from: body)
        task.resume()
        try await delegate.wait(for: "complete \(task.taskIdentifier)")
        XCTAssertEqual(delegate.outcome(of: task), "ok")
        XCTAssertEqual(task.countOfBytesSent, 0, "the protocol reported nothing")
        let transaction = try XCTUnwrap(delegate.metrics(of: task)?.transactionMetrics.first)
        XCTAssertEqual(transaction.countOfRequestBodyBytesSent, 300_000)
        XCTAssertEqual(transaction.countOfResponseBodyBytesReceived, 6, "\"300000\"")
    }

    func testALostConnectionIsRetriedWithAFreshBodyStream() async throws {
        let type = uniqueType()
        let receiver = try await CountingReceiver(name: "Flaky", type: type, failures: 1)
        defer { receiver.stop() }
        let delegate = UploadDelegate()
        let body = Data(repeating: 7, count: 100_000)
        delegate.freshBody = body
        let session = PeerSession(configuration: configuration(), delegate: delegate)
        defer { session.invalidateAndCancel() }
        let task = session.uploadTask(
            to: DiscoveredService(name: "Flaky", type: type), fromStream: InputStream(data: body))
        task.resume()
        try await delegate.wait(for: "complete \(task.taskIdentifier)")
        XCTAssertEqual(delegate.outcome(of: task), "ok")
        XCTAssertEqual(task.attempts, 2)
        XCTAssertEqual(delegate.events.filter { $0.hasPrefix("needNewBodyStream") }.count, 1)
        XCTAssertEqual(receiver.deliveries, [body])
        XCTAssertEqual(delegate.metrics(of: task)?.waits.map(\.reason), [.retryDelay])
        // A transaction per connection: the one cut, then the one that delivered.
        let transactions = delegate.metrics(of: task)?.transactionMetrics ?? []
        XCTAssertEqual(transactions.count, 2, "\(transactions)")
        XCTAssertEqual(transactions.last?.countOfRequestBodyBytesSent, Int64(body.count))
        XCTAssertEqual(transactions.first?.countOfResponseBodyBytesReceived, 0, "the cut connection answered nothing")
    }

    func testAServiceThatDisappearsAndComesBackGetsTheUploadOnTheNextAttempt() async throws {
        let type = uniqueType()
        let broken = try await CountingReceiver(name: "Comes Back", type: type, failures: 1000)
        let delegate = UploadDelegate()
        let session = PeerSession(configuration: configuration { $0.retryDelay = 0.5 }, delegate: delegate)
        defer { session.invalidateAndCancel() }
        let body = Data("second time lucky".utf8)
        let task = session.uploadTask(to: DiscoveredService(name: "Comes Back", type: type), from: body)
        task.resume()
        // The first attempt's connection is cut; the service then goes away altogether.
        try await delegate.wait(for: "waiting \(task.taskIdentifier) waiting to retry")
        await broken.advertisement.withdraw()
        try await delegate.wait(for: "waiting \(task.taskIdentifier) waiting for the service")
        XCTAssertEqual(task.phase, .waitingForService)
        let back = try await CountingReceiver(name: "Comes Back", type: type)
        defer { back.stop() }
        try await delegate.wait(for: "complete \(task.taskIdentifier)")
        XCTAssertEqual(delegate.outcome(of: task), "ok")
        XCTAssertEqual(back.deliveries, [body])
        let metrics = try XCTUnwrap(delegate.metrics(of: task))
        XCTAssertGreaterThanOrEqual(metrics.attempts, 2)
        XCTAssertEqual(Set(metrics.waits.map(\.reason)), [.retryDelay, .serviceNotVisible])
        XCTAssertTrue(metrics.waits.allSatisfy { $0.end != nil })
    }

    func testWithoutAFreshBodyStreamTheTaskFailsSayingSo() async throws {
        let type = uniqueType()
        let receiver = try await CountingReceiver(name: "Cut", type: type, failures: 1)
        defer { receiver.stop() }
        let delegate = UploadDelegate()
        let session = PeerSession(configuration: configuration(), delegate: delegate)
        defer { session.invalidateAndCancel() }
        let task = session.uploadTask(
            to: DiscoveredService(name: "Cut", type: type), fromStream: InputStream(data: Data("x".utf8)))
        task.resume()
        try await delegate.wait(for: "complete \(task.taskIdentifier)")
        XCTAssertTrue(
            delegate.outcome(of: task)?.contains("no new body stream") == true,
            "\(String(describing: delegate.outcome(of: task)))")
    }

    func testRetriesRunOutAndTheErrorNamesTheLastFailure() async throws {
        let type = uniqueType()
        let receiver = try await CountingReceiver(name: "Broken", type: type, failures: 1000)
        defer { receiver.stop() }
        let delegate = UploadDelegate()
        let session = PeerSession(configuration: configuration { $0.maximumAttempts = 3 }, delegate: delegate)
        defer { session.invalidateAndCancel() }
        let task = session.uploadTask(to: DiscoveredService(name: "Broken", type: type), from: Data("x".utf8))
        task.resume()
        try await delegate.wait(for: "complete \(task.taskIdentifier)")
        let outcome = delegate.outcome(of: task) ?? ""
        XCTAssertTrue(outcome.contains("gave up after 3 attempts"), outcome)
        XCTAssertEqual(delegate.metrics(of: task)?.attempts, 3)
    }

    func testTheGiveUpDeadlineEndsAWaitForAServiceThatNeverComes() async throws {
        let delegate = UploadDelegate()
        let session = PeerSession(
            configuration: configuration { $0.timeoutIntervalForResource = 1 }, delegate: delegate)
        defer { session.invalidateAndCancel() }
        let task = session.uploadTask(to: DiscoveredService(name: "Never", type: uniqueType()), from: Data("x".utf8))
        task.resume()
        try await delegate.wait(for: "complete \(task.taskIdentifier)", seconds: 20)
        XCTAssertEqual(delegate.outcome(of: task), PeerSessionError.timedOut("resource").description)
    }

    func testQueuedTasksAreRunByTheRunnerAndMissedEventsAreDeliveredFirst() async throws {
        let type = uniqueType()
        let configuration = configuration()
        // Another process queues a task (this session does not run tasks).
        var queuing = configuration
        queuing.runsBackgroundTasks = false
        let client = PeerSession(configuration: queuing)
        XCTAssertFalse(client.runsBackgroundTasks)
        let queued = client.uploadTask(to: DiscoveredService(name: "Queued", type: type), from: Data("queued".utf8))
        queued.taskDescription = "queued by another process"
        queued.resume()
        XCTAssertEqual(queued.phase, .queuedWithRunner)
        XCTAssertEqual(queued.state, .completed, "handed over: this process's part is done")
        XCTAssertEqual(queued.error as? PeerSessionError, .queuedWithRunner, "queued, not claimed delivered")
        XCTAssertTrue(queued.isQueuedElsewhere)
        client.finishTasksAndInvalidate()
        // And a runner that died just after a task completed, before its delegate heard of it.
        var finished = BackgroundTaskRecord.fresh(
            service: DiscoveredService(name: "Done", type: type), kind: .data, filePath: nil,
            identifier: 41, deadline: Date().addingTimeInterval(60))
        finished.outcome = .succeeded
        try BackgroundJournal(directory: configuration.backgroundStateDirectory!).save(finished)

        let receiver = try await CountingReceiver(name: "Queued", type: type)
        defer { receiver.stop() }
        let delegate = UploadDelegate()
        let runner = PeerSession(configuration: configuration, delegate: delegate)
        defer { runner.invalidateAndCancel() }
        XCTAssertTrue(runner.runsBackgroundTasks)
        let adopted = runner.allTasks.compactMap { $0 as? PeerUploadTask }
        XCTAssertEqual(
            adopted.map(\.taskDescription), ["queued by another process"], "the runner lists the queued task")
        try await delegate.wait(for: "finishedEvents")
        let beforeFinish = delegate.events.prefix { $0 != "finishedEvents" }
        XCTAssertTrue(beforeFinish.contains("complete 41"), "the missed completion comes first: \(delegate.events)")
        try await delegate.wait(for: "complete \(adopted[0].taskIdentifier)")
        XCTAssertEqual(delegate.outcome(of: adopted[0]), "ok")
        XCTAssertEqual(receiver.deliveries, [Data("queued".utf8)])
    }

    func testAProcessThatOnlyQueuesListsWhatTheRunnerHasPending() async throws {
        let (runner, _, task, viewer) = try await runnerWaitingAndAViewer(description: "waiting one")
        defer { runner.invalidateAndCancel(); viewer.finishTasksAndInvalidate() }
        let views = viewer.allTasks.compactMap { $0 as? PeerUploadTask }
        XCTAssertEqual(views.map(\.taskDescription), ["waiting one"])
        XCTAssertEqual(views.first?.phase, .queuedWithRunner)
        XCTAssertEqual(views.first?.isQueuedElsewhere, true)
        // A task this process makes does not take the view's identifier.
        let mine = viewer.uploadTask(to: DiscoveredService(name: "Other", type: uniqueType()), from: Data("y".utf8))
        XCTAssertNotEqual(mine.taskIdentifier, views.first?.taskIdentifier)
        XCTAssertNotEqual(mine.taskIdentifier, task.taskIdentifier)
        mine.cancel()
        XCTAssertEqual(views.first?.recordedPhase, "waiting for the service")
        XCTAssertEqual(views.first?.persistentIdentifier, task.persistentIdentifier)
    }

    func testCancellingAViewInAProcessThatOnlyQueuesCancelsTheRunnersTask() async throws {
        let (runner, delegate, task, viewer) = try await runnerWaitingAndAViewer(description: nil)
        defer { runner.invalidateAndCancel(); viewer.finishTasksAndInvalidate() }
        let configuration = runner.configuration
        let view = try XCTUnwrap(viewer.allTasks.compactMap { $0 as? PeerUploadTask }.first)
        view.cancel()
        // The runner hears of it through its folder watcher and cancels the real task.
        try await delegate.wait(for: "complete \(task.taskIdentifier)")
        XCTAssertEqual(delegate.outcome(of: task), "\(PeerSessionError.cancelled)")
        XCTAssertEqual(task.state, .completed)
        let journal = try BackgroundJournal(directory: configuration.backgroundStateDirectory!)
        XCTAssertTrue(journal.records().allSatisfy { $0.outcome != .pending }, "nothing is left pending")
        XCTAssertEqual(journal.cancelRequests(), [], "the request is consumed")
    }

    func testARunnerThatStopsLeavesItsTasksQueuedForTheNextOne() async throws {
        let configuration = configuration()
        let delegate = UploadDelegate()
        let runner = PeerSession(configuration: configuration, delegate: delegate)
        let task = runner.uploadTask(to: DiscoveredService(name: "Later", type: uniqueType()), from: Data("kept".utf8))
        task.taskDescription = "kept across a stop"
        task.resume()
        try await delegate.wait(for: "waiting \(task.taskIdentifier)")
        // A daemon told to stop (SIGTERM): not a cancel.
        runner.invalidateLeavingBackgroundTasks()
        try await delegate.wait(for: "complete \(task.taskIdentifier)")
        XCTAssertEqual(delegate.outcome(of: task), "\(PeerSessionError.sessionInvalidated)")
        let journal = try BackgroundJournal(directory: configuration.backgroundStateDirectory!)
        XCTAssertEqual(journal.records().map(\.outcome), [.pending], "the record stays queued")
        // The next runner adopts it.
        let next = PeerSession(configuration: configuration, delegate: UploadDelegate())
        defer { next.invalidateAndCancel() }
        XCTAssertEqual(next.allTasks.compactMap { ($0 as? PeerUploadTask)?.taskDescription }, ["kept across a stop"])
    }

    /// URLSession's order after a relaunch: the completion no delegate heard (a task that
    /// finished in a runner with no delegate), then the task carried on once it ends, then
    /// did-finish-events; a session with nothing pending never calls it.
    func testAfterARelaunchDidFinishEventsComesAfterEveryPendingEventAndOnlyThen() async throws {
        let type = uniqueType()
        let configuration = configuration()
        let receiver = try await CountingReceiver(name: "Heard Later", type: type)
        var doneIdentifier = 0
        do {
            // A runner with no delegate: its task delivers, and nobody hears of it.
            let deaf = PeerSession(configuration: configuration)
            let done = deaf.uploadTask(to: DiscoveredService(name: "Heard Later", type: type), from: Data("early".utf8))
            doneIdentifier = done.taskIdentifier
            let carried = deaf.uploadTask(
                to: DiscoveredService(name: "Comes Later", type: type), from: Data("carried".utf8))
            done.resume()
            carried.resume()
            try await eventually("the first task delivered", timeout: 20, interval: 0.02) { done.state == .completed }
            XCTAssertNil(done.error)
            deaf.invalidateLeavingBackgroundTasks()
            try await eventually("the runner stops", interval: 0.02) { carried.state == .completed }
        }
        receiver.stop()
        let journal = try BackgroundJournal(directory: configuration.backgroundStateDirectory!)
        XCTAssertEqual(
            Set(journal.records().map(\.outcome)), [.succeeded, .pending],
            "the outcome nobody heard is kept for the next launch")

        // The relaunch, with a delegate.
        let delegate = UploadDelegate()
        let relaunched = try await nextRunner(configuration, delegate: delegate)
        defer { relaunched.invalidateAndCancel() }
        XCTAssertTrue(relaunched.deliversRelaunchEvents, "the app knows to wait for did-finish-events")
        try await delegate.wait(for: "complete \(doneIdentifier)")
        let carried = try XCTUnwrap(
            relaunched.allTasks.compactMap { $0 as? PeerUploadTask }.first { $0.service.name == "Comes Later" })
        try await delegate.wait(for: "waiting \(carried.taskIdentifier)")
        XCTAssertFalse(
            delegate.events.contains("finishedEvents"), "the carried-on task is not done: \(delegate.events)")
        let later = try await CountingReceiver(name: "Comes Later", type: type)
        defer { later.stop() }
        try await delegate.wait(for: "finishedEvents")
        let order = delegate.events.filter { $0.hasPrefix("complete") || $0 == "finishedEvents" }
        XCTAssertEqual(
            order, ["complete \(doneIdentifier)", "complete \(carried.taskIdentifier)", "finishedEvents"],
            "\(delegate.events)")
        XCTAssertEqual(delegate.outcome(of: carried), "ok")
        try await eventually("every record served its purpose", interval: 0.02) { journal.records().isEmpty }

        // Nothing pending: no did-finish-events (the invalidation, delivered after anything the
        // session queued at its start, comes alone).
        let quiet = UploadDelegate()
        let empty = PeerSession(configuration: self.configuration(), delegate: quiet)
        XCTAssertFalse(empty.deliversRelaunchEvents)
        empty.finishTasksAndInvalidate()
        try await quiet.wait(for: "invalid")
        XCTAssertEqual(quiet.events, ["invalid"])
    }

    /// A file that cannot be read fails at once, saying why (no attempts, no waiting), and a
    /// state folder that cannot be used says which and why.
    func testAFileThatCannotBeReadAndAStateFolderThatCannotBeUsedFailAtOnceSayingWhy() async throws {
        let delegate = UploadDelegate()
        let session = PeerSession(configuration: configuration(), delegate: delegate)
        defer { session.invalidateAndCancel() }
        let missing = session.uploadTask(
            to: DiscoveredService(name: "Anyone", type: uniqueType()),
            fromFile: URL(fileURLWithPath: "/nonexistent/salut-\(UUID().uuidString)"))
        missing.resume()
        try await delegate.wait(for: "complete \(missing.taskIdentifier)", seconds: 5)
        XCTAssertTrue(
            delegate.outcome(of: missing)?.contains("No such file or directory") == true, delegate.events.description)
        XCTAssertEqual(missing.attempts, 0)

        var unusable = PeerSessionConfiguration.background(withIdentifier: "test")
        unusable.backgroundStateDirectory = URL(fileURLWithPath: "/proc/salut-cannot-be-here")
        let broken = PeerSession(configuration: unusable)
        defer { broken.invalidateAndCancel() }
        let task = broken.uploadTask(to: DiscoveredService(name: "Anyone", type: uniqueType()), from: Data("x".utf8))
        XCTAssertTrue(
            "\(task.error.map { "\($0)" } ?? "")".contains("/proc/salut-cannot-be-here"),
            "\(String(describing: task.error))")
    }

    /// A relaunched task starts from the bytes its record says were sent (written while it
    /// transferred), and its metrics' interval starts at its first resume, in the earlier
    /// process.
    func testARelaunchedTaskKeepsItsCountOfBytesSentAndItsFirstResume() async throws {
        let type = uniqueType()
        let receiver = try await CountingReceiver(name: "Relaunched", type: type)
        defer { receiver.stop() }
        let stalling = configuration { $0.uploadProtocol = HalfwayUpload() }
        let resumed = Date()
        do {
            let first = PeerSession(configuration: stalling, delegate: UploadDelegate())
            let body = Data(repeating: 7, count: 1000)
            let task = first.uploadTask(to: DiscoveredService(name: "Relaunched", type: type), from: body)
            task.resume()
            // Half the body reported sent: the record says so while the attempt still runs.
            let journal = try BackgroundJournal(directory: stalling.backgroundStateDirectory!)
            try await eventually("the record's count of bytes sent", interval: 0.02) {
                journal.records().first?.bytesSent == 500
            }
            XCTAssertEqual(task.state, .running)
            first.invalidateLeavingBackgroundTasks()
            try await eventually("the first runner stops", interval: 0.02) { task.state == .completed }
        }
        // The first runner is gone (as its process would be): the next session runs the task.
        let relaunch = { () -> PeerSessionConfiguration in
            var relaunch = stalling
            relaunch.uploadProtocol = CountingUpload()
            return relaunch
        }()
        let delegate = UploadDelegate()
        let relaunched = Date()
        let next = try await nextRunner(relaunch, delegate: delegate)
        defer { next.invalidateAndCancel() }
        let adopted = try XCTUnwrap(next.allTasks.compactMap { $0 as? PeerUploadTask }.first)
        XCTAssertGreaterThanOrEqual(adopted.countOfBytesSent, 500, "from the record, not from 0")
        do {
            try await delegate.wait(for: "complete \(adopted.taskIdentifier)", seconds: 15)
        } catch {
            XCTFail("\(delegate.events); \(adopted.phase); \(adopted.recordedError ?? "-"); \(adopted.state)")
            throw error
        }
        XCTAssertEqual(delegate.outcome(of: adopted), "ok")
        let metrics = try XCTUnwrap(delegate.metrics(of: adopted))
        XCTAssertLessThan(metrics.taskInterval.start, relaunched, "from the first resume, in the first process")
        XCTAssertGreaterThanOrEqual(metrics.taskInterval.start, resumed.addingTimeInterval(-1))
        XCTAssertEqual(metrics.attempts, 2, "the first process's attempt counts")
    }

    /// The session that runs `configuration`'s tasks once the runner before it has let go of
    /// its lock (as its process would, ending), within 10 s.
    private func nextRunner(
        _ configuration: PeerSessionConfiguration, delegate: UploadDelegate
    ) async throws -> PeerSession {
        try await withDeadline(10, "the runner's lock let go") { () -> PeerSession in
            while true {
                let candidate = PeerSession(configuration: configuration, delegate: delegate)
                if candidate.runsBackgroundTasks { return candidate }
                candidate.invalidateAndCancel()
                try await Task.sleep(nanoseconds: 50_000_000)
            }
        }
    }

    /// A runner whose one upload task waits for a service that is not there, and a session on
    /// the same state folder in a process-like role that only queues (it sees views).
    private func runnerWaitingAndAViewer(
        description: String?
    ) async throws
        -> (runner: PeerSession, delegate: UploadDelegate, task: PeerUploadTask, viewer: PeerSession)
    {
        let configuration = configuration()
        let delegate = UploadDelegate()
        let runner = PeerSession(configuration: configuration, delegate: delegate)
        let task = runner.uploadTask(to: DiscoveredService(name: "Absent", type: uniqueType()), from: Data("x".utf8))
        task.taskDescription = description
        task.resume()
        try await delegate.wait(for: "waiting \(task.taskIdentifier)")
        var viewing = configuration
        viewing.runsBackgroundTasks = false
        return (runner, delegate, task, PeerSession(configuration: viewing))
    }

    func testUploadTasksOnAnOrdinarySessionFailClearly() async throws {
        let delegate = UploadDelegate()
        let session = PeerSession(configuration: .ephemeral, delegate: delegate)
        defer { session.invalidateAndCancel() }
        let task = session.uploadTask(to: DiscoveredService(name: "x", type: "_xy._tcp"), from: Data())
        try await delegate.wait(for: "complete \(task.taskIdentifier)")
        XCTAssertTrue(delegate.outcome(of: task)?.contains("background session") == true)
    }
}
