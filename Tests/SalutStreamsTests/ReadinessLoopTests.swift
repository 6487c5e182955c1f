import Dispatch
import Foundation
import Glibc
@testable import SalutStreams
import XCTest

/// The readiness loop against real sockets: what an owner hears, when, and that a cancelled
/// watch hears nothing even when its descriptor number comes back for another socket.
final class ReadinessLoopTests: XCTestCase {
    /// A connected pair of non-blocking Unix stream sockets.
    private func socketPair() throws -> (Int32, Int32) {
        var fds: [Int32] = [0, 0]
        guard socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0, &fds) == 0 else {
            throw XCTSkip("socketpair: \(String(cString: strerror(errno)))")
        }
        return (fds[0], fds[1])
    }

    private func send(_ fd: Int32, _ text: String) {
        let sent = text.utf8CString.withUnsafeBufferPointer { Glibc.send(fd, $0.baseAddress, text.utf8.count, 0) }
        XCTAssertEqual(sent, text.utf8.count)
    }

    /// Reads what is there (the handler's job: the loop reports level-triggered).
    private static func drain(_ fd: Int32) -> String {
        var bytes = [UInt8](repeating: 0, count: 256)
        let count = recv(fd, &bytes, bytes.count, 0)
        return count > 0 ? String(decoding: bytes.prefix(count), as: UTF8.self) : ""
    }

    func testAWatchHearsWhatItWantsAndNothingWhilePaused() throws {
        let (near, far) = try socketPair()
        defer { close(far) }
        let queue = DispatchQueue(label: "test.readiness")
        let heard = Locked<[String]>([])
        let first = expectation(description: "first message heard")
        let second = expectation(description: "second message heard after the pause")
        let early = expectation(description: "a message heard while paused")
        early.isInverted = true
        let paused = Locked(false)
        let watch = try ReadinessWatch(fd: near, queue: queue) { ready in
            guard case .success(let ready) = ready, ready.contains(.readable) else { return }
            if paused.value { early.fulfill() }
            let text = Self.drain(near)
            let count = heard.withLock { list -> Int in
                list.append(text); return list.count
            }
            if count == 1 { first.fulfill() } else if count == 2 { second.fulfill() }
        }
        try watch.want(.readable)
        send(far, "one")
        wait(for: [first], timeout: 10)

        // Paused: what arrives waits in the socket, and is heard once reading is wanted again.
        try queue.sync {
            try watch.want([])
            paused.withLock { $0 = true }
        }
        send(far, "two")
        wait(for: [early], timeout: 0.3)  // inverted: fails if the paused watch reports
        XCTAssertEqual(heard.value, ["one"])
        try queue.sync {
            paused.withLock { $0 = false }
            try watch.want(.readable)
        }
        wait(for: [second], timeout: 10)
        XCTAssertEqual(heard.value, ["one", "two"])
        queue.sync {
            watch.cancel(); close(near)
        }
    }

    func testACancelledWatchIsNotToldOfASocketThatReusesItsNumber() throws {
        let (near, far) = try socketPair()
        let queue = DispatchQueue(label: "test.readiness")
        let oldCalls = Locked(0)
        let old = try ReadinessWatch(fd: near, queue: queue) { _ in oldCalls.withLock { $0 += 1 } }
        try old.want(.readable)
        queue.sync {
            old.cancel(); close(near)
        }
        close(far)

        // The lowest free number is the one just closed: the new pair takes it.
        let (reused, peer) = try socketPair()
        defer { close(peer) }
        XCTAssertEqual(reused, near, "the descriptor number was not reused; the test proves nothing")
        let heard = expectation(description: "the new watch hears its socket")
        let new = try ReadinessWatch(fd: reused, queue: queue) { ready in
            if case .success(let ready) = ready, ready.contains(.readable), !Self.drain(reused).isEmpty {
                heard.fulfill()
            }
        }
        try new.want(.readable)
        send(peer, "hello")
        wait(for: [heard], timeout: 10)
        queue.sync {
            new.cancel(); close(reused)
        }
        XCTAssertEqual(oldCalls.value, 0)
    }

    func testAHungUpPeerIsReportedToAReader() throws {
        let (near, far) = try socketPair()
        let queue = DispatchQueue(label: "test.readiness")
        let ended = expectation(description: "end of data heard")
        let watch = try ReadinessWatch(fd: near, queue: queue) { ready in
            guard case .success(let ready) = ready, ready.contains(.readable) else { return }
            var byte: UInt8 = 0
            if recv(near, &byte, 1, 0) == 0 { ended.fulfill() }
        }
        try watch.want(.readable)
        close(far)
        wait(for: [ended], timeout: 10)
        queue.sync {
            watch.cancel(); close(near)
        }
    }
}
