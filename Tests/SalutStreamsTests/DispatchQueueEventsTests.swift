import Dispatch
import Foundation
import SalutStreams
import SalutTestSupport
import XCTest

/// An echo client written the way Apple's samples write one with dispatch queues: a delegate
/// class, `CFReadStreamSetDispatchQueue`/`CFWriteStreamSetDispatchQueue` before `open()`, and
/// all the work in `stream(_:handle:)`. It records whether every call came on its queue.
private final class QueueEchoClient: NSObject, StreamDelegate, @unchecked Sendable {
    // @unchecked: every property is used only on `queue` (the delegate calls come there), and
    // read by the test after `done` is signalled.
    let queue = DispatchQueue(label: "echo-client")
    private let key = DispatchSpecificKey<Bool>()
    let done = DispatchSemaphore(value: 0)
    var input: InputStream?
    var output: OutputStream?
    var message = Array("hello over a queue\n".utf8)
    var received: [UInt8] = []
    var events: [Stream.Event] = []
    var callsOffTheQueue = 0

    override init() {
        super.init()
        queue.setSpecific(key: key, value: true)
    }

    func start(input: InputStream, output: OutputStream) {
        self.input = input
        self.output = output
        input.delegate = self
        output.delegate = self
        CFReadStreamSetDispatchQueue(input, queue)
        CFWriteStreamSetDispatchQueue(output, queue)
        input.open()
        output.open()
    }

    func stream(_ aStream: Stream, handle eventCode: Stream.Event) {
        if DispatchQueue.getSpecific(key: key) != true { callsOffTheQueue += 1 }
        events.append(eventCode)
        switch eventCode {
        case .hasSpaceAvailable:
            guard aStream === output, !message.isEmpty else { return }
            let n = output!.write(message, maxLength: message.count)
            if n > 0 { message.removeFirst(n) }
        case .hasBytesAvailable:
            var buffer = [UInt8](repeating: 0, count: 256)
            let n = input!.read(&buffer, maxLength: buffer.count)
            if n > 0 { received += buffer.prefix(n) }
            if received.last == UInt8(ascii: "\n") { finish() }
        case .errorOccurred, .endEncountered:
            finish()
        default:
            break
        }
    }

    private func finish() {
        input?.close()
        output?.close()
        done.signal()
    }
}

final class DispatchQueueEventsTests: XCTestCase {
    func testStreamEventsArriveOnTheDispatchQueueAsWithCFReadStreamSetDispatchQueue() throws {
        // The server: Salut's listener, echoing one line back.
        let listener = try StreamListener(port: 0)
        defer { listener.stop() }
        let server = Task {
            for await connection in listener.connections {
                let streams = connection.streams
                try await streams.open()
                var line = Data()
                for try await chunk in streams.input.chunks {
                    line += chunk
                    if line.last == UInt8(ascii: "\n") { break }
                }
                try await streams.output.write(line)
                streams.output.close()
                return
            }
        }
        defer { server.cancel() }

        // What `Stream.getStreamsToHost` gives (SalutDiscovery's spelling of this call).
        let pair = SocketStreams.pair(toHost: "127.0.0.1", port: Int(listener.port))
        let client = QueueEchoClient()
        client.queue.sync { client.start(input: pair.input, output: pair.output) }
        XCTAssertEqual(client.done.wait(timeout: .now() + 20), .success, "the echo came back through queue events")
        client.queue.sync {
            XCTAssertEqual(String(decoding: client.received, as: UTF8.self), "hello over a queue\n")
            XCTAssertEqual(client.callsOffTheQueue, 0, "every delegate call ran on the queue")
            XCTAssertEqual(client.events.first, .openCompleted)
        }
    }

    func testARunLoopReplacesTheQueueAndNilStopsDelivery() throws {
        var input: InputStream?
        var output: OutputStream?
        Stream.getBoundStreams(withBufferSize: 64, inputStream: &input, outputStream: &output)
        let log = EventLog()
        let queue = DispatchQueue(label: "events")
        input!.delegate = log
        CFReadStreamSetDispatchQueue(input, queue)
        input!.open(); output!.open()
        XCTAssertEqual(log.wait(for: input!, count: 1), [.openCompleted], "delivered on the queue")

        CFReadStreamSetDispatchQueue(input, nil)  // no queue, no run loop: nothing is delivered
        XCTAssertEqual(write(output!, [1, 2, 3]), 3)
        queue.sync {}  // anything already queued has run
        XCTAssertEqual(log.events(of: input!), [.openCompleted], "nothing after the queue was taken away")

        input!.setDelegateQueue(queue)  // Salut's spelling; bytes waiting are announced at once
        XCTAssertEqual(log.wait(for: input!, count: 2), [.openCompleted, .hasBytesAvailable])

        input!.close(); output!.close()
    }

    func testScheduledInARunLoopTheStreamLeavesTheQueue() throws {
        /// Notes on which thread's run loop, or which queue, each event arrived.
        final class Probe: NSObject, StreamDelegate, @unchecked Sendable {
            // @unchecked: `queueEvents` is a `Locked` box; the rest are constants (expectations are thread-safe).
            let queueEvents = Locked<[Stream.Event]>([])
            let queueKey = DispatchSpecificKey<Bool>()
            let worker: RunLoop
            let opened: XCTestExpectation
            let onWorker: XCTestExpectation
            init(worker: RunLoop, opened: XCTestExpectation, onWorker: XCTestExpectation) {
                self.worker = worker
                self.opened = opened
                self.onWorker = onWorker
            }
            func stream(_ aStream: Stream, handle eventCode: Stream.Event) {
                if DispatchQueue.getSpecific(key: queueKey) == true {
                    queueEvents.withLock { $0.append(eventCode) }
                    if eventCode == .openCompleted { opened.fulfill() }
                } else if RunLoop.current === worker, eventCode == .hasBytesAvailable {
                    onWorker.fulfill()
                }
            }
        }
        let worker = RunLoopThread()
        defer { worker.stop() }
        let queue = DispatchQueue(label: "events")
        let probe = Probe(
            worker: worker.runLoop, opened: expectation(description: "opened on the queue"),
            onWorker: expectation(description: "bytes announced on the worker's run loop"))
        queue.setSpecific(key: probe.queueKey, value: true)
        var input: InputStream?
        var output: OutputStream?
        Stream.getBoundStreams(withBufferSize: 64, inputStream: &input, outputStream: &output)
        input!.delegate = probe
        CFReadStreamSetDispatchQueue(input, queue)
        input!.open(); output!.open()
        wait(for: [probe.opened], timeout: 10)

        input!.schedule(in: worker.runLoop, forMode: .default)  // leaves the queue
        XCTAssertEqual(write(output!, [7]), 1)
        wait(for: [probe.onWorker], timeout: 10)
        queue.sync {}
        XCTAssertEqual(probe.queueEvents.value, [.openCompleted], "nothing more on the queue")
        input!.close(); output!.close()
    }
}
