import Foundation
import Synchronization

/// Delivers an Apple-style object's delegate calls (services, browsers, streams) on the run
/// loop it is scheduled in.
///
/// By default that is the main run loop in the default mode, served through the main dispatch
/// queue, which both `RunLoop.main.run()` and `dispatchMain()` drain, as on macOS. For another
/// run loop (`schedule(in:forMode:)`), calls are queued in order and drained by a block the run
/// loop performs (`perform(inModes:block:)`, which also wakes it, from any thread). Not a
/// zero-interval `Timer`: swift-corelibs-foundation leaks each block-based timer. An object removed from every
/// run loop delivers nothing, as Apple documents.
package final class DelegateScheduler: @unchecked Sendable {
    // @unchecked: `loops` and `pending` are only touched while `lock` is held; run loops are
    // only used through `add(_:forMode:)`, which CoreFoundation makes safe from any thread.

    private struct Target { var runLoop: RunLoop; var mode: RunLoop.Mode }

    private let lock = NSLock()
    private var loops: [Target]
    private var pending: [@Sendable () -> Void] = []
    /// Mirrors `!loops.isEmpty` without the lock, for hot paths that only need to know.
    private let scheduled: Atomic<Bool>

    /// - Parameter onMainRunLoop: start scheduled in the main run loop's default mode (services
    ///   and browsers), or in no run loop at all (streams, which Apple leaves unscheduled).
    package init(onMainRunLoop: Bool = true) {
        loops = onMainRunLoop ? [Target(runLoop: .main, mode: .default)] : []
        scheduled = Atomic(onMainRunLoop)
    }

    /// Whether the object is scheduled in any run loop (lock-free).
    package var isScheduled: Bool {
        scheduled.load(ordering: .acquiring)
    }

    package func schedule(in runLoop: RunLoop, forMode mode: RunLoop.Mode) {
        lock.lock(); defer { lock.unlock() }
        if !loops.contains(where: { $0.runLoop === runLoop && $0.mode == mode }) {
            loops.append(Target(runLoop: runLoop, mode: mode))
        }
        scheduled.store(true, ordering: .releasing)
    }

    package func remove(from runLoop: RunLoop, forMode mode: RunLoop.Mode) {
        lock.lock(); defer { lock.unlock() }
        loops.removeAll { $0.runLoop === runLoop && $0.mode == mode }
        scheduled.store(!loops.isEmpty, ordering: .releasing)
    }

    /// Runs `call` on the scheduled run loop, after every call delivered before it.
    package func deliver(_ call: @escaping @Sendable () -> Void) {
        lock.lock()
        guard let target = loops.first else { lock.unlock(); return }
        if target.runLoop === RunLoop.main && (target.mode == .default || target.mode == .common) {
            lock.unlock()
            DispatchQueue.main.async(execute: call)
            return
        }
        pending.append(call)
        let mustWake = pending.count == 1
        lock.unlock()
        guard mustWake else { return }
        target.runLoop.perform(inModes: [target.mode]) { [weak self] in self?.drain() }
    }

    private func drain() {
        lock.lock()
        let calls = pending
        pending = []
        lock.unlock()
        for call in calls { call() }
    }
}
