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

    /// Waits until the output holds `text`; false when it does not after `seconds`.
    public func waitForOutput(containing text: String, seconds: Double) -> Bool {
        eventually(timeout: seconds, interval: 0.02) { output.contains(text) }
    }

    /// Waits for the process to exit, then for the end of its output (at most a second more:
    /// a child it left behind may hold the output open); false when it still runs after
    /// `seconds`.
    public func waitForExit(seconds: Double) -> Bool {
        guard eventually(timeout: seconds, interval: 0.02, { !process.isRunning }) else { return false }
        waitForEndOfOutput()
        return true
    }

    /// Waits until the reader has seen the end of the output, at most `seconds`.
    private func waitForEndOfOutput(seconds: Double = 1) {
        eventually(timeout: seconds, interval: 0.005) { outputEnded.value }
    }

    /// Waits for exit (up to `seconds`) and returns the output.
    public func finish(seconds: Double = 20) -> String {
        eventually(timeout: seconds, interval: 0.02) { !process.isRunning }
        if process.isRunning { process.terminate() }
        waitForEndOfOutput()
        return output
    }

    /// Writes to the process's standard input.
    public func write(_ text: String) {
        process.write(Data(text.utf8))
    }

    /// Closes the process's standard input (it reads end of file).
    public func closeInput() {
        process.closeInput()
    }

    /// Terminates the process and waits (at most 5 s, then SIGKILL) for it to go. Polls rather
    /// than calling `waitUntilExit`, which spins the caller's run loop and can stall off the
    /// main thread.
    public func stop() {
        guard process.isRunning else { return }
        process.terminate()
        guard !eventually(timeout: 5, interval: 0.01, { !process.isRunning }) else { return }
        kill(process.processIdentifier, SIGKILL)
    }

    deinit { stop() }
}
