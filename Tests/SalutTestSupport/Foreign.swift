import Foundation
import SalutStreams

/// A foreign process (avahi-publish, avahi-browse, openssl, socat), with its output collected
/// and its standard input open for writing.
public final class Foreign: @unchecked Sendable {
    // @unchecked: the collected output is a `Locked` box; the child process is thread-safe.
    /// The running child.
    public let process: ChildProcess
    /// The output so far, shared with the child's reader.
    private let collected: Locked<Data>
    /// Set when the reader has seen the end of the output (every writer closed it).
    private let outputEnded: Locked<Bool>

    public init(_ arguments: [String]) throws {
        let collected = Locked(Data()), outputEnded = Locked(false)
        (self.collected, self.outputEnded) = (collected, outputEnded)
        process = try ChildProcess(arguments) { chunk in
            if chunk.isEmpty { return outputEnded.withLock { $0 = true } }  // the reader's end of file
            collected.withLock { $0.append(chunk) }
        }
    }

    /// Everything it has printed so far (standard output and error).
    public var output: String {
        collected.withLock { String(decoding: $0, as: UTF8.self) }
    }

    public func waitForOutput(containing text: String, seconds: Double) -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            if output.contains(text) { return true }
            Thread.sleep(forTimeInterval: 0.02)
        }
        return false
    }

    /// Waits for the process to exit, then for the end of its output (at most a second more:
    /// a child it left behind may hold the output open); false when it still runs after
    /// `seconds`.
    public func waitForExit(seconds: Double) -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        while process.isRunning && Date() < deadline { Thread.sleep(forTimeInterval: 0.02) }
        guard !process.isRunning else { return false }
        waitForEndOfOutput()
        return true
    }

    /// Waits until the reader has seen the end of the output, at most `seconds`.
    private func waitForEndOfOutput(seconds: Double = 1) {
        let deadline = Date().addingTimeInterval(seconds)
        while !outputEnded.value && Date() < deadline { Thread.sleep(forTimeInterval: 0.005) }
    }

    /// Waits for exit (up to `seconds`) and returns the output.
    public func finish(seconds: Double = 20) -> String {
        let deadline = Date().addingTimeInterval(seconds)
        while process.isRunning && Date() < deadline { Thread.sleep(forTimeInterval: 0.02) }
        if process.isRunning { process.terminate() }
        waitForEndOfOutput()
        return output
    }

    /// Terminates the process and waits (at most 5 s, then SIGKILL) for it to go. Polls rather
    /// than calling `waitUntilExit`, which spins the caller's run loop and can stall off the
    /// main thread.
    /// Writes to the process's standard input.
    public func write(_ text: String) {
        process.write(Data(text.utf8))
    }

    /// Closes the process's standard input (it reads end of file).
    public func closeInput() {
        process.closeInput()
    }

    public func stop() {
        guard process.isRunning else { return }
        process.terminate()
        let deadline = Date().addingTimeInterval(5)
        while process.isRunning && Date() < deadline { Thread.sleep(forTimeInterval: 0.01) }
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
    }

    deinit { stop() }
}
