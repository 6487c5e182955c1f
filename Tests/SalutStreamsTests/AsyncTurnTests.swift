import SalutStreams
import SalutTestSupport
import SalutTools
import XCTest

/// The tools' one turn (a terminal's question, `publish --listen`'s standard input and output).
final class AsyncTurnTests: XCTestCase {
    /// Takes the turn in a task of its own that records `name` once it has it, then waits for
    /// `done` before releasing.
    private func taker(
        _ turn: AsyncTurn, _ name: String, into log: Locked<[String]>, releaseOn done: AsyncStream<Void>
    ) -> Task<Bool, Never> {
        Task {
            guard await turn.take() else {
                log.withLock { $0.append("\(name) withdrawn") }
                return false
            }
            log.withLock { $0.append(name) }
            for await _ in done { break }
            turn.release()
            return true
        }
    }

    func testWaitersGetTheTurnInTheOrderTheyAsked() async throws {
        let turn = AsyncTurn()
        let first = await turn.take()
        XCTAssertTrue(first, "a free turn is taken at once")
        let log = Locked<[String]>([])
        let (done, finish) = AsyncStream<Void>.makeStream()
        finish.finish()  // each releases as soon as it has the turn
        var tasks: [Task<Bool, Never>] = []
        for name in ["first", "second", "third"] {
            tasks.append(taker(turn, name, into: log, releaseOn: done))
            // Each asks after the one before is waiting.
            let waiters = tasks.count
            try await eventually("\(name) waits", timeout: 5, interval: 0.002) { turn.waitingCount >= waiters }
        }
        XCTAssertEqual(log.withLock { $0 }, [], "nobody has it while it is held")
        turn.release()
        for task in tasks { _ = await task.value }
        XCTAssertEqual(log.withLock { $0 }, ["first", "second", "third"])
        let again = await turn.take()
        XCTAssertTrue(again, "free again after the last")
    }

    func testACancelledWaiterStopsAtOnceWithoutTheTurn() async throws {
        let turn = AsyncTurn()
        let held = await turn.take()
        XCTAssertTrue(held)
        let log = Locked<[String]>([])
        let (done, finish) = AsyncStream<Void>.makeStream()
        let leaving = taker(turn, "leaving", into: log, releaseOn: done)
        let staying = taker(turn, "staying", into: log, releaseOn: done)
        try await eventually("both wait", timeout: 5, interval: 0.002) { turn.waitingCount >= 2 }
        leaving.cancel()
        let tookIt = await leaving.value  // returns while the turn is still held
        XCTAssertFalse(tookIt)
        XCTAssertEqual(log.withLock { $0 }, ["leaving withdrawn"])
        turn.release()
        finish.finish()
        let stayed = await staying.value
        XCTAssertTrue(stayed, "the turn passed over the withdrawn one")
        XCTAssertEqual(log.withLock { $0 }, ["leaving withdrawn", "staying"])
    }
}
