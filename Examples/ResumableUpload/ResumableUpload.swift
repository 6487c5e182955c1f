// A resumable background upload, end to end: the sender queues a file for a receiver found
// by name, keeps the task across a crash of its own process, and the receiver keeps what it
// got, so that a relaunched sender sends only the rest. What a URLSession background upload
// does on Apple's systems, on a LAN, with Salut's PeerSession.
//
//   resumable-upload receive NAME FOLDER          serve as NAME, storing uploads in FOLDER
//   resumable-upload send NAME FILE STATE         queue FILE for NAME, then deliver it
//   resumable-upload send NAME - STATE            (relaunch) carry on with what STATE holds
//
// The wire protocol (one connection per attempt):
//   sender   → "UPLOAD <id> <size>\n"   (id: the task's persistent identifier, 36 characters)
//   receiver → 8 bytes, big-endian: how many bytes of it the receiver already holds
//   sender   → the rest of the file, from there
//   receiver → "DONE\n" once it holds all `size` bytes (written and synced)
//
// Plain TCP, to keep the example short: anyone on the link could send such a receiver files.
// A real app runs TLS with keys it trusts (`context.connect(to: service, tls: …)` on the
// sender, `ServiceAdvertisement.listen(…, tls: …)` on the receiver) and bounds what it takes.
import Foundation
import Salut

/// The service type both ends use.
let serviceType = "_resumable._tcp"

/// Writes `line` to the standard output at once (a test or a pipe reads it as it comes).
func sayLine(_ line: String) {
    FileHandle.standardOutput.write(Data((line + "\n").utf8))
}

/// The sender's side of the protocol, as the session runs it for each attempt.
struct ResumableUpload: PeerUploadProtocol {
    /// Bytes per second at most (0: as fast as it goes); a slow pace lets a demo or a test
    /// stop the sender halfway.
    let pace: Int

    func upload(_ body: PeerUploadBody, to service: ResolvedService, context: PeerUploadContext) async throws {
        guard case .file(let url) = body else { throw PeerSessionError.transferFailed("this protocol sends files") }
        let file = try FileHandle(forReadingFrom: url)
        defer { try? file.close() }
        let size = try file.seekToEnd()
        // Through the context: the session records the connection in the task's metrics.
        let pair = try await context.connect(to: service)
        defer { pair.input.close(); pair.output.close() }
        try await pair.output.write(Data("UPLOAD \(context.persistentIdentifier) \(size)\n".utf8))
        let held = try await Self.readExactly(8, from: pair.input)
        let offset = held.reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
        guard offset <= size else { throw PeerSessionError.transferFailed("the receiver holds more than the file") }
        try file.seek(toOffset: offset)
        var sent = offset
        context.reportProgress(sent: Int64(sent), total: Int64(size))
        while sent < size {
            let chunk = try file.read(upToCount: 64 * 1024) ?? Data()
            guard !chunk.isEmpty else { throw PeerSessionError.transferFailed("the file got shorter") }
            try await pair.output.write(chunk)
            sent += UInt64(chunk.count)
            context.reportProgress(sent: Int64(sent), total: Int64(size))
            if pace > 0 { try await Task.sleep(for: .seconds(Double(chunk.count) / Double(pace))) }
        }
        let done = try await Self.readExactly(5, from: pair.input)
        guard done == Data("DONE\n".utf8) else { throw PeerSessionError.transferFailed("no DONE from the receiver") }
    }

    /// Exactly `count` bytes from `input`.
    /// - Throws: ``PeerSessionError`` when the stream ends first; the stream's error.
    static func readExactly(_ count: Int, from input: InputStream) async throws -> Data {
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: count, alignment: 1)
        defer { buffer.deallocate() }
        // At least `count` into a buffer of `count`: exactly `count`, nothing past them read.
        let read = try await input.read(into: buffer, atLeast: count)
        guard read == count else { throw PeerSessionError.transferFailed("the peer ended the connection early") }
        return Data(buffer)
    }
}

/// Prints each delegate call on a line of its own, in the order the session makes them, and
/// tells `send` when the tasks it waits for are done.
final class Events: PeerSessionUploadDelegate, Sendable {
    /// What `send` waits for: these tasks' completions and, after a relaunch with events
    /// pending, did-finish-events.
    private struct Waiting {
        /// Set once `send` said what it waits for: nothing is decided before.
        var armed = false
        var awaited: Set<Int> = []
        var completed: Set<Int> = []
        var failed = 0
        var waitsForRelaunchEvents = false
        var heardRelaunchEvents = false
        var told = false
    }
    private let waiting = Locked(Waiting())
    let (done, signal) = AsyncStream<Int>.makeStream()

