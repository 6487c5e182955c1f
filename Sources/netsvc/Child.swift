import Dispatch
import Foundation
import Glibc
import SalutStreams
import SalutTools

/// A shell command run for one connection (`publish --listen --exec`): `/bin/sh -c CMD` started
/// with ``Spawner`` (`posix_spawn`), in a process group of its own, with every signal at its default and
/// unblocked, no descriptor of netsvc's but a pipe for its standard input, one for its standard
/// output, and netsvc's standard error. Its exit is watched through a pidfd in the
/// ``PipePoller`` (no thread of its own), and it is always reaped.
final class Child: @unchecked Sendable {
    // @unchecked: `status`, `waiters` and `exitTimer` are guarded by `lock` (a `StateLock`);
    // the pipe ends are thread-safe.

    /// Why a command could not be started.
    struct SpawnError: Error, CustomStringConvertible {
        var description: String
    }

    let pid: pid_t
    /// Writes to the child's standard input.
    let input: PipeEnd
    /// Reads the child's standard output.
    let output: PipeEnd
    private let lock = StateLock()
    private var status: Int32?
    private var waiters: [CheckedContinuation<Int32, Never>] = []
    private var exitTimer: (any DispatchSourceTimer)?

    /// Starts `command` with `environment` added to netsvc's own.
    /// - Throws: ``SpawnError`` when a pipe cannot be made or the shell cannot be started.
    init(command: String, environment: [String: String]) throws {
        var options = Spawner.Options()
        options.leadsProcessGroup = true
        options.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
        let started: Spawner.Piped
        do {
            started = try Spawner.spawnPiped(["/bin/sh", "-c", command], options)
        } catch {
            throw SpawnError(description: "\(error)")
        }
        let pid = started.pid
        self.pid = pid
        do {
            input = try PipeEnd(started.input, .writing)
        } catch {
            close(started.output)
            Self.killAndReap(pid)
            throw SpawnError(description: "\(error)")
        }
        do {
            output = try PipeEnd(started.output, .reading)
        } catch {
            input.close()
            Self.killAndReap(pid)
            throw SpawnError(description: "\(error)")
        }
        watchExit()
    }

    /// Suspends until the child has exited and been reaped; its exit code, or 128 + the signal
    /// that ended it (as a shell reports it).
    func exited() async -> Int32 {
        await withCheckedContinuation { continuation in
            let exited = lock.withLock { () -> Int32? in
                if let status { return status }
                waiters.append(continuation)
                return nil
            }
            if let exited { continuation.resume(returning: exited) }
        }
    }

    /// Whether the child has exited and been reaped.
    var hasExited: Bool { lock.withLock { status != nil } }

    /// Ends the child: closes both pipes, sends SIGTERM to its process group, and SIGKILL after
    /// `grace` seconds if it is still there. Returns at once.
    func terminate(grace: Double = 2) {
        input.close()
        output.close()
        guard signal(SIGTERM) else { return }
        DispatchQueue.global().asyncAfter(deadline: .now() + grace) { [self] in
            _ = signal(SIGKILL)
        }
    }

    // MARK: Reaping

    /// Kills and reaps a child that could not be set up.
    private static func killAndReap(_ pid: pid_t) {
        _ = Glibc.kill(-pid, SIGKILL)
        var raw: Int32 = 0
        while waitpid(pid, &raw, 0) < 0 && errno == EINTR {}
    }

    /// Watches for the exit through a pidfd (readable once the process has exited), in the
    /// ``PipePoller``; without pidfd_open, polls `waitpid` every 50 ms.
    private func watchExit() {
        let pidfd = Self.pidfdOpen.map { $0(pid, 0) } ?? -1
        guard pidfd >= 0 else {
            let timer = DispatchSource.makeTimerSource(queue: .global())
            timer.schedule(deadline: .now() + .milliseconds(50), repeating: .milliseconds(50))
            timer.setEventHandler { [weak self] in _ = self?.reap() }
            lock.withLock { exitTimer = timer }
            return timer.resume()
        }
        waitForExit(pidfd)
    }

    private func waitForExit(_ pidfd: Int32) {
        PipePoller.shared.wait(for: pidfd, writing: false) { [self] _ in
            if reap() { _ = Glibc.close(pidfd) } else { waitForExit(pidfd) }
        }
    }

    /// Sends `number` to the child's process group unless the shell has been reaped (checked
    /// under the lock that reaping takes, so a reaped id, which may be reused, is never
    /// signalled). False when it had been reaped.
    private func signal(_ number: Int32) -> Bool {
        lock.withLock {
            guard status == nil else { return false }
            _ = Glibc.kill(-pid, number)  // ESRCH: the group is gone already
            return true
        }
    }

    /// Once the shell has exited: ends what it left running in its process group (a command
    /// started with `&` would otherwise outlive the connection, and hold its pipes open), then
    /// reaps it. While it is an unreaped zombie its id, and so its group's, cannot be reused.
    /// True once the child is reaped.
    @discardableResult
    private func reap() -> Bool {
        // Reaped now: its code, the waiters to wake and the polling timer to stop.
        typealias Reaped = (
            code: Int32, woken: [CheckedContinuation<Int32, Never>], timer: (any DispatchSourceTimer)?
        )
        // nil: still running; `.some(nil)`: reaped before.
        let outcome = lock.withLock { () -> Reaped?? in
            guard status == nil else { return .some(nil) }
            var info = siginfo_t()
            let looked = waitid(P_PID, id_t(pid), &info, WEXITED | WNOHANG | WNOWAIT)
            let exited = looked == 0 && info._sifields._sigchld.si_pid == pid
            guard exited || (looked < 0 && errno == ECHILD) else { return nil }  // still running
            if exited { _ = Glibc.kill(-pid, SIGKILL) }  // ESRCH: nothing left in the group
            var raw: Int32 = 0
            let reaped = waitpid(pid, &raw, 0)
            // WIFEXITED / WEXITSTATUS / WTERMSIG are macros Swift does not import. -1: the status
            // is unknown (someone else reaped it).
            let code: Int32 = reaped != pid ? -1 : (raw & 0x7f) == 0 ? (raw >> 8) & 0xff : 128 + (raw & 0x7f)
            status = code
            let woken = waiters
            waiters = []
            let timer = exitTimer
            exitTimer = nil
            return .some((code, woken, timer))
        }
        guard let outcome else { return false }
        guard let reaped = outcome else { return true }
        reaped.timer?.cancel()
        for waiter in reaped.woken { waiter.resume(returning: reaped.code) }
        return true
    }

    // MARK: glibc functions the Glibc module does not declare

    private typealias PidfdOpen = @convention(c) (pid_t, UInt32) -> Int32

    /// `pidfd_open` (glibc 2.36 and later, Linux 5.3 and later).
    private static let pidfdOpen: PidfdOpen? = dlsym(nil, "pidfd_open").map { unsafeBitCast($0, to: PidfdOpen.self) }

}
