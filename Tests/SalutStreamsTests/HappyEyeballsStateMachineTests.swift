@testable import SalutStreams
import SalutTestSupport
import XCTest

/// Happy Eyeballs without sockets: the machine is driven by events, and time by a fake clock
/// that fires the timers the machine armed, in order.
final class HappyEyeballsStateMachineTests: SalutTestCase {
    typealias Machine = HappyEyeballs.StateMachine
    typealias ID = Machine.AttemptID

    let v4a = SocketAddress(ipv4: [198, 18, 0, 1], port: 80)
    let v4b = SocketAddress(ipv4: [198, 18, 0, 2], port: 80)
    let v6a = SocketAddress(ipv6: [0xfe, 0x80] + Array(repeating: 0, count: 13) + [1], port: 80, scopeID: 2)
    let v6b = SocketAddress(ipv6: [0xfe, 0x80] + Array(repeating: 0, count: 13) + [2], port: 80, scopeID: 2)

    /// A clock for the machine: keeps the virtual time and the two timers it may have armed,
    /// and records which attempts started when.
    struct FakeClock {
        var machine: Machine
        var now: Duration = .zero
        var pacerAt: Duration?
        var deadlineAt: Duration?
        var started: [(at: Duration, id: ID, address: SocketAddress)] = []
        var outcome: Result<ID, SocketStreamError>?
        var abandoned: [ID] = []

        init(_ machine: Machine) { self.machine = machine }

        mutating func apply(_ actions: [Machine.Action]) {
            for action in actions {
                switch action {
                case .startDeadline(let after): deadlineAt = now + after
                case .schedulePacer(let after): pacerAt = now + after
                case .beginAttempt(let id, let address): started.append((now, id, address))
                case .abandonAttempt(let id): abandoned.append(id)
                case .succeed(let id): outcome = .success(id); pacerAt = nil; deadlineAt = nil
                case .fail(let error): outcome = .failure(error); pacerAt = nil; deadlineAt = nil
                }
            }
        }

        mutating func start() { apply(machine.start()) }

        /// Moves time forward, firing due timers in order.
        mutating func advance(by step: Duration) {
            let end = now + step
            while true {
                let due = [pacerAt, deadlineAt].compactMap { $0 }.filter { $0 <= end }.min()
                guard let due else { break }
                now = due
                if pacerAt == due {
                    pacerAt = nil
                    apply(machine.pacerFired())
                } else {
                    deadlineAt = nil
                    apply(machine.deadlineReached())
                }
            }
            now = end
        }

        mutating func fail(_ id: ID, _ error: SocketStreamError) { apply(machine.attemptFailed(id, error)) }
        mutating func connect(_ id: ID) { apply(machine.attemptConnected(id)) }
    }

    func testInterleavesFamiliesStartingWithIPv6() {
        XCTAssertEqual(Machine.interleave([v4a, v4b, v6a, v6b]), [v6a, v4a, v6b, v4b])
        XCTAssertEqual(Machine.interleave([v4a, v4b]), [v4a, v4b])
        XCTAssertEqual(Machine.interleave([v4a, v6a, v6b]), [v6a, v4a, v6b])
    }

    func testStartsIPv6FirstAndTheNextFamilyAfterTheDelay() {
        var clock = FakeClock(Machine(addresses: [v4a, v6a], target: "h:80"))
        clock.start()
        XCTAssertEqual(clock.started.map(\.address), [v6a])
        XCTAssertEqual(clock.deadlineAt, .seconds(30))
        XCTAssertEqual(clock.pacerAt, .milliseconds(250))
        clock.advance(by: .milliseconds(249))
        XCTAssertEqual(clock.started.count, 1, "no second attempt before 250 ms")
        clock.advance(by: .milliseconds(1))
        XCTAssertEqual(clock.started.map(\.address), [v6a, v4a])
        XCTAssertEqual(clock.started[1].at, .milliseconds(250))
        XCTAssertNil(clock.pacerAt, "nothing left to pace")
        // The IPv4 attempt wins while IPv6 is still pending: IPv6 is abandoned.
        clock.connect(clock.started[1].id)
        XCTAssertEqual(try clock.outcome?.get(), clock.started[1].id)
        XCTAssertEqual(clock.abandoned, [clock.started[0].id])
        XCTAssertNil(clock.deadlineAt)
    }

