import Foundation
import Glibc
import Synchronization

/// A thread running its own run loop until stopped, for tests of streams and services scheduled
/// off the main thread.
public final class RunLoopThread: @unchecked Sendable {
    // @unchecked: `runLoop` is set once before `ready` is signalled (the semaphore orders it
    // before any reader); `stopped` is atomic.
    /// The thread's run loop, ready once `init` returns.
    public private(set) var runLoop: RunLoop!
    private let stopped = Atomic<Bool>(false)
    private let ready = DispatchSemaphore(value: 0)

    /// Starts the thread and returns once its run loop is running.
    public init() {
        // The thread holds `self` strongly until it has seen `stopped` and left its loop.
        let thread = Thread { [self] in
            self.runLoop = RunLoop.current
            self.ready.signal()
            // No keep-alive timer (swift-corelibs-foundation never frees a block-based timer):
            // with nothing scheduled, `run` returns at once, and the loop looks again 1 ms later.
            // Work posted with `perform(inModes:)` counts as something to run.
            while !self.stopped.load(ordering: .acquiring) {
                if !RunLoop.current.run(mode: .default, before: Date().addingTimeInterval(0.05)) { usleep(1_000) }
            }
        }
        thread.start()
        ready.wait()
    }

    /// Lets the thread leave its loop (within 50 ms).
    public func stop() { stopped.store(true, ordering: .releasing) }
}