    /// Waits for `tasks` too, and for did-finish-events when `relaunchEvents`.
    func await(tasks: [Int], relaunchEvents: Bool) {
        waiting.withLock {
            $0.awaited.formUnion(tasks)
            $0.waitsForRelaunchEvents = relaunchEvents
            $0.armed = true
        }
        signalIfDone()
    }

    /// Once every awaited task completed and no did-finish-events is due: the number of
    /// uploads that failed, to `done`.
    private func signalIfDone() {
        let failed = waiting.withLock { state -> Int? in
            guard state.armed, !state.told, state.awaited.isSubset(of: state.completed),
                !state.waitsForRelaunchEvents || state.heardRelaunchEvents
            else { return nil }
            state.told = true
            return state.failed
        }
        if let failed { signal.yield(failed) }
    }

    func peerSession(_ session: PeerSession, task: PeerUploadTask, isWaiting phase: PeerUploadTask.Phase) {
        sayLine("waiting: \(task.taskDescription ?? "?"): \(phase)")
    }

    func peerSession(_ session: PeerSession, task: PeerSessionTask, didFinishCollecting metrics: PeerTaskMetrics) {
        let connections = metrics.transactionMetrics.map { "\($0.countOfRequestBodyBytesSent)" }
        sayLine(
            "metrics: \(metrics.attempts) attempt(s); bytes sent by each connection of this process: \(connections.joined(separator: ", "))"
        )
    }

    func peerSession(_ session: PeerSession, task: PeerSessionTask, didCompleteWithError error: (any Error)?) {
        sayLine("complete: \(task.taskDescription ?? "?"): \(error.map { "\($0)" } ?? "delivered")")
        waiting.withLock {
            $0.completed.insert(task.taskIdentifier)
            if error != nil { $0.failed += 1 }
        }
        signalIfDone()
    }

    func peerSessionDidFinishEvents(forBackgroundSession session: PeerSession) {
        sayLine("finished events")
        waiting.withLock { $0.heardRelaunchEvents = true }
        signalIfDone()
    }
}

@main
enum ResumableUploadTool {
    static func main() async {
        let arguments = Array(CommandLine.arguments.dropFirst())
        switch arguments.first {
        case "receive" where arguments.count == 3:
            await receive(as: arguments[1], into: arguments[2])
        case "send" where arguments.count == 4:
            await send(to: arguments[1], file: arguments[2] == "-" ? nil : arguments[2], state: arguments[3])
        default:
            let said =
                arguments.first.map {
                    "resumable-upload: \"\($0)\" with \(arguments.count - 1) argument(s) is not a command it takes\n"
                } ?? ""
            FileHandle.standardError.write(
                Data(
                    """
                    \(said)usage: resumable-upload receive NAME FOLDER
                           resumable-upload send NAME FILE STATE   (FILE "-": carry on with what STATE holds; NAME is then not used)
                    environment: RESUMABLE_PACE=BYTES_PER_SECOND slows the sender down

                    """.utf8))
            exit(2)
        }
    }

    /// Queues `file` (unless nil) in the background session kept in `state`, and waits until
    /// it and the tasks carried on from an earlier launch are done; exit 1 when one failed.
    static func send(to name: String, file: String?, state: String) async {
        var configuration = PeerSessionConfiguration.background(withIdentifier: "resumable-upload")
        configuration.backgroundStateDirectory = URL(fileURLWithPath: state)
        configuration.uploadProtocol = ResumableUpload(
            pace: Int(ProcessInfo.processInfo.environment["RESUMABLE_PACE"] ?? "") ?? 0)
        configuration.retryDelay = 0.2
        let events = Events()
        let session = PeerSession(configuration: configuration, delegate: events)
        // Right after the session is made: the tasks it carries on from an earlier launch, and
        // whether did-finish-events will come.
        let carried = session.allTasks.compactMap { $0 as? PeerUploadTask }.filter { !$0.isQueuedElsewhere }
        let relaunchEvents = session.deliversRelaunchEvents
        if !carried.isEmpty || relaunchEvents {
            sayLine("relaunched: \(carried.count) task(s) carried on")
        }
        var mine = carried.map(\.taskIdentifier)
        if let file {
            let task = session.uploadTask(
                to: DiscoveredService(name: name, type: serviceType), fromFile: URL(fileURLWithPath: file))
            task.taskDescription = file
            task.resume()
            if task.isQueuedElsewhere {
                // Another sender runs this state folder's tasks: it delivers this one.
                sayLine("queued: \(file) for \"\(name)\", handed to the sender already running on \(state)")
                exit(0)
            }
            // (A file that cannot be read has failed already: its completion said why.)
            if task.error == nil { sayLine("queued: \(file) for \"\(name)\" (task \(task.persistentIdentifier))") }
            mine.append(task.taskIdentifier)
        } else if !session.runsBackgroundTasks {
            sayLine("another sender runs the tasks of \(state): it delivers them")
            exit(0)
        } else if mine.isEmpty && !relaunchEvents {
            sayLine("nothing to send")
            exit(0)
        }
        events.await(tasks: mine, relaunchEvents: relaunchEvents)
        var failed = 0
        for await count in events.done {
            failed = count
            break
        }
        session.finishTasksAndInvalidate()
        exit(failed > 0 ? 1 : 0)
    }

