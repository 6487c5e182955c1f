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

    /// Exactly `count` bytes from `input` (the receiver sends nothing more until it is
    /// answered, so nothing past them is dropped).
    /// - Throws: ``PeerSessionError`` when the stream ends first.
    static func readExactly(_ count: Int, from input: InputStream) async throws -> Data {
        var data = Data()
        for try await chunk in input.chunks {
            data.append(chunk)
            if data.count >= count { return data.prefix(count) }
        }
        throw PeerSessionError.transferFailed("the peer ended the connection early")
    }
}

/// Prints each delegate call on a line of its own, in the order the session makes them.
final class Events: PeerSessionUploadDelegate, @unchecked Sendable {
    // @unchecked: `pending` is set before the session exists, then changed only by the
    // session's delegate calls, which come one at a time on its delegate queue.
    let (done, signal) = AsyncStream<Void>.makeStream()
    var pending: Int
    let relaunched: Bool

    init(pending: Int, relaunched: Bool) {
        self.pending = pending
        self.relaunched = relaunched
    }

    func say(_ line: String) {
        sayLine(line)
    }

    func peerSession(_ session: PeerSession, task: PeerUploadTask, isWaiting phase: PeerUploadTask.Phase) {
        say("waiting: \(phase)")
    }

    func peerSession(_ session: PeerSession, task: PeerSessionTask, didFinishCollecting metrics: PeerTaskMetrics) {
        say(
            "metrics: \(metrics.attempts) attempt(s), \(metrics.transactionMetrics.count) connection(s) in this process"
        )
    }

    func peerSession(_ session: PeerSession, task: PeerSessionTask, didCompleteWithError error: (any Error)?) {
        say("complete: \(error.map { "\($0)" } ?? "delivered"), \(task.countOfBytesSent) bytes sent")
        pending -= 1
        // A first launch has no relaunch events to wait for.
        if pending == 0 && !relaunched { signal.yield() }
    }

    func peerSessionDidFinishEvents(forBackgroundSession session: PeerSession) {
        say("finished events")
        signal.yield()
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
            FileHandle.standardError.write(
                Data(
                    """
                    usage: resumable-upload receive NAME FOLDER
                           resumable-upload send NAME FILE STATE   (FILE "-": carry on with what STATE holds)
                    environment: RESUMABLE_PACE=BYTES_PER_SECOND slows the sender down

                    """.utf8))
            exit(2)
        }
    }

    /// Queues `file` (unless nil) in the background session kept in `state`, and waits until
    /// every task of it is delivered; a relaunch (nil) carries on with what is pending.
    static func send(to name: String, file: String?, state: String) async {
        var configuration = PeerSessionConfiguration.background(withIdentifier: "resumable-upload")
        configuration.backgroundStateDirectory = URL(fileURLWithPath: state)
        configuration.uploadProtocol = ResumableUpload(
            pace: Int(ProcessInfo.processInfo.environment["RESUMABLE_PACE"] ?? "") ?? 0)
        configuration.retryDelay = 0.2
        let probe = BackgroundSessionProbe.pending(in: state)
        let events = Events(pending: probe + (file == nil ? 0 : 1), relaunched: probe > 0)
        let session = PeerSession(configuration: configuration, delegate: events)
        if let file {
            let task = session.uploadTask(
                to: DiscoveredService(name: name, type: serviceType), fromFile: URL(fileURLWithPath: file))
            task.taskDescription = file
            task.resume()
            events.say("queued: \(file) for \"\(name)\"")
        } else {
            events.say("relaunched: \(session.allTasks.count) task(s) carried on")
        }
        if events.pending == 0 && probe == 0 {
            events.say("nothing to send")
            exit(0)
        }
        for await _ in events.done { break }
        session.finishTasksAndInvalidate()
        exit(0)
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

    /// One attempt of one upload: the header, what is held, the rest, DONE.
    static func serve(_ pair: BoundStreamPair, folder: String) async {
        defer { pair.input.close(); pair.output.close() }
        do {
            try await pair.open()
            var header = Data()
            var rest = Data()
            loop: for try await chunk in pair.input.chunks {
                for (index, byte) in chunk.enumerated() {
                    if byte == UInt8(ascii: "\n") {
                        rest = chunk.suffix(from: chunk.startIndex + index + 1)
                        break loop
                    }
                    header.append(byte)
                    guard header.count < 100 else { return }
                }
            }
            let words = String(decoding: header, as: UTF8.self).split(separator: " ")
            guard words.count == 3, words[0] == "UPLOAD", words[1].count == 36,
                words[1].allSatisfy({ $0.isASCII && ($0.isHexDigit || $0 == "-") }), let size = UInt64(words[2])
            else { return }
            let part = "\(folder)/\(words[1]).part"
            if !FileManager.default.fileExists(atPath: part) {
                guard FileManager.default.createFile(atPath: part, contents: nil) else { return }
            }
            let file = try FileHandle(forUpdating: URL(fileURLWithPath: part))
            defer { try? file.close() }
            var held = try file.seekToEnd()
            var answer = Data()
            for shift in stride(from: 56, through: 0, by: -8) {
                answer.append(UInt8(truncatingIfNeeded: held >> UInt64(shift)))
            }
            try await pair.output.write(answer)
            if !rest.isEmpty {
                try file.write(contentsOf: rest)
                held += UInt64(rest.count)
            }
            while held < size {
                var got = false
                for try await chunk in pair.input.chunks {
                    try file.write(contentsOf: chunk.prefix(Int(size - held)))
                    held += UInt64(min(chunk.count, Int(size - held)))
                    got = true
                    if held >= size { break }
                }
                if !got || held < size { return }  // the sender went away: what came is kept
            }
            try file.synchronize()
            try FileManager.default.moveItem(atPath: part, toPath: "\(folder)/\(words[1])")
            try await pair.output.write(Data("DONE\n".utf8))
            try await pair.finishSending()
        } catch {
            return  // a cut connection: what came is kept for the next attempt
        }
    }
}

/// How many tasks a background session's state folder holds pending (so that a relaunch knows
/// to wait for did-finish-events).
enum BackgroundSessionProbe {
    static func pending(in state: String) -> Int {
        let tasks = URL(fileURLWithPath: state).appendingPathComponent("tasks").path
        return ((try? FileManager.default.contentsOfDirectory(atPath: tasks)) ?? []).filter { $0.hasSuffix(".json") }
            .count
    }
}
