import Foundation
import Hummingbird
import Logging
import PeerTransferCore
import Salut
import ServiceLifecycle

/// `serve --web`: a page on this machine (loopback unless said otherwise) that lists the
/// receivers on the link, sends files dropped on it, answers incoming offers, and shows the
/// transfers and this device's name and key. Every request needs the token in the address the
/// daemon prints (see ``WebGuard``); names from the network reach the page as text, never as
/// markup (the script sets `textContent` only).
struct WebPage: Sendable {
    let configuration: PeerConfiguration
    let status: StatusBook
    let questions: WebQuestions
    let receivers: LinkReceivers
    /// Queues one background send of `files` to the receiver `to`; returns the task's id.
    let queue: @Sendable (_ files: [URL], _ to: String) throws -> String
    /// Where files dropped on the page are kept until they are sent (each in a folder of its
    /// own, removed once its send ends).
    let outbox: String
    /// The secret the page's address carries.
    let token: String
    let logger: Logger
    /// The batches (files dropped or chosen together) already queued.
    private let queuedBatches = Locked(Set<String>())
    /// The state as last encoded, and when: every live page reads the same one for a second.
    private let encodedState = Locked<(at: ContinuousClock.Instant, data: Data)?>(nil)
    /// Live pages (event streams) open now; at most ``eventStreamLimit``.
    private let eventStreams = Locked(0)
    static let eventStreamLimit = 16

    init(
        configuration: PeerConfiguration, status: StatusBook, questions: WebQuestions, receivers: LinkReceivers,
        queue: @escaping @Sendable (_ files: [URL], _ to: String) throws -> String, outbox: String, token: String,
        logger: Logger
    ) {
        self.configuration = configuration
        self.status = status
        self.questions = questions
        self.receivers = receivers
        self.queue = queue
        self.outbox = outbox
        self.token = token
        self.logger = logger
    }

    /// A random token: 32 bytes from the system's generator, as hex.
    static func makeToken() -> String {
        var generator = SystemRandomNumberGenerator()
        return (0..<32).map { _ in String(format: "%02x", UInt8.random(in: 0...255, using: &generator)) }.joined()
    }

    /// The server, bound to `host`:`port` (0: one the system picks); `ready` hears the port
    /// it listens on once it does.
    func application(host: String, port: Int, ready: @escaping @Sendable (Int) -> Void) -> some ApplicationProtocol {
        let router = Router()
        let bound = Locked(0)
        router.add(middleware: LateGuard(token: token, host: host, port: { bound.value }))
        router.get("/") { _, _ in html(WebAssets.page(token: token)) }
        router.get("/app.js") { _, _ in asset(WebAssets.script, type: "text/javascript; charset=utf-8") }
        router.get("/style.css") { _, _ in asset(WebAssets.style, type: "text/css; charset=utf-8") }
        router.get("/api/state") { _, _ in json(state()) }
        router.get("/api/events") { _, _ in
            guard let slot = EventStreamSlot(of: eventStreams, limit: Self.eventStreamLimit) else {
                return refusal(.serviceUnavailable, "too many pages are open on this daemon; close some and reload")
            }
            return events(holding: slot)
        }
        router.post("/api/send") { request, context in try await send(request, context: context) }
        router.post("/api/pair") { request, _ in pair(request) }
        router.post("/api/answer") { request, _ in answer(request) }
        // (SO_REUSEADDR, Hummingbird's default: a restart takes the port back at once.)
        let configuration = ApplicationConfiguration(address: .hostname(host, port: port), serverName: nil)
        return Application(
            router: router, configuration: configuration,
            onServerRunning: { channel in
                let port = channel.localAddress?.port ?? 0
                bound.withLock { $0 = port }
                ready(port)
            }, logger: Self.quiet(logger))
    }

    /// Hummingbird's own log lines (one per request at info) kept to warnings and worse.
    private static func quiet(_ logger: Logger) -> Logger {
        var logger = logger
        logger.logLevel = max(logger.logLevel, .warning)
        return logger
    }

    // MARK: What the page reads

