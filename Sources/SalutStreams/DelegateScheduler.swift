import Foundation
import Synchronization

/// Delivers an Apple-style object's delegate calls (services, browsers, streams) on the run
/// loop it is scheduled in, or on a dispatch queue (streams: `CFReadStreamSetDispatchQueue`).
///
/// By default that is the main run loop in the default mode, served through the main dispatch
/// queue, which both `RunLoop.main.run()` and `dispatchMain()` drain, as on macOS. For another
/// run loop (`schedule(in:forMode:)`), calls are queued in order and drained by a block the run
/// loop performs (`perform(inModes:block:)`), and the run loop is woken for it. While scheduled
/// there, the object keeps that run loop running, as a scheduled stream or service does on
/// Apple's systems: a source is attached in that mode, so `RunLoop.current.run()` on a worker
/// thread waits for events instead of returning at once (nothing else being attached); removing
/// the object from the run loop (or closing a stream, see ``removeFromAll()``) detaches it, and
/// `run()` returns once nothing else keeps the loop. Not a `Timer`: swift-corelibs-foundation
/// leaks each block-based timer. An object removed from every run loop delivers nothing, as
/// Apple documents.
package final class DelegateScheduler: @unchecked Sendable {
    // @unchecked: `loops`, `queue` and `pending` are only touched while `lock` is held; run loops are
    // only used through CoreFoundation calls that are safe from any thread (adding and removing
    // a source, performing a block, stopping a run to wake it).

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

    private let lock = NSLock()
    private var loops: [Target]
    /// Where calls go instead of a run loop (`CFReadStreamSetDispatchQueue`): a serial queue
    /// of ours targeting the one given, so that calls keep their order even on a concurrent one.
    private var queue: DispatchQueue?
    private var pending: [@Sendable () -> Void] = []
    /// Mirrors `!loops.isEmpty` without the lock, for hot paths that only need to know.
    private let scheduled: Atomic<Bool>

    /// - Parameter onMainRunLoop: start scheduled in the main run loop's default mode (services
    ///   and browsers), or in no run loop at all (streams, which Apple leaves unscheduled).
    package init(onMainRunLoop: Bool = true) {
        loops = onMainRunLoop ? [Target(runLoop: .main, mode: .default, keepAlive: nil)] : []
        scheduled = Atomic(onMainRunLoop)
    }

    deinit {
        for target in loops { Self.detach(target) }
    }

    /// Whether the object is scheduled in any run loop (lock-free).
    package var isScheduled: Bool {
        scheduled.load(ordering: .acquiring)
    }

    package func schedule(in runLoop: RunLoop, forMode mode: RunLoop.Mode) {
        lock.lock(); defer { lock.unlock() }
        queue = nil   // as on Apple's systems: a run loop replaces a dispatch queue
        if !loops.contains(where: { $0.runLoop === runLoop && $0.mode == mode }) {
            var target = Target(runLoop: runLoop, mode: mode, keepAlive: nil)
            if !target.isMainQueue {
                let keepAlive = KeepAlive()
                runLoop._add(keepAlive, forMode: mode)
                target.keepAlive = keepAlive
            }
            loops.append(target)
        }
        scheduled.store(true, ordering: .releasing)
    }

    package func remove(from runLoop: RunLoop, forMode mode: RunLoop.Mode) {
        lock.lock()
        let removed = loops.filter { $0.runLoop === runLoop && $0.mode == mode }
        loops.removeAll { $0.runLoop === runLoop && $0.mode == mode }
        scheduled.store(!loops.isEmpty || queue != nil, ordering: .releasing)
        lock.unlock()
        for target in removed { Self.detach(target) }
    }

    /// Delivers calls on `target` from now on, instead of any run loop (which the object
    /// leaves, as Apple's `CFReadStreamSetDispatchQueue` does); nil stops delivering there.
    package func setDispatchQueue(_ target: DispatchQueue?) {
        lock.lock()
        let removed = target == nil ? [] : loops
        if target != nil { loops = [] }
        queue = target.map { DispatchQueue(label: "salut.delegate-calls", target: $0) }
        scheduled.store(!loops.isEmpty || queue != nil, ordering: .releasing)
        lock.unlock()
        for target in removed { Self.detach(target) }
    }

    /// Leaves every run loop and dispatch queue (a closed stream: it delivers nothing more, and
    /// no longer keeps a run loop running).
    package func removeFromAll() {
        lock.lock()
        let removed = loops
        loops = []
        queue = nil
        pending = []
        scheduled.store(false, ordering: .releasing)
        lock.unlock()
        for target in removed { Self.detach(target) }
    }

    /// Takes the keep-alive source off the target's run loop and wakes it, so that a `run()`
    /// with nothing else to wait for returns.
    private static func detach(_ target: Target) {
        guard let keepAlive = target.keepAlive else { return }
        target.runLoop._remove(keepAlive, for: target.mode)
        target.runLoop._stop()
    }

    /// Runs `call` on the scheduled run loop (the one scheduled last, when there are several:
    /// code that schedules an object on a worker thread's run loop wants its events there),
    /// after every call delivered before it.
    package func deliver(_ call: @escaping @Sendable () -> Void) {
        lock.lock()
        if let queue {
            lock.unlock()
            queue.async(execute: call)
            return
        }
        guard let target = loops.last else { lock.unlock(); return }
        if target.isMainQueue {
            lock.unlock()
            DispatchQueue.main.async(execute: call)
            return
        }
        pending.append(call)
        let mustWake = pending.count == 1
        lock.unlock()
        guard mustWake else { return }
        // The block runs on the target's thread, whose current run loop is the target.
        target.runLoop.perform(inModes: [target.mode]) { [weak self] in self?.drain(on: RunLoop.current) }
        // A block alone does not wake a run loop waiting for its sources: ending the current
        // wait does (`run()` and `run(until:)` go on waiting after it; `run(mode:before:)`
        // returns, as it does after any input it handled).
        target.runLoop._stop()
    }

    private func drain(on runLoop: RunLoop) {
        lock.lock()
        let calls = pending
        pending = []
        lock.unlock()
        for call in calls { call() }
        // Removed from this run loop meanwhile (by one of these calls, or before they ran): the
        // loop may have nothing left to wait for, but it only notices on waking, and this block
        // was its last reason to: wake it once more, so that `run()` can return.
        let stillHere = lock.withLock { loops.contains { $0.runLoop === runLoop } }
        if !stillHere { runLoop._stop() }
    }
}
