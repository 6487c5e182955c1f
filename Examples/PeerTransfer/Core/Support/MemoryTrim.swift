import Dispatch
import Foundation
import Salut

/// Gives malloc's free memory back to the system once work is done, at most one trim at a time:
/// however often it is asked (the receiver asks whenever a connection ends and no transfer
/// runs, so a flood of connections asks thousands of times a second), it trims once, `delay`
/// after the first request it has not yet served, on one serial queue. Before, each request
/// had a thread of its own, and a flood of connections started hundreds of threads, each
/// trimming the whole heap.
public final class MemoryTrim: Sendable {
    private let pending = Locked(false)
    private let queue = DispatchQueue(label: "peerxfer.memory-trim", qos: .utility)
    private let delay: DispatchTimeInterval
    private let trim: @Sendable () -> Void

    /// A trimmer that waits `delay` after a request and then runs `trim` (by default glibc's
    /// malloc_trim(3), when the C library has it).
    init(delay: DispatchTimeInterval = .seconds(1), trim: @escaping @Sendable () -> Void = MemoryTrim.mallocTrim) {
        self.delay = delay
        self.trim = trim
    }

    /// Asks for a trim: one is scheduled unless one already waits to run.
    func request() {
        let schedule = pending.withLock { waiting -> Bool in
            defer { waiting = true }
            return !waiting
        }
        guard schedule else { return }
        queue.asyncAfter(deadline: .now() + delay) { [pending, trim] in
            pending.withLock { $0 = false }  // a request from here on schedules the next one
            trim()
        }
    }

    /// Whether a trim waits to run (for tests).
    var isPending: Bool { pending.value }

    /// Limits glibc's malloc to `count` arenas (mallopt(3) `M_ARENA_MAX`): no arena is made
    /// beyond them. Nothing when the environment's `MALLOC_ARENA_MAX` says otherwise or the C
    /// library has no mallopt. By default glibc lets a process make up to eight arenas per
    /// core as its threads first allocate, and a freed block goes back to its own arena: after
    /// a flood of connections served by different threads, the arenas' half-used pages kept
    /// the receiver's heap megabytes above where it started (docs/benchmarks.md, loss-bench).
    /// glibc settles its limit once a process has more than eight arenas, so call this first,
    /// before threads allocate. Returns whether the limit was set.
    @discardableResult
    public static func limitArenas(to count: Int32) -> Bool {
        guard getenv("MALLOC_ARENA_MAX") == nil, let symbol = dlsym(nil, "mallopt") else { return false }
        let mallopt = unsafeBitCast(symbol, to: (@convention(c) (Int32, Int32) -> Int32).self)
        let arenaMaximum: Int32 = -8  // M_ARENA_MAX in <malloc.h>
        return mallopt(arenaMaximum, count) == 1
    }

    /// glibc's malloc_trim(3), looked up at run time (as syncfs(2) is, see ``Inbox``): returns
    /// the free memory of every arena to the system. Nothing where the C library lacks it.
    static let mallocTrim: @Sendable () -> Void = {
        guard let symbol = dlsym(nil, "malloc_trim") else { return {} }
        let call = unsafeBitCast(symbol, to: (@convention(c) (Int) -> Int32).self)
        return { _ = call(0) }
    }()
}
