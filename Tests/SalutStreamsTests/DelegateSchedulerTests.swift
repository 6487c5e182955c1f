import Dispatch
import Foundation
import SalutStreams
import Synchronization
import XCTest

/// The order, overlap and hand-over rules of delegate delivery, on dispatch queues (the run-loop
/// side is tested through streams and services on worker threads).
final class DelegateSchedulerTests: XCTestCase {
    func testCallsKeepTheirOrderAndNeverOverlapEvenOnAConcurrentQueue() {
        let scheduler = DelegateScheduler(onMainRunLoop: false)
        scheduler.setDispatchQueue(.global())
        let seen = Mutex<[Int]>([])
        let inside = Atomic<Int>(0)
        let overlaps = Atomic<Int>(0)
        let done = DispatchSemaphore(value: 0)
        for index in 0..<2_000 {
            scheduler.deliver {
                if inside.add(1, ordering: .acquiringAndReleasing).newValue > 1 { overlaps.add(1, ordering: .relaxed) }
                seen.withLock { $0.append(index) }
                inside.subtract(1, ordering: .acquiringAndReleasing)
                if index == 1_999 { done.signal() }
            }
        }
        XCTAssertEqual(done.wait(timeout: .now() + 20), .success)
        XCTAssertEqual(seen.withLock { $0 }, Array(0..<2_000), "in order")
        XCTAssertEqual(overlaps.load(ordering: .relaxed), 0, "one call at a time")
    }

    func testCallsStillWaitingGoToTheNewTargetAndTheOldOneMakesNone() {
        let scheduler = DelegateScheduler(onMainRunLoop: false)
        let old = DispatchQueue(label: "old")
        let new = DispatchQueue(label: "new")
        let newKey = DispatchSpecificKey<Bool>()
        new.setSpecific(key: newKey, value: true)
        old.suspend()   // its drain waits, so the calls are still waiting when the target changes
        scheduler.setDispatchQueue(old)
        let made = Mutex<[(Int, Bool)]>([])
        for index in 0..<5 {
            scheduler.deliver { made.withLock { $0.append((index, DispatchQueue.getSpecific(key: newKey) == true)) } }
        }
        scheduler.setDispatchQueue(new)
        new.sync {}   // the new target's drain has run
        old.resume()
        old.sync {}   // and the old one's stale block too
        new.sync {}
        XCTAssertEqual(made.withLock { $0.map(\.0) }, [0, 1, 2, 3, 4], "each once, in order")
        XCTAssertTrue(made.withLock { $0.allSatisfy(\.1) }, "all on the new target")
    }

    func testScheduledNowhereTheWaitingCallsAreDropped() {
        let scheduler = DelegateScheduler(onMainRunLoop: false)
        let queue = DispatchQueue(label: "held")
        queue.suspend()
        scheduler.setDispatchQueue(queue)
        let made = Atomic<Int>(0)
        scheduler.deliver { made.add(1, ordering: .relaxed) }
        scheduler.setDispatchQueue(nil)
        XCTAssertFalse(scheduler.isScheduled)
        scheduler.deliver { made.add(1, ordering: .relaxed) }   // nowhere to go: not kept either
        queue.resume()
        queue.sync {}
        XCTAssertEqual(made.load(ordering: .relaxed), 0)
    }

    func testABusyObjectLetsOtherWorkOnItsQueueRunBetweenBatches() {
        let scheduler = DelegateScheduler(onMainRunLoop: false)
        let queue = DispatchQueue(label: "shared")
        scheduler.setDispatchQueue(queue)
        let chain = Atomic<Int>(0)
        let seenByOther = Atomic<Int>(-1)
        let done = DispatchSemaphore(value: 0)
        // Each call delivers the next, as a stream whose delegate reads posts its next event.
        @Sendable func step() {
            let count = chain.add(1, ordering: .acquiringAndReleasing).newValue
            if count == 1 { queue.async { seenByOther.store(chain.load(ordering: .acquiring), ordering: .releasing) } }
            if count < 100 { scheduler.deliver(step) } else { done.signal() }
        }
        scheduler.deliver(step)
        XCTAssertEqual(done.wait(timeout: .now() + 20), .success)
        queue.sync {}
        let other = seenByOther.load(ordering: .acquiring)
        XCTAssertGreaterThan(other, 0)
        XCTAssertLessThan(other, 100, "the other block ran before the chain was over, not after")
    }
}
