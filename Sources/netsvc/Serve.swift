import Foundation
import Glibc
import Salut

/// Serves the connections of `publish --listen`: bridged to netsvc's stdin/stdout one at a time,
/// or each to its own child process (`--exec`).
struct ConnectionServer: Sendable {
    /// The shell command to run per connection; nil bridges stdin/stdout.
    let command: String?
    let json: Bool

    func serve(_ connections: AsyncStream<AcceptedConnection>) async {
        let stdin = command == nil ? SharedStandardInput() : nil
        for await connection in connections {
            let peer = connection.remoteAddress?.description ?? "unknown"
            do {
                try await connection.streams.open()
            } catch {
                note("connection from \(peer) failed: \(error)")
                continue
            }
            report("connected", peer)
            if let command {
                Task { await runChild(command, for: connection, peer: peer) }
            } else if let stdin {
                stdin.attach(connection.output)
                do { try await Bridge.drain(connection.input, to: 1) } catch { note("connection from \(peer): \(error)") }
                stdin.detach()
                connection.output.close()
                connection.input.close()
                report("disconnected", peer)
            }
        }
    }

    /// Runs `command` with the connection as its stdin/stdout; closes the connection when the
    /// child's output ends.
    private func runChild(_ command: String, for connection: AcceptedConnection, peer: String) async {
        let child = Process()
        // `env --default-signal`: a child started from a libdispatch thread would otherwise
        // inherit that thread's blocked signals.
        child.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        child.arguments = ["--default-signal", "/bin/sh", "-c", command]
        var environment = ProcessInfo.processInfo.environment
        environment["NETSVC_PEER"] = peer
        child.environment = environment
        let toChild = Pipe(), fromChild = Pipe()
        child.standardInput = toChild
        child.standardOutput = fromChild
        do {
            try child.run()
        } catch {
            note("cannot run \(command): \(error)")
            connection.output.close()
            connection.input.close()
            return
        }
        let childInput = toChild.fileHandleForWriting.fileDescriptor
        Bridge.copy(from: connection.input, to: childInput) { _ in try? toChild.fileHandleForWriting.close() }
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            Bridge.copy(from: fromChild.fileHandleForReading.fileDescriptor, to: connection.output) { _ in done.resume() }
        }
        while child.isRunning { try? await Task.sleep(nanoseconds: 20_000_000) }
        connection.input.close()
        report("disconnected", peer, status: Int(child.terminationStatus))
    }

    private func report(_ event: String, _ peer: String, status: Int? = nil) {
        if json {
            var object: [String: Any] = ["event": event, "peer": peer]
            if let status { object["status"] = status }
            printJSON(object)
        } else {
            note("\(event) \(peer)" + (status.map { " (exit \($0))" } ?? ""))
        }
    }

    /// Status lines go to stderr: stdout may be carrying the connection's bytes.
    private func note(_ line: String) {
        FileHandle.standardError.write(Data("netsvc: \(line)\n".utf8))
    }
}
