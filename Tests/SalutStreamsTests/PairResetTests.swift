import Foundation
@testable import SalutStreams
import SalutTestSupport
import XCTest

/// A pair reset by its owner (a watchdog's bound, say): whoever waits on its streams learns
/// why, not only that they closed.
final class PairResetTests: SalutTestCase {
    func testAReadWaitingOnAResetPairThrowsTheResetsReason() async throws {
        let port = freeLoopbackPort()
        // A peer that accepts and then says nothing.
        let peer = try Foreign(["python3", "-c", """
import socket, sys, time
listener = socket.socket()
listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
listener.bind(("127.0.0.1", int(sys.argv[1])))
listener.listen(1)
print("LISTENING", flush=True)
conn, _ = listener.accept()
time.sleep(30)
""", "\(port)"])
        defer { peer.stop() }
        XCTAssertTrue(peer.waitForOutput(containing: "LISTENING", seconds: 10), peer.output)
        let pair = SocketStreams.pair(toHost: "127.0.0.1", port: port)
        try await withDeadline(10, "open") { try await pair.open() }
        // Waiting on the silent peer when the reset comes, or starting just after it: either
        // way it must end with the reset's reason.
        let reading = Task { () -> Result<Data, any Error> in
            do { return .success(try await readBytes(pair.input, count: 1)) } catch { return .failure(error) }
        }
        pair.reset(.limitExceeded("no progress from the peer for 60s"))
        let outcome = try await withDeadline(10, "the read's end") { await reading.value }
        guard case .failure(let error) = outcome else { return XCTFail("the read returned \(outcome)") }
        XCTAssertEqual(error as? SocketStreamError, .limitExceeded("no progress from the peer for 60s"), "\(error)")
    }
}