    /// Everything the page shows, as one JSON object.
    func state() -> [String: Any] {
        let own = configuration.identity.publicKeySHA256
        let known = (try? KnownPeers.load(from: configuration.knownPeersFile)) ?? KnownPeers()
        let now = Date()
        let receivers: [[String: Any]] = receivers.current.map { receiver in
            // Shown escaped, as on a terminal; `raw` is what the page sends back to name it.
            var object: [String: Any] = ["name": Terminal.escape(receiver.name), "raw": receiver.name]
            if let key = receiver.key {
                object["key"] = key
                object["code"] = VerificationCode.between(own, key)
                switch known.verdict(forReceiver: receiver.name, key: key) {
                case .pinned: object["trust"] = "paired"
                case .keyChanged: object["trust"] = "key-changed"
                case .renamed, .trustedKey, .new: object["trust"] = "new"
                }
            } else {
                object["trust"] = "unknown"
            }
            return object
        }
        let offers: [[String: Any]] = questions.pending.map { pending in
            let entries = pending.offer.manifest.entries
            return [
                "id": pending.id, "introduction": pending.offer.introduction, "key": pending.offer.senderKey,
                "trusted": pending.offer.senderTrusted, "code": pending.offer.code,
                "files": pending.offer.manifest.fileCount, "size": Wording.bytes(pending.offer.manifest.totalBytes),
                "entries": entries.prefix(50).map { Terminal.escape($0.path) + ($0.kind == .directory ? "/" : "") },
                "more": max(0, entries.count - 50),
                "secondsLeft": Int(max(0, pending.deadline.timeIntervalSince(now))),
            ]
        }
        let seconds = now.timeIntervalSince1970
        let transfers: [[String: Any]] = status.current.transfers.reversed().map { transfer in
            var object: [String: Any] = [
                "id": transfer.id, "direction": transfer.direction, "peer": transfer.peer, "files": transfer.files,
                "bytes": transfer.bytes, "done": transfer.bytesReceived, "state": transfer.state,
                "percent": transfer.bytes > 0
                    ? Int(min(100, transfer.bytesReceived * 100 / transfer.bytes))
                    : (transfer.state == "done" ? 100 : 0),
                "line": transfer.shown(now: seconds),
            ]
            if let path = transfer.path { object["path"] = Terminal.escape((path as NSString).lastPathComponent) }
            if let task = transfer.task { object["task"] = task }
            return object
        }
        return [
            "device": ["name": Terminal.escape(configuration.deviceName), "key": own],
            "receivers": receivers, "offers": offers, "transfers": transfers,
        ]
    }

    /// The state as Server-Sent Events: sent at once, then again whenever it changes (looked at
    /// each second), with a comment every 15 s that keeps idle connections open. Ends when the
    /// page goes, or within a second of the daemon's shutdown (the server waits for its
    /// connections to end before it stops).
    private func events(holding slot: EventStreamSlot) -> Response {
        let body = ResponseBody { writer in
            // The slot goes back when the stream ends, or when the body is dropped unwritten.
            withExtendedLifetime(slot) {}
            var last = Data()
            var quiet = 0
            while !Task.isCancelled && !Task.isShuttingDownGracefully {
                let data = sharedState()
                if data != last {
                    var event = ByteBuffer(string: "data: ")
                    event.writeBytes(data)
                    event.writeString("\n\n")
                    try await writer.write(event)
                    last = data
                    quiet = 0
                } else {
                    quiet += 1
                    if quiet >= 15 {
                        try await writer.write(ByteBuffer(string: ": still here\n\n"))
                        quiet = 0
                    }
                }
                try await Task.sleep(for: .seconds(1))
            }
            try await writer.finish(nil)
        }
        return Response(
            status: .ok, headers: [.contentType: "text/event-stream", .cacheControl: "no-store"], body: body)
    }

    /// The state, encoded at most once a second for all the live pages.
    private func sharedState() -> Data {
        let now = ContinuousClock.Instant.now
        if let cached = encodedState.withLock({ $0 }), now - cached.at < .milliseconds(900) { return cached.data }
        let data = Self.encoded(state())
        encodedState.withLock { $0 = (now, data) }
        return data
    }

    // MARK: What the page does

