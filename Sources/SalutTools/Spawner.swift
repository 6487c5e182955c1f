import Foundation
import Glibc

/// Starts programs for Salut's tools and tests with `posix_spawn` (never `fork` in a threaded
/// process, and not Foundation's `Process`, which leaks itself and its pipes in
/// swift-corelibs-foundation and would hide real leaks from the sanitizer runs).
///
/// The child gets the descriptors it is given as its standard input, output and error and no
/// other descriptor of ours (closed from 3 up), no blocked signal, and the signals it is told
/// at their default disposition; it may lead a process group of its own, so that everything
/// it starts can be ended with it.
package enum Spawner {
    /// Why a program could not be started.
    package struct Failure: Error, CustomStringConvertible {
        /// What failed, and why.
        package var description: String
    }

    /// How to start a program.
    package struct Options {
        /// Made the child's standard input, output and error (`dup2`); nil: the caller's own.
        package var standardInput: Int32?
        package var standardOutput: Int32?
        package var standardError: Int32?
        /// Whether the child leads a process group of its own (`kill(-pid, …)` ends it and
        /// what it started).
        package var leadsProcessGroup = false
        /// The child's whole environment; nil: the caller's.
        package var environment: [String: String]?
        /// Whether `arguments[0]` is looked up on `PATH` (`posix_spawnp`).
        package var searchesPath = false
        /// The signals put back at their default disposition; nil: every signal.
        package var defaultSignals: [Int32]?

        package init() {}
    }

    /// Starts `arguments[0]` with `arguments` as its argument vector; returns its process id.
    /// - Throws: ``Failure`` naming the call that failed and why.
    package static func spawn(_ arguments: [String], _ options: Options) throws -> pid_t {
        precondition(!arguments.isEmpty, "a program to start")
        var actions = posix_spawn_file_actions_t()
        guard posix_spawn_file_actions_init(&actions) == 0 else {
            throw Failure(description: "posix_spawn_file_actions_init: out of memory")
        }
        defer { posix_spawn_file_actions_destroy(&actions) }
        var attributes = posix_spawnattr_t()
        guard posix_spawnattr_init(&attributes) == 0 else {
            throw Failure(description: "posix_spawnattr_init: out of memory")
        }
        defer { posix_spawnattr_destroy(&attributes) }

        var defaults = sigset_t(), none = sigset_t()
        sigemptyset(&none)
        if let signals = options.defaultSignals {
            sigemptyset(&defaults)
            for signal in signals { sigaddset(&defaults, signal) }
        } else {
            sigfillset(&defaults)
        }
        var flags = POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF
        if options.leadsProcessGroup { flags |= POSIX_SPAWN_SETPGROUP }
        var steps: [(String, Int32)] = []
        for (fd, target) in [(options.standardInput, 0), (options.standardOutput, 1), (options.standardError, 2)] {
            if let fd {
                steps.append(
                    ("posix_spawn_file_actions_adddup2", posix_spawn_file_actions_adddup2(&actions, fd, Int32(target))))
            }
        }
        steps.append(("closing descriptors from 3", closeOthers(&actions)))
        steps.append(("posix_spawnattr_setsigmask", posix_spawnattr_setsigmask(&attributes, &none)))
        steps.append(("posix_spawnattr_setsigdefault", posix_spawnattr_setsigdefault(&attributes, &defaults)))
        if options.leadsProcessGroup {
            steps.append(("posix_spawnattr_setpgroup", posix_spawnattr_setpgroup(&attributes, 0)))
        }
        steps.append(("posix_spawnattr_setflags", posix_spawnattr_setflags(&attributes, Int16(flags))))
        if let (call, code) = steps.first(where: { $0.1 != 0 }) {
            throw Failure(description: "\(call): \(String(cString: strerror(code)))")
        }

        let argv: [UnsafeMutablePointer<CChar>?] = arguments.map { strdup($0) } + [nil]
        let envp: [UnsafeMutablePointer<CChar>?]? = options.environment.map { variables in
            variables.map { strdup("\($0.key)=\($0.value)") } + [nil]
        }
        defer {
            argv.forEach { free($0) }
            envp?.forEach { free($0) }
        }
        var pid: pid_t = 0
        let spawned = envp.withOptionalPointer { environment in
            options.searchesPath
                ? posix_spawnp(&pid, arguments[0], &actions, &attributes, argv, environment ?? UnsafePointer(environ))
                : posix_spawn(&pid, arguments[0], &actions, &attributes, argv, environment ?? UnsafePointer(environ))
        }
        guard spawned == 0 else {
            throw Failure(description: "cannot start \(arguments[0]): \(String(cString: strerror(spawned)))")
        }
        return pid
    }

    /// A started program's process id and the parent's ends of its two pipes.
    package struct Piped: Sendable {
        /// The program's process id.
        package var pid: pid_t
        /// Writes to its standard input.
        package var input: Int32
        /// Reads its standard output (and its standard error, when asked).
        package var output: Int32
    }

    /// Starts `arguments` as ``spawn(_:_:)`` does, with a pipe to its standard input and one from
    /// its standard output (`errorToOutput`: its standard error into the same pipe); returns the
    /// parent's ends, which the caller closes.
    /// - Throws: ``Failure`` when a pipe cannot be made or the program cannot be started (no
    ///   descriptor is left open then).
    package static func spawnPiped(
        _ arguments: [String], _ options: Options, errorToOutput: Bool = false
    ) throws
        -> Piped
    {
        let toChild = try pipe()
        let fromChild: (read: Int32, write: Int32)
        do {
            fromChild = try pipe()
        } catch {
            close(toChild.read)
            close(toChild.write)
            throw error
        }
        var options = options
        options.standardInput = toChild.read
        options.standardOutput = fromChild.write
        if errorToOutput { options.standardError = fromChild.write }
        let started = Result { try spawn(arguments, options) }
        close(toChild.read)
        close(fromChild.write)
        switch started {
        case .success(let pid):
            return Piped(pid: pid, input: toChild.write, output: fromChild.read)
        case .failure(let error):
            close(toChild.write)
            close(fromChild.read)
            throw error
        }
    }

    /// A pipe whose two ends are close-on-exec (a child gets an end only through the options'
    /// `dup2`): `(read, write)`.
    /// - Throws: ``Failure`` when the pipe cannot be made.
    package static func pipe() throws -> (read: Int32, write: Int32) {
        var ends: [Int32] = [-1, -1]
        guard Glibc.pipe(&ends) == 0 else { throw Failure(description: "pipe: \(String(cString: strerror(errno)))") }
        for fd in ends where fcntl(fd, F_SETFD, FD_CLOEXEC) != 0 {
            let reason = String(cString: strerror(errno))
            close(ends[0])
            close(ends[1])
            throw Failure(description: "fcntl(FD_CLOEXEC): \(reason)")
        }
        return (ends[0], ends[1])
    }

    // MARK: glibc functions the Glibc module does not declare

    private typealias CloseFrom = @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32

    /// `posix_spawn_file_actions_addclosefrom_np` (glibc 2.34 and later), looked up at run time.
    private static let addCloseFrom: CloseFrom? = dlsym(nil, "posix_spawn_file_actions_addclosefrom_np")
        .map { unsafeBitCast($0, to: CloseFrom.self) }

    /// The child gets no descriptor of ours beyond 0, 1 and 2 (listening sockets, other
    /// connections, the D-Bus connection): closed from 3 up in the child; without glibc's call,
    /// every open descriptor above 2 is made close-on-exec here instead.
    private static func closeOthers(_ actions: inout posix_spawn_file_actions_t) -> Int32 {
        if let addCloseFrom { return addCloseFrom(&actions, 3) }
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd") else { return 0 }
        for fd in names.compactMap(Int32.init) where fd > 2 {
            let flags = fcntl(fd, F_GETFD)
            if flags >= 0 { _ = fcntl(fd, F_SETFD, flags | FD_CLOEXEC) }
        }
        return 0
    }
}

extension Optional where Wrapped == [UnsafeMutablePointer<CChar>?] {
    /// Calls `body` with a pointer to the array's elements, or nil.
    fileprivate func withOptionalPointer<R>(
        _ body: (UnsafePointer<UnsafeMutablePointer<CChar>?>?) -> R
    ) -> R {
        guard let array = self else { return body(nil) }
        return array.withUnsafeBufferPointer { body($0.baseAddress) }
    }
}
