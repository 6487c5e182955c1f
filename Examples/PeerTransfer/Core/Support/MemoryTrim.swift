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

    /// Sets glibc's malloc up for a daemon whose heap should come back down after a flood of
    /// connections (mallopt(3)): at most `arenas` arenas (`M_ARENA_MAX`; by default glibc lets
    /// a process make up to eight per core as its threads first allocate, and a freed block
    /// goes back to its own arena, whose half-used pages then stay), and blocks of 128 KiB or
    /// more always mapped on their own (`M_MMAP_THRESHOLD`; by default the threshold rises
    /// each time such a block is freed, up to 32 MiB, and later large blocks are carved from
    /// the arenas, where they leave holes). Each is left as the environment's
    /// `MALLOC_ARENA_MAX` or `MALLOC_MMAP_THRESHOLD_` sets it, and nothing is done where the C
    /// library has no mallopt. glibc settles its arena limit once a process has more than eight
    /// arenas, so call this first, before threads allocate. Returns whether both were set.
    @discardableResult
    public static func configureMalloc(arenas: Int32) -> Bool {
        guard let symbol = dlsym(nil, "mallopt") else { return false }
        let mallopt = unsafeBitCast(symbol, to: (@convention(c) (Int32, Int32) -> Int32).self)
        let (arenaMaximum, mmapThreshold): (Int32, Int32) = (-8, -3)  // M_ARENA_MAX, M_MMAP_THRESHOLD
        let arenasSet = getenv("MALLOC_ARENA_MAX") == nil && mallopt(arenaMaximum, arenas) == 1
        let thresholdSet = getenv("MALLOC_MMAP_THRESHOLD_") == nil && mallopt(mmapThreshold, 128 << 10) == 1
        return arenasSet && thresholdSet
    }

    /// glibc's malloc_trim(3), looked up at run time (as syncfs(2) is, see ``Inbox``): returns
    /// the free memory of every arena to the system. Nothing where the C library lacks it.
    static let mallocTrim: @Sendable () -> Void = {
        guard let symbol = dlsym(nil, "malloc_trim") else { return {} }
        let call = unsafeBitCast(symbol, to: (@convention(c) (Int) -> Int32).self)
        return { _ = call(0) }
    }()
}