    func testAFailedAttemptStartsTheNextAtOnce() {
        var clock = FakeClock(Machine(addresses: [v6a, v4a, v4b], target: "h:80"))
        clock.start()
        clock.advance(by: .milliseconds(10))
        clock.fail(clock.started[0].id, .connectionRefused("\(v6a)"))
        XCTAssertEqual(clock.started.map(\.address), [v6a, v4a])
        XCTAssertEqual(clock.started[1].at, .milliseconds(10))
        XCTAssertEqual(clock.pacerAt, .milliseconds(260), "the pacer restarts from the new attempt")
        clock.advance(by: .milliseconds(250))
        XCTAssertEqual(clock.started.map(\.address), [v6a, v4a, v4b])
        XCTAssertNil(clock.outcome)
    }

    func testEveryAttemptsErrorIsKeptAndReported() {
        var clock = FakeClock(Machine(addresses: [v4a, v6a], target: "h:80"))
        clock.start()
        clock.fail(clock.started[0].id, .unreachable("\(v6a)"))
        clock.fail(clock.started[1].id, .connectionRefused("\(v4a)"))
        guard case .failure(let error) = clock.outcome else {
            return XCTFail("expected a failure, got \(String(describing: clock.outcome))")
        }
        guard error.code == .connectionRefused, let detail = error.subject else {
            return XCTFail("refused says most: \(error)")
        }
        XCTAssertTrue(detail.contains("\(v6a): \(v6a) is unreachable"), detail)
        XCTAssertTrue(detail.contains("\(v4a): connection to \(v4a) refused"), detail)
        XCTAssertEqual(clock.machine.failures.count, 2)
    }

    func testASingleAttemptsErrorIsReportedAsItIs() {
        var clock = FakeClock(Machine(addresses: [v4a], target: "h:80"))
        clock.start()
        clock.fail(clock.started[0].id, .connectionRefused("\(v4a)"))
        guard case .failure(let error) = clock.outcome else { return XCTFail() }
        XCTAssertEqual(error, .connectionRefused("\(v4a)"))
    }

    func testWaitsForAttemptsStillInFlightBeforeFailing() {
        var clock = FakeClock(Machine(addresses: [v6a, v4a], target: "h:80"))
        clock.start()
        clock.advance(by: .milliseconds(250))
        clock.fail(clock.started[1].id, .connectionRefused("\(v4a)"))
        XCTAssertNil(clock.outcome, "the IPv6 attempt may still connect")
        clock.connect(clock.started[0].id)
        XCTAssertEqual(try clock.outcome?.get(), clock.started[0].id)
    }

    func testDeadlineAbandonsEveryAttemptAndNamesEarlierFailures() {
        var clock = FakeClock(Machine(addresses: [v6a, v4a, v4b], target: "h:80", timeout: .seconds(2)))
        clock.start()
        clock.fail(clock.started[0].id, .unreachable("\(v6a)"))
        clock.advance(by: .seconds(3))
        guard case .failure(let error) = clock.outcome, error.code == .timedOut, let detail = error.subject else {
            return XCTFail("\(String(describing: clock.outcome))")
        }
        XCTAssertTrue(detail.hasPrefix("h:80"), detail)
        XCTAssertTrue(detail.contains("unreachable"), detail)
        XCTAssertEqual(Set(clock.abandoned), Set(clock.started.dropFirst().map(\.id)))
        XCTAssertEqual(clock.started.count, 3, "the third attempt started at 250 ms")
    }

    func testCancelAbandonsEverythingOnce() {
        var clock = FakeClock(Machine(addresses: [v6a, v4a], target: "h:80"))
        clock.start()
        clock.apply(clock.machine.cancelled())
        XCTAssertEqual(clock.outcome.map { if case .failure(.cancelled) = $0 { true } else { false } }, true)
        XCTAssertEqual(clock.abandoned, [clock.started[0].id])
        XCTAssertEqual(clock.machine.cancelled(), [])
        XCTAssertEqual(clock.machine.pacerFired(), [])
        XCTAssertEqual(clock.machine.deadlineReached(), [])
    }

    func testCancelBeforeStartFails() {
        var machine = Machine(addresses: [v4a], target: "h:80")
        XCTAssertEqual(machine.cancelled(), [.fail(.cancelled)])
        XCTAssertEqual(machine.start(), [])
    }

    func testALateConnectionAfterTheWinnerIsClosed() {
        var clock = FakeClock(Machine(addresses: [v6a, v4a], target: "h:80"))
        clock.start()
        clock.advance(by: .milliseconds(250))
        let (first, second) = (clock.started[0].id, clock.started[1].id)
        clock.connect(first)
        XCTAssertEqual(clock.machine.attemptConnected(second), [.abandonAttempt(second)])
        XCTAssertEqual(clock.machine.attemptFailed(second, .cancelled), [])
    }

    func testNoAddressesIsUnreachable() {
        var machine = Machine(addresses: [], target: "h:80")
        XCTAssertEqual(machine.start(), [.fail(.unreachable("h:80"))])
    }
}
