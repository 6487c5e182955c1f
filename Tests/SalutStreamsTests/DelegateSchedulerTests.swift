import Dispatch
import Foundation
import SalutStreams
import SalutTestSupport
import Synchronization
import XCTest

/// The order, overlap and hand-over rules of delegate delivery, on dispatch queues (the run-loop
/// side is tested through streams and services on worker threads).
final class DelegateSchedulerTests: SalutTestCase {
    func testCallsKeepTheirOrderAndNeverOverlapEvenOnAConcurrentQueue() {
        let scheduler = DelegateScheduler(onMainRunLoop: false)
        scheduler.setDispatchQueue(.global())
        let seen = Locked<[Int]>([])
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
        old.suspend()  // its drain waits, so the calls are still waiting when the target changes
        scheduler.setDispatchQueue(old)
        let made = Locked<[(Int, Bool)]>([])
        for index in 0..<5 {
            scheduler.deliver { made.withLock { $0.append((index, DispatchQueue.getSpecific(key: newKey) == true)) } }
        }
        scheduler.setDispatchQueue(new)
        new.sync {}  // the new target's drain has run
        old.resume()
        old.sync {}  // and the old one's stale block too
        new.sync {}
        XCTAssertEqual(made.withLock { $0.map(\.0) }, [0, 1, 2, 3, 4], "each once, in order")
        XCTAssertTrue(made.withLock { $0.allSatisfy(\.1) }, "all on the new target")
    }

    func testScheduledNowhereTheWaitingCallsWaitForTheNextTarget() {
        let scheduler = DelegateScheduler(onMainRunLoop: false)
        let held = DispatchQueue(label: "held")
        held.suspend()
        scheduler.setDispatchQueue(held)
        let made = Locked<[String]>([])
        scheduler.deliver { made.withLock { $0.append("queued") } }
        scheduler.setDispatchQueue(nil)
        XCTAssertFalse(scheduler.isScheduled)
        scheduler.deliver { made.withLock { $0.append("sent nowhere") } }  // nowhere to go: not kept
        held.resume()
        held.sync {}
        XCTAssertEqual(made.withLock { $0 }, [], "nothing is made while scheduled nowhere")
        let next = DispatchQueue(label: "next")
        scheduler.setDispatchQueue(next)
        next.sync {}
        XCTAssertEqual(made.withLock { $0 }, ["queued"], "the waiting call goes to the next target")
    }

    func testACallUnderWayOnTheOldTargetEndsBeforeTheNewTargetStarts() {
        let scheduler = DelegateScheduler(onMainRunLoop: false)
        let old = DispatchQueue(label: "old")
        let new = DispatchQueue(label: "new")
        scheduler.setDispatchQueue(old)
        let entered = DispatchSemaphore(value: 0)
        let release = DispatchSemaphore(value: 0)
        let log = Locked<[String]>([])
        let done = DispatchSemaphore(value: 0)
        scheduler.deliver {
            log.withLock { $0.append("first begins") }
            entered.signal()
            release.wait()
            log.withLock { $0.append("first ends") }
        }
        XCTAssertEqual(entered.wait(timeout: .now() + 10), .success)
        scheduler.setDispatchQueue(new)  // while the first call is still running on `old`
        scheduler.deliver {
            log.withLock { $0.append("second") }
            done.signal()
        }
        new.sync {}  // had the new target started at once, the second call would have run by now
        XCTAssertEqual(log.withLock { $0 }, ["first begins"], "no overlap with the call under way")
        release.signal()
        XCTAssertEqual(done.wait(timeout: .now() + 10), .success)
        XCTAssertEqual(log.withLock { $0 }, ["first begins", "first ends", "second"])
    }

    func testAStreamMovedToAnotherRunLoopFromItsDelegateGetsItsNextEventThere() {
        /// Moves the stream from the run loop it is called on to `next` when it opens, as code
        /// that hands a stream to a worker thread does, and notes where `hasSpaceAvailable` comes.
        final class Mover: NSObject, StreamDelegate, @unchecked Sendable {
            // @unchecked: `next` is set before the stream opens; the expectation is thread-safe.
            let next: RunLoop
            let spaceOnNext: XCTestExpectation
            init(next: RunLoop, spaceOnNext: XCTestExpectation) {
                self.next = next
                self.spaceOnNext = spaceOnNext
            }
            func stream(_ aStream: Stream, handle eventCode: Stream.Event) {
                if eventCode == .openCompleted, RunLoop.current !== next {
                    aStream.remove(from: .current, forMode: .default)
                    aStream.schedule(in: next, forMode: .default)
                } else if eventCode == .hasSpaceAvailable, RunLoop.current === next {
                    spaceOnNext.fulfill()
                }
            }
        }
        let first = RunLoopThread(), second = RunLoopThread()
        defer { first.stop(); second.stop() }
        var input: InputStream?
        var output: OutputStream?
        Stream.getBoundStreams(withBufferSize: 64, inputStream: &input, outputStream: &output)
        let space = expectation(description: "hasSpaceAvailable on the second run loop")
        let mover = Mover(next: second.runLoop, spaceOnNext: space)
        output!.delegate = mover
        output!.schedule(in: first.runLoop, forMode: .default)
        input!.open()
        output!.open()
        wait(for: [space], timeout: 10)
        input!.close()
        output!.close()
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
