import Foundation
import Synchronization

/// Delivers an Apple-style object's delegate calls (services, browsers, streams) on the run
/// loop it is scheduled in, or on a dispatch queue (streams: `CFReadStreamSetDispatchQueue`).
///
/// Calls wait in order in one list, and one drain at a time makes them on the current target:
/// by default the main run loop in the default mode, served through the main dispatch queue,
/// which both `RunLoop.main.run()` and `dispatchMain()` drain, as on macOS; for another run loop
/// (`schedule(in:forMode:)`), a block the run loop performs (`perform(inModes:block:)`), the run
/// loop being woken for it; for a dispatch queue, a block on it (so calls keep their order and
/// never overlap, even on a concurrent queue). When the target changes, the calls still waiting
/// go to the new one, and while the object is scheduled nowhere they wait for the next target;
/// closing a stream drops them. While scheduled there, the object keeps that run loop running, as a scheduled stream or service does on
/// Apple's systems: a source is attached in that mode, so `RunLoop.current.run()` on a worker
/// thread waits for events instead of returning at once (nothing else being attached); removing
/// the object from the run loop (or closing a stream, see ``removeFromAll()``) detaches it, and
/// `run()` returns once nothing else keeps the loop. Not a `Timer`: swift-corelibs-foundation
/// leaks each block-based timer. An object removed from every run loop delivers nothing, as
/// Apple documents, until it is scheduled again: then the calls that were waiting arrive.
package final class DelegateScheduler: @unchecked Sendable {
    // @unchecked: `loops`, `queue`, `pending`, `generation`, `draining` and `callUnderWay` are only touched
    // while `lock` is held; run loops are only used through CoreFoundation calls that are safe
    // from any thread (adding and removing a source, performing a block, stopping a run to wake
    // it).

    /// The source that keeps a run loop waiting while an object is scheduled in it; it is
    /// never signalled (deliveries go through `perform`).
    private final class KeepAlive: RunLoop._Source {}

    private struct Target {
        var runLoop: RunLoop
        var mode: RunLoop.Mode
        /// Nil for the main run loop's default and common modes, served by the main queue.
        var keepAlive: KeepAlive?

        var isMainQueue: Bool { runLoop === RunLoop.main && (mode == .default || mode == .common) }
    }

    private let lock = StateLock()
    private var loops: [Target]
    /// Where calls go instead of a run loop (`CFReadStreamSetDispatchQueue`).
    private var queue: DispatchQueue?
    /// Calls not yet made, in order. One drain at a time makes them, on the current target.
    private var pending: [@Sendable () -> Void] = []
    /// Bumped whenever the target changes: a drain started for an earlier target stops before
    /// its next call, and the calls left go to the new target's drain.
    private var generation = 0
    /// A drain for the current generation is on its way or running.
    private var draining = false
    /// A call is being made now. A new target's drain is started only once it has returned
    /// (by the drain that made it), so that two calls never overlap.
    private var callUnderWay = false
    /// Mirrors whether there is a run loop or queue to deliver to, without the lock, for hot
    /// paths that only need to know.
    private let scheduled: Atomic<Bool>

    /// Where the calls go now.
    private enum Destination {
        case mainQueue
        case queue(DispatchQueue)
        case runLoop(RunLoop, RunLoop.Mode)

        func isSame(as other: Destination?) -> Bool {
            switch (self, other) {
            case (.mainQueue, .mainQueue?): return true
            case (.queue(let a), .queue(let b)?): return a === b
            case (.runLoop(let a, let m), .runLoop(let b, let n)?): return a === b && m == n
            default: return false
            }
        }
    }

    /// - Parameter onMainRunLoop: start scheduled in the main run loop's default mode (services
    ///   and browsers), or in no run loop at all (streams, which Apple leaves unscheduled).
    package init(onMainRunLoop: Bool = true) {
        loops = onMainRunLoop ? [Target(runLoop: .main, mode: .default, keepAlive: nil)] : []
        scheduled = Atomic(onMainRunLoop)
    }

    deinit {
        for target in loops { Self.detach(target) }
    }

    /// Whether the object has a run loop or a dispatch queue to deliver to (lock-free).
    package var isScheduled: Bool {
        scheduled.load(ordering: .acquiring)
    }

    package func schedule(in runLoop: RunLoop, forMode mode: RunLoop.Mode) {
        let restart = lock.withLock { () -> (Destination, Int)? in
            let before = destination
            queue = nil  // as on Apple's systems: a run loop replaces a dispatch queue
            if !loops.contains(where: { $0.runLoop === runLoop && $0.mode == mode }) {
                var target = Target(runLoop: runLoop, mode: mode, keepAlive: nil)
                if !target.isMainQueue {
                    let keepAlive = KeepAlive()
                    runLoop._add(keepAlive, forMode: mode)
                    target.keepAlive = keepAlive
                }
                loops.append(target)
            }
            return retargeted(from: before)
        }
        if let restart { startDrain(restart.0, generation: restart.1) }
    }

    package func remove(from runLoop: RunLoop, forMode mode: RunLoop.Mode) {
        let (removed, restart) = lock.withLock { () -> ([Target], (Destination, Int)?) in
            let before = destination
            let removed = loops.filter { $0.runLoop === runLoop && $0.mode == mode }
            loops.removeAll { $0.runLoop === runLoop && $0.mode == mode }
            return (removed, retargeted(from: before))
        }
        for target in removed { Self.detach(target) }
        if let restart { startDrain(restart.0, generation: restart.1) }
    }

    /// Delivers calls on `target` from now on, in order, one after another, instead of any run
    /// loop (which the object leaves, as Apple's `CFReadStreamSetDispatchQueue` does); nil
    /// stops delivering there (calls wait until the object is scheduled again).
    package func setDispatchQueue(_ target: DispatchQueue?) {
        let (removed, restart) = lock.withLock { () -> ([Target], (Destination, Int)?) in
            let before = destination
            let removed = target == nil ? [] : loops
            if target != nil { loops = [] }
            queue = target
            return (removed, retargeted(from: before))
        }
        for target in removed { Self.detach(target) }
        if let restart { startDrain(restart.0, generation: restart.1) }
    }

    /// Leaves every run loop and dispatch queue (a closed stream: it delivers nothing more, not
    /// even calls already on their way, and no longer keeps a run loop running).
    package func removeFromAll() {
        let removed = lock.withLock { () -> [Target] in
            let removed = loops
            loops = []
            let before = destination
            queue = nil
            pending = []
            _ = retargeted(from: before)
            return removed
        }
        for target in removed { Self.detach(target) }
    }

    /// Takes the keep-alive source off the target's run loop and wakes it, so that a `run()`
    /// with nothing else to wait for returns.
    private static func detach(_ target: Target) {
        guard let keepAlive = target.keepAlive else { return }
        target.runLoop._remove(keepAlive, for: target.mode)
        target.runLoop._stop()
    }

    /// The current destination: the dispatch queue, else the run loop scheduled last (code that
    /// schedules an object on a worker thread's run loop wants its events there). Lock held.
    private var destination: Destination? {
        if let queue { return .queue(queue) }
        guard let target = loops.last else { return nil }
        return target.isMainQueue ? .mainQueue : .runLoop(target.runLoop, target.mode)
    }

    /// The target may have changed (lock held). If it did: a new generation, and the drain to
    /// start for the calls waiting, unless a call is under way (its drain hands over when it
    /// returns). Scheduled nowhere, the calls waiting stay for the next target: code that moves
    /// an object removes it from one run loop before scheduling it in the next, and an event
    /// queued in between (a stream's `hasSpaceAvailable` after `openCompleted`) is not sent
    /// again. (Waiting calls hold their objects weakly, so an object can still go.) Only
    /// ``removeFromAll()`` (a closed stream) drops them.
    private func retargeted(from before: Destination?) -> (Destination, Int)? {
        let now = destination
        scheduled.store(now != nil, ordering: .releasing)
        if let now, now.isSame(as: before) { return nil }
        generation += 1
        draining = false
        guard let now, !pending.isEmpty, !callUnderWay else { return nil }
        draining = true
        return (now, generation)
    }

    /// True when no call waits and none is under way: every call handed to ``deliver(_:)``
    /// so far has been made (for tests that check that no more calls come).
    var isQuiet: Bool { lock.withLock { pending.isEmpty && !draining && !callUnderWay } }

    /// Makes `call` on the current destination, after every call delivered before it; nothing
    /// when the object is scheduled nowhere.
    package func deliver(_ call: @escaping @Sendable () -> Void) {
        let start = lock.withLock { () -> (Destination, Int)? in
            guard let destination else { return nil }
            pending.append(call)
            // A call under way for an earlier target hands over to this one when it returns.
            guard !draining, !callUnderWay else { return nil }
            draining = true
            return (destination, generation)
        }
        if let start { startDrain(start.0, generation: start.1) }
    }

    private func startDrain(_ destination: Destination, generation: Int) {
        switch destination {
        case .mainQueue:
            DispatchQueue.main.async { [weak self] in self?.drain(generation, on: nil) }
        case .queue(let queue):
            queue.async { [weak self] in self?.drain(generation, on: nil) }
        case .runLoop(let runLoop, let mode):
            // The block runs on the target's thread, whose current run loop is the target.
            runLoop.perform(inModes: [mode]) { [weak self] in self?.drain(generation, on: RunLoop.current) }
            // A block alone does not wake a run loop waiting for its sources: ending the current
            // wait does (`run()` and `run(until:)` go on waiting after it; `run(mode:before:)`
            // returns, as it does after any input it handled).
            runLoop._stop()
        }
    }

    /// Makes the calls that were waiting when it started, one by one, while `generation` is
    /// current; then posts itself again if more came meanwhile, so that a busy stream never
    /// holds its run loop or queue for longer than one batch. When the target changes under it,
    /// it stops, and once its call under way has returned it starts the new target's drain.
    private func drain(_ generation: Int, on runLoop: RunLoop?) {
        var batch = lock.withLock { generation == self.generation ? pending.count : 0 }
        while batch > 0 {
            let call = lock.withLock { () -> (@Sendable () -> Void)? in
                guard generation == self.generation, !pending.isEmpty else { return nil }
                callUnderWay = true
                return pending.removeFirst()
            }
            guard let call else { break }
            call()
            batch -= 1
            let handOver = lock.withLock { () -> (Destination, Int)? in
                callUnderWay = false
                return generation == self.generation ? nil : startForCurrentGeneration()
            }
            if let handOver {
                startDrain(handOver.0, generation: handOver.1)
                return
            }
        }
        let next = lock.withLock { () -> (Destination, Int)? in
            guard generation == self.generation else { return startForCurrentGeneration() }
            guard !pending.isEmpty, let destination else {
                draining = false
                return nil
            }
            return (destination, generation)  // more came meanwhile: another batch, later
        }
        if let next { startDrain(next.0, generation: next.1) }
        // Removed from this run loop meanwhile (by one of these calls, or before they ran): the
        // loop may have nothing left to wait for, but it only notices on waking, and this block
        // was its last reason to: wake it once more, so that `run()` can return.
        if let runLoop, !lock.withLock({ loops.contains { $0.runLoop === runLoop } }) { runLoop._stop() }
    }

    /// The drain the current generation needs, if none is on its way and calls wait (lock held).
    private func startForCurrentGeneration() -> (Destination, Int)? {
        guard !draining, !callUnderWay, !pending.isEmpty, let destination else { return nil }
        draining = true
        return (destination, generation)
    }
}