    /// `POST /api/send?to=NAME&file=NAME&batch=ID&count=N` with the file's bytes as the body:
    /// kept in the outbox with the other files of its batch (those dropped or chosen together);
    /// once the batch's `count` files are all there, they are queued as one background send
    /// (one offer, one question at the receiver), which the daemon delivers, resuming and
    /// retrying, as `send --background` would. The receiver must be paired first.
    private func send(_ request: Request, context: some RequestContext) async throws -> Response {
        let query = request.uri.queryParameters
        guard let to = query["to"].map(String.init), !to.isEmpty, let name = query["file"].map(String.init),
            let batch = query["batch"].map(String.init), batch.count == 32, batch.allSatisfy(\.isHexDigit),
            let count = query["count"].flatMap({ Int(String($0)) }), (1...Self.batchLimit).contains(count)
        else {
            return refusal(
                .badRequest, "give the receiver (to), the file's name (file), its batch (32 hex digits) and its count")
        }
        if let problem = PeerNameRule.problem(to, option: "to") { return refusal(.badRequest, problem) }
        guard let path = try? RelativePath(validating: name), path.components.count == 1,
            !name.contains("\u{FFFD}"), name.utf8.count <= TransferLimits.maximumReceivedNameBytes,
            name.trimmingCharacters(in: .whitespaces) == name
        else {
            return refusal(
                .badRequest,
                "\"\(Terminal.escape(name))\" cannot be a file's name here (one name, valid UTF-8, at most \(TransferLimits.maximumReceivedNameBytes) bytes, no spaces at its ends)"
            )
        }
        let known = (try? KnownPeers.load(from: configuration.knownPeersFile)) ?? KnownPeers()
        guard known.pinnedSpelling(of: to).flatMap({ known.pins[$0] }) != nil else {
            return refusal(
                .conflict, "\"\(Terminal.escape(to))\" is not paired: compare its code and pair with it first")
        }
        guard !queuedBatches.withLock({ $0.contains(batch) }) else {
            return refusal(.conflict, "that batch was sent already")
        }
        let folder = (outbox as NSString).appendingPathComponent("web-\(batch)")
        let file = (folder as NSString).appendingPathComponent(path.description)
        // Received beside the batch under a name of its own, and put in the batch only once
        // whole: a batch counts (and is sent with) complete files only.
        let incoming = (outbox as NSString).appendingPathComponent(".incoming-\(UUID().uuidString)")
        defer { unlink(incoming) }
        do {
            try FileManager.default.createDirectory(
                atPath: folder, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
            try await Self.store(
                request.body, expected: request.headers[.contentLength].flatMap { UInt64($0) }, to: incoming,
                folder: outbox)
        } catch {
            return refusal(
                HTTPResponse.Status(code: 507, reasonPhrase: "Insufficient Storage"),
                "the file could not be kept for sending: \(error)")
        }
        // link(2) never replaces: a second file of one name in one batch is refused.
        guard link(incoming, file) == 0 else {
            return refusal(
                .conflict,
                errno == EEXIST
                    ? "two files named \"\(Terminal.escape(name))\" were chosen together: send them apart"
                    : "the file could not be kept for sending: \(String(cString: strerror(errno)))")
        }
        let files = ((try? FileManager.default.contentsOfDirectory(atPath: folder)) ?? []).sorted()
        guard files.count >= count,
            queuedBatches.withLock({ $0.insert(batch).inserted })
        else { return json(["kept": name, "waiting": max(0, count - files.count)]) }
        do {
            let task = try queue(
                files.map { URL(fileURLWithPath: (folder as NSString).appendingPathComponent($0)) }, to)
            logger.info(
                "web page: queued \(Wording.counted(files.count, "file")) for \"\(Terminal.escape(to))\" (task \(task.prefix(8)))"
            )
            return json(["task": task])
        } catch {
            try? FileManager.default.removeItem(atPath: folder)
            return refusal(.internalServerError, "not queued: \(error)")
        }
    }

    /// The most files one batch may hold.
    static let batchLimit = 1_000

    /// Writes `body` to `file` (a new file, 0600), refusing to fill the disk (at most what is
    /// free on `folder`'s file system less a twentieth of it) and a body shorter or longer than
    /// its `expected` length.
    static func store(_ body: RequestBody, expected: UInt64?, to file: String, folder: String) async throws {
        var info = statvfs()
        guard statvfs(folder, &info) == 0 else {
            throw PeerTransferError.runtime("cannot read the free space: \(String(cString: strerror(errno)))")
        }
        let free = UInt64(info.f_bavail) * UInt64(info.f_frsize)
        let allowed =
            free > UInt64(info.f_blocks) * UInt64(info.f_frsize) / 20
            ? free - UInt64(info.f_blocks) * UInt64(info.f_frsize) / 20 : 0
        let fd = open(file, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0o600)
        guard fd >= 0 else {
            throw PeerTransferError.runtime("cannot create \(file): \(String(cString: strerror(errno)))")
        }
        defer { close(fd) }
        var written: UInt64 = 0
        // (The writes are small, one buffer as it arrives; the sync at the end, which may take a
        // while on a slow disk, runs on a thread of its own.)
        for try await buffer in body {
            written += UInt64(buffer.readableBytes)
            guard written <= allowed else { throw PeerTransferError.noSpace("the file is larger than the free space") }
            try buffer.withUnsafeReadableBytes { bytes in
                var offset = 0
                while offset < bytes.count {
                    let count = write(fd, bytes.baseAddress! + offset, bytes.count - offset)
                    if count < 0 && errno == EINTR { continue }
                    guard count > 0 else {
                        throw PeerTransferError.runtime("cannot write \(file): \(String(cString: strerror(errno)))")
                    }
                    offset += count
                }
            }
        }
        if let expected, written != expected {
            throw PeerTransferError.runtime("the upload ended after \(written) of \(expected) bytes")
        }
        let synced = await onThreadOfItsOwn { fsync(fd) == 0 }
        guard synced else { throw PeerTransferError.runtime("cannot sync \(file)") }
    }

    /// `POST /api/pair?name=NAME&key=KEY`: pins the receiver `name` to `key` — the key it
    /// advertises now, whose verification code the page showed the person.
    private func pair(_ request: Request) -> Response {
        guard let name = request.uri.queryParameters["name"].map(String.init),
            let key = request.uri.queryParameters["key"].flatMap({ KeyText.whole(String($0)) })
        else { return refusal(.badRequest, "give the receiver's name and its whole key") }
        if let problem = PeerNameRule.problem(name, option: "name") { return refusal(.badRequest, problem) }
        guard receivers.current.contains(where: { $0.name.utf8.elementsEqual(name.utf8) && $0.key == key }) else {
            return refusal(.conflict, "\"\(Terminal.escape(name))\" does not advertise that key now")
        }
        do {
            try KnownPeers.update(at: configuration.knownPeersFile) { known in
                if let spelled = known.pinnedSpelling(of: name), let pinned = known.pins[spelled], pinned != key {
                    throw PeerTransferError.trust(
                        "\"\(Terminal.escape(spelled))\" is paired with another key: KEY CHANGED, someone may be impersonating it (`peerxfer untrust` it first if the change is expected)"
                    )
                }
                known.pin(name, to: key)
                known.trusted[key] = known.trusted[key] ?? name
            }
        } catch {
            return refusal(.conflict, "\(error)")
        }
        logger.info(
            "web page: paired with \"\(Terminal.escape(name))\" [key \(key.prefix(16))…], both ways: it may deliver here too"
        )
        return json(["paired": name])
    }

    /// `POST /api/answer?offer=ID&answer=yes|no|always`.
    private func answer(_ request: Request) -> Response {
        guard let id = request.uri.queryParameters["offer"].flatMap({ Int(String($0)) }),
            let answer = request.uri.queryParameters["answer"].flatMap({ WebQuestions.Answer(rawValue: String($0)) })
        else { return refusal(.badRequest, "give the offer's id and yes, no or always") }
        guard questions.answer(id, with: answer) else {
            return refusal(.gone, "that offer is no longer waiting (answered, withdrawn, or out of time)")
        }
        return json(["answered": id])
    }

    // MARK: Answers

    private func refusal(_ status: HTTPResponse.Status, _ text: String) -> Response {
        var response = json(["error": text])
        response.status = status
        return response
    }

    private func json(_ object: [String: Any]) -> Response {
        Response(
            status: .ok, headers: [.contentType: "application/json"],
            body: ResponseBody(byteBuffer: ByteBuffer(data: Self.encoded(object))))
    }

    static func encoded(_ object: [String: Any]) -> Data {
        (try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])) ?? Data("{}".utf8)
    }

    private func html(_ text: String) -> Response {
        asset(text, type: "text/html; charset=utf-8")
    }

    private func asset(_ text: String, type: String) -> Response {
        Response(status: .ok, headers: [.contentType: type], body: ResponseBody(byteBuffer: ByteBuffer(string: text)))
    }
}

