import Dispatch
import Foundation
import Glibc
import SalutStreams

/// A shell command run for one connection (`publish --listen --exec`): `/bin/sh -c CMD` started
/// with `posix_spawn`, in a process group of its own, with every signal at its default and
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
        let toChild = try Self.makePipe()
        let fromChild: [Int32]
        do { fromChild = try Self.makePipe() } catch {
            close(toChild[0]); close(toChild[1])
            throw error
        }
        var actions = posix_spawn_file_actions_t()
        var attributes = posix_spawnattr_t()
        guard posix_spawn_file_actions_init(&actions) == 0, posix_spawnattr_init(&attributes) == 0 else {
            for fd in toChild + fromChild { close(fd) }
            throw SpawnError(description: "posix_spawn: out of memory")
        }
        defer {
            posix_spawn_file_actions_destroy(&actions)
            posix_spawnattr_destroy(&attributes)
        }
        var none = sigset_t(), all = sigset_t()
        sigemptyset(&none)
        sigfillset(&all)
        let prepared = [
            posix_spawn_file_actions_adddup2(&actions, toChild[0], 0),
            posix_spawn_file_actions_adddup2(&actions, fromChild[1], 1),
            Self.closeOthers(&actions),
            posix_spawnattr_setsigmask(&attributes, &none),
            posix_spawnattr_setsigdefault(&attributes, &all),
            posix_spawnattr_setpgroup(&attributes, 0),
            posix_spawnattr_setflags(
                &attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP)),
        ]
        if let failed = prepared.first(where: { $0 != 0 }) {
            for fd in toChild + fromChild { close(fd) }
            throw SpawnError(description: "posix_spawn setup: \(String(cString: strerror(failed)))")
        }
        let arguments = ["/bin/sh", "-c", command]
        var merged = ProcessInfo.processInfo.environment
        merged.merge(environment) { $1 }
        var argv: [UnsafeMutablePointer<CChar>?] = arguments.map { strdup($0) } + [nil]
        var envp: [UnsafeMutablePointer<CChar>?] = merged.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer {
            argv.forEach { free($0) }
            envp.forEach { free($0) }
        }
        var pid: pid_t = 0
        let spawned = posix_spawn(&pid, "/bin/sh", &actions, &attributes, &argv, &envp)
        close(toChild[0])
        close(fromChild[1])
        guard spawned == 0 else {
            close(toChild[1]); close(fromChild[0])
            throw SpawnError(description: "cannot start /bin/sh: \(String(cString: strerror(spawned)))")
        }
        self.pid = pid
        do {
            input = try PipeEnd(toChild[1], .writing)
        } catch {
            close(fromChild[0])
            Self.killAndReap(pid)
            throw SpawnError(description: "\(error)")
        }
        do {
            output = try PipeEnd(fromChild[0], .reading)
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

    /// A pipe whose ends are close-on-exec (the child gets its two ends through dup2 only).
    /// (`pipe2` is not visible from Swift's Glibc module.)
    private static func makePipe() throws -> [Int32] {
        var ends: [Int32] = [-1, -1]
        guard pipe(&ends) == 0 else { throw SpawnError(description: "pipe: \(String(cString: strerror(errno)))") }
        for fd in ends where fcntl(fd, F_SETFD, FD_CLOEXEC) != 0 {
            let message = String(cString: strerror(errno))
            close(ends[0]); close(ends[1])
            throw SpawnError(description: "fcntl(FD_CLOEXEC): \(message)")
        }
        return ends
    }

    // MARK: glibc functions the Glibc module does not declare

    private typealias CloseFrom = @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32
    private typealias PidfdOpen = @convention(c) (pid_t, UInt32) -> Int32

    /// `posix_spawn_file_actions_addclosefrom_np` (glibc 2.34 and later).
    private static let addCloseFrom: CloseFrom? = dlsym(nil, "posix_spawn_file_actions_addclosefrom_np")
        .map { unsafeBitCast($0, to: CloseFrom.self) }
    /// `pidfd_open` (glibc 2.36 and later, Linux 5.3 and later).
    private static let pidfdOpen: PidfdOpen? = dlsym(nil, "pidfd_open").map { unsafeBitCast($0, to: PidfdOpen.self) }

    /// The child gets no descriptor of netsvc's beyond 0, 1 and 2 (its listening sockets, other
    /// connections, the D-Bus connection). Every descriptor netsvc opens is close-on-exec
    /// already; closefrom also covers any a library opened without it.
    private static func closeOthers(_ actions: inout posix_spawn_file_actions_t) -> Int32 {
        guard let addCloseFrom else { return 0 }
        return addCloseFrom(&actions, 3)
    }
}