    /// Serves as `name` until killed: each upload is kept in `folder` as it arrives
    /// (`ID.part`), and named `ID` once whole.
    static func receive(as name: String, into folder: String) async {
        do {
            try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
            let advertisement = try await ServiceAdvertisement.listen(name: name, type: serviceType, allowRename: false)
            sayLine("receiving as \"\(advertisement.name)\" on port \(advertisement.listener?.port ?? 0)")
            for await connection in advertisement.connections {
                Task { await serve(connection.streams, folder: folder) }
            }
        } catch {
            FileHandle.standardError.write(Data("resumable-upload: \(error)\n".utf8))
            exit(1)
        }
    }

    /// One attempt of one upload: the header, what is held, the rest, DONE. An upload that is
    /// whole already (its DONE was lost) is answered with its size and DONE at once.
    static func serve(_ pair: BoundStreamPair, folder: String) async {
        defer { pair.input.close(); pair.output.close() }
        do {
            try await pair.open()
            // The header, a byte at a time (it is short; nothing past it is read here).
            var header = Data()
            let byte = UnsafeMutableRawBufferPointer.allocate(byteCount: 1, alignment: 1)
            defer { byte.deallocate() }
            while header.count < 100 {
                guard try await pair.input.read(into: byte, atLeast: 1) == 1 else { return }
                if byte[0] == UInt8(ascii: "\n") { break }
                header.append(byte[0])
            }
            let words = String(decoding: header, as: UTF8.self).split(separator: " ")
            guard words.count == 3, words[0] == "UPLOAD", words[1].count == 36,
                words[1].allSatisfy({ $0.isASCII && ($0.isHexDigit || $0 == "-") }), let size = UInt64(words[2]),
                size <= maximumSize
            else { return sayLine("refused a connection that did not start with UPLOAD ID SIZE (at most 1 TiB)") }
            let id = String(words[1])
            let whole = "\(folder)/\(id)", part = whole + ".part"
            if let existing = try? FileManager.default.attributesOfItem(atPath: whole)[.size] as? UInt64,
                existing == size
            {
                try await pair.output.write(bigEndian(size) + Data("DONE\n".utf8))
                return
            }
            if !FileManager.default.fileExists(atPath: part) {
                guard FileManager.default.createFile(atPath: part, contents: nil) else { return }
            }
            let file = try FileHandle(forUpdating: URL(fileURLWithPath: part))
            defer { try? file.close() }
            var held = try file.seekToEnd()
            if held > size {  // longer than the upload says: only its first `size` bytes count
                try file.truncate(atOffset: size)
                held = size
            }
            sayLine("upload \(id): \(held) of \(size) bytes held, the rest comes")
            try await pair.output.write(bigEndian(held))
            if held < size {
                for try await chunk in pair.input.chunks {
                    let kept = chunk.prefix(Int(size - held))
                    try file.write(contentsOf: kept)
                    held += UInt64(kept.count)
                    if held == size { break }  // the sender now waits for DONE
                }
            }
            // The sender went away before the end: what came is kept for its next attempt.
            guard held == size else { return sayLine("upload \(id): \(held) of \(size) bytes held, the sender left") }
            try file.synchronize()
            try FileManager.default.moveItem(atPath: part, toPath: whole)
            sayLine("upload \(id): whole (\(size) bytes)")
            try await pair.output.write(Data("DONE\n".utf8))
            try await pair.finishSending()
        } catch {
            return  // a cut connection: what came is kept for the next attempt
        }
    }

    /// The largest upload taken (the network says the size: it is bounded before it is used).
    static let maximumSize: UInt64 = 1 << 40

    /// `value` as 8 bytes, big-endian.
    static func bigEndian(_ value: UInt64) -> Data {
        withUnsafeBytes(of: value.bigEndian) { Data($0) }
    }
}