/// ``WebGuard`` for a server whose port is known only once it listens (port 0 asks the system
/// for one): the hosts it answers to are made from the port on each request.
struct LateGuard<Context: RequestContext>: RouterMiddleware {
    let token: String
    let host: String
    let port: @Sendable () -> Int

    func handle(
        _ request: Request, context: Context, next: (Request, Context) async throws -> Response
    ) async throws -> Response {
        let port = port()
        // The names of the address it is bound to, and only those: a browser elsewhere names
        // the address it reached; `localhost` only where it means this very address.
        let names: [String]
        switch host {
        case "::1": names = ["[::1]", "localhost"]
        case _ where host.hasPrefix("127."): names = [host, "localhost"]
        default: names = [host.contains(":") ? "[\(host)]" : host]
        }
        let guardian = WebGuard<Context>(token: token, hosts: Set(names.map { "\($0):\(port)".lowercased() }))
        return try await guardian.handle(request, context: context, next: next)
    }
}

/// One of the live pages' places (see ``WebPage/eventStreamLimit``), given back when the last
/// reference to it goes: when its stream ends, or when a response that was never written is
/// dropped.
final class EventStreamSlot: Sendable {
    private let count: Locked<Int>

    /// A place, if fewer than `limit` are taken.
    init?(of count: Locked<Int>, limit: Int) {
        guard
            count.withLock({ taken -> Bool in
                guard taken < limit else { return false }
                taken += 1
                return true
            })
        else { return nil }
        self.count = count
    }

    deinit { count.withLock { $0 -= 1 } }
}
