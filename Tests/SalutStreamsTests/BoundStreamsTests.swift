import Foundation
import SalutTestSupport
import XCTest

@testable import SalutStreams

/// Records stream events on the run loop of a worker thread.
final class EventLog: NSObject, StreamDelegate, @unchecked Sendable {
    // @unchecked: `recorded` is a `Locked` box; `onEvent` is never set once the log is a delegate (no test sets it).
    private let recorded = Locked<[(ObjectIdentifier, Stream.Event)]>([])
    var onEvent: ((Stream, Stream.Event) -> Void)?

    func stream(_ aStream: Stream, handle eventCode: Stream.Event) {
        recorded.withLock { $0.append((ObjectIdentifier(aStream), eventCode)) }
        onEvent?(aStream, eventCode)
    }

    func events(of stream: Stream) -> [Stream.Event] {
        recorded.withLock { recorded in
            recorded.filter { $0.0 == ObjectIdentifier(stream) }.map(\.1)
        }
    }

    /// Waits until `stream` has received `count` events (or `seconds` pass).
    func wait(for stream: Stream, count: Int, seconds: Double = 5) -> [Stream.Event] {
        eventually(timeout: seconds, interval: 0.005) { events(of: stream).count >= count }
        return events(of: stream)
    }
}

func bytes(_ stream: InputStream, max: Int) -> [UInt8] {
    var buffer = [UInt8](repeating: 0, count: max)
    let n = stream.read(&buffer, maxLength: max)
    return n > 0 ? Array(buffer.prefix(n)) : []
}

func write(_ stream: OutputStream, _ bytes: [UInt8]) -> Int {
    bytes.withUnsafeBufferPointer { stream.write($0.baseAddress!, maxLength: $0.count) }
}

final class BoundStreamsTests: SalutTestCase {
    static func buffer(of pair: BoundStreamPair) -> BoundBuffer { (pair.input as! BoundInputStream).buffer }
    static func scheduler(of stream: InputStream) -> DelegateScheduler {
        (stream as! BoundInputStream).events.scheduler
    }

    /// The two ends of a connection in memory talk both ways, each closing its own way: an
    /// output's close is the other end's end of data, an input's close fails the other's writes.
    func testTheTwoEndsOfAConnectionInMemoryTalkBothWays() async throws {
        let (client, server) = BoundStreamPair.makeConnection(bufferSize: 8)
        try await client.open()
        try await server.open()
        let scratch = UnsafeMutableRawBufferPointer.allocate(byteCount: 64, alignment: 1)
        defer { scratch.deallocate() }
        // More than the buffer holds: the write waits for the reader, which takes it all.
        let question = Data((0..<40).map { UInt8($0) })
        async let asked: Void = client.output.write(question)
        var heard = Data()
        while heard.count < question.count {
            let count = try await server.input.read(into: scratch)
            XCTAssertGreaterThan(count, 0)
            heard.append(contentsOf: scratch.prefix(count))
        }
        try await asked
        XCTAssertEqual(heard, question)
        try await server.output.write(Data("yes".utf8))
        try await server.finishSending()
        let answer = try await client.input.read(into: scratch)
        XCTAssertEqual(answer, 3)
        XCTAssertEqual(Data(scratch.prefix(3)), Data("yes".utf8))
        let end = try await client.input.read(into: scratch)
        XCTAssertEqual(end, 0, "the server's output closed: end of data")
        XCTAssertNil(client.peerTrust)
        server.input.close()
        do {
            try await client.output.write(Data([1]))
            XCTFail("a write to a closed input must fail")
        } catch {
            XCTAssertEqual(error as? StreamFailure, .readerClosed)
        }
    }
    func testCallSiteAsOnMacOS() {
        var input: InputStream?
        var output: OutputStream?
        Stream.getBoundStreams(withBufferSize: 1024, inputStream: &input, outputStream: &output)
        XCTAssertNotNil(input)
        XCTAssertNotNil(output)
        XCTAssertEqual(input?.streamStatus, .notOpen)
        XCTAssertEqual(output?.streamStatus, .notOpen)
    }

    func testPartialWritesOrderAndAvailability() {
        let pair = BoundStreamPair(bufferSize: 8)
        pair.input.open(); pair.output.open()
        XCTAssertEqual(pair.input.streamStatus, .open)
        XCTAssertFalse(pair.input.hasBytesAvailable)
        XCTAssertTrue(pair.output.hasSpaceAvailable)
        XCTAssertEqual(write(pair.output, Array(0..<20)), 8, "a write takes at most the free space")
        XCTAssertFalse(pair.output.hasSpaceAvailable, "full: a write would block")
        XCTAssertTrue(pair.input.hasBytesAvailable)
        XCTAssertEqual(bytes(pair.input, max: 5), [0, 1, 2, 3, 4])
        XCTAssertTrue(pair.output.hasSpaceAvailable)
        XCTAssertEqual(write(pair.output, Array(8..<20)), 5, "wraps around the ring")
        XCTAssertEqual(bytes(pair.input, max: 100), [5, 6, 7, 8, 9, 10, 11, 12])
        XCTAssertFalse(pair.input.hasBytesAvailable, "empty: a read would block")
    }

    func testEndOfDataAndStatuses() {
        let pair = BoundStreamPair(bufferSize: 16)
        pair.input.open(); pair.output.open()
        XCTAssertEqual(write(pair.output, [1, 2, 3]), 3)
        pair.output.close()
        XCTAssertEqual(pair.output.streamStatus, .closed)
        XCTAssertEqual(bytes(pair.input, max: 2), [1, 2], "buffered bytes survive the writer's close")
        XCTAssertEqual(bytes(pair.input, max: 2), [3])
        var scratch = [UInt8](repeating: 0, count: 4)
        XCTAssertEqual(pair.input.read(&scratch, maxLength: 4), 0, "end of data")
        XCTAssertEqual(pair.input.streamStatus, .atEnd)
        pair.input.close()
        XCTAssertEqual(pair.input.streamStatus, .closed)
        XCTAssertEqual(pair.input.read(&scratch, maxLength: 4), -1, "a closed stream reads -1")
    }

    func testClosingTheReaderFailsWrites() {
        let pair = BoundStreamPair(bufferSize: 4)
        pair.input.open(); pair.output.open()
        XCTAssertEqual(write(pair.output, [1, 2, 3, 4]), 4)
        let blocked = expectation(description: "a blocked writer wakes when the reader closes")
        let output = HandedOver(pair.output)
        DispatchQueue.global().async {
            let n = write(output.value, [5])
            XCTAssertEqual(n, -1)
            blocked.fulfill()
        }
        XCTAssertTrue(eventually(timeout: 5, interval: 0.005) { Self.buffer(of: pair).blockedThreads.writers == 1 })
        pair.input.close()
        wait(for: [blocked], timeout: 5)
        XCTAssertEqual(pair.output.streamStatus, .error)
        XCTAssertEqual(pair.output.streamError as? StreamFailure, .readerClosed)
        XCTAssertEqual(write(pair.output, [6]), -1)
    }

    func testUnscheduledReadBlocksUntilDataArrives() {
        let pair = BoundStreamPair(bufferSize: 16)
        pair.input.open(); pair.output.open()
        let got = expectation(description: "blocked read returns the bytes written later")
        let input = HandedOver(pair.input)
        let started = DispatchSemaphore(value: 0)
        DispatchQueue.global().async {
            started.signal()
            XCTAssertEqual(bytes(input.value, max: 16), [42, 43])
            got.fulfill()
        }
        started.wait()
        XCTAssertTrue(eventually(timeout: 5, interval: 0.005) { Self.buffer(of: pair).blockedThreads.readers == 1 })
        XCTAssertEqual(write(pair.output, [42, 43]), 2)
        wait(for: [got], timeout: 5)
    }

    func testScheduledEventsComeWhenTrueAndNeverInALoop() {
        let worker = RunLoopThread()
        let pair = BoundStreamPair(bufferSize: 4)
        let second = BoundStreamPair(bufferSize: 4)
        defer {
            // Unscheduled before the thread goes: nothing may be posted to a run loop that stopped.
            for stream in [pair.input, pair.output, second.input, second.output] as [Stream] {
                stream.remove(from: worker.runLoop, forMode: .default)
                stream.close()
            }
            worker.stop()
        }
        let log = EventLog()
        pair.input.delegate = log
        pair.output.delegate = log
        pair.input.schedule(in: worker.runLoop, forMode: .default)
        pair.output.schedule(in: worker.runLoop, forMode: .default)
        pair.input.open(); pair.output.open()
        XCTAssertEqual(log.wait(for: pair.input, count: 1), [.openCompleted])
        XCTAssertEqual(log.wait(for: pair.output, count: 2), [.openCompleted, .hasSpaceAvailable])

        XCTAssertEqual(write(pair.output, [1]), 1)
        XCTAssertEqual(log.wait(for: pair.input, count: 2), [.openCompleted, .hasBytesAvailable])
        XCTAssertEqual(write(pair.output, [2]), 1)
        // Every event the write made due was handed to the scheduler before `write` returned.
        XCTAssertTrue(eventually(timeout: 5, interval: 0.005) { Self.scheduler(of: pair.input).isQuiet })
        XCTAssertEqual(
            log.events(of: pair.input).filter { $0 == .hasBytesAvailable }.count, 1,
            "no second hasBytesAvailable until the client reads")
        XCTAssertEqual(bytes(pair.input, max: 1), [1])
        XCTAssertEqual(log.wait(for: pair.input, count: 3).last, .hasBytesAvailable, "bytes remain after the read")
        XCTAssertEqual(bytes(pair.input, max: 1), [2])
        pair.output.close()
        XCTAssertEqual(log.wait(for: pair.input, count: 4).last, .endEncountered)
        XCTAssertTrue(eventually(timeout: 5, interval: 0.005) { Self.scheduler(of: pair.input).isQuiet })
        XCTAssertEqual(log.events(of: pair.input).filter { $0 == .endEncountered }.count, 1)

        // The reader closing is an error for a scheduled writer.
        second.output.delegate = log
        second.output.schedule(in: worker.runLoop, forMode: .default)
        second.input.open(); second.output.open()
        second.input.close()
        XCTAssertEqual(log.wait(for: second.output, count: 3).last, .errorOccurred)
    }

    func testOneGibibyteBetweenTwoThreadsArrivesIntact() {
        let pair = BoundStreamPair(bufferSize: 64 * 1024)
        pair.input.open(); pair.output.open()
        let total = 1 << 30, chunk = 64 * 1024
        let blocks = total / chunk
        let input = HandedOver(pair.input), output = HandedOver(pair.output)
        let done = expectation(description: "consumer verified every byte")
        // Each block is a fixed pattern with its index stamped in front: a lost, repeated,
        // reordered or corrupted byte changes what the consumer sees.
        var pattern = [UInt8](repeating: 0, count: chunk)
        for i in 0..<chunk { pattern[i] = UInt8(truncatingIfNeeded: i &* 31 &+ 7) }
        let template = pattern
        DispatchQueue.global().async {
            var block = template
            for index in 0..<blocks {
                withUnsafeBytes(of: UInt64(index).littleEndian) { block.replaceSubrange(0..<8, with: $0) }
                var offset = 0
                while offset < chunk {
                    let n = block.withUnsafeBufferPointer {
                        output.value.write($0.baseAddress! + offset, maxLength: chunk - offset)
                    }
                    XCTAssertGreaterThan(n, 0)
                    if n <= 0 { return }
                    offset += n
                }
            }
            output.value.close()
        }
        DispatchQueue.global().async {
            var expected = template
            var received = [UInt8](repeating: 0, count: chunk)
            var filled = 0, index = 0, mismatches = 0, bytesSeen = 0
            while true {
                let n = received.withUnsafeMutableBufferPointer {
                    input.value.read($0.baseAddress! + filled, maxLength: chunk - filled)
                }
                if n <= 0 { break }
                filled += n
                bytesSeen += n
                if filled == chunk {
                    withUnsafeBytes(of: UInt64(index).littleEndian) { expected.replaceSubrange(0..<8, with: $0) }
                    if received != expected { mismatches += 1 }
                    index += 1
                    filled = 0
                }
            }
            XCTAssertEqual(bytesSeen, total)
            XCTAssertEqual(index, blocks)
            XCTAssertEqual(mismatches, 0)
            done.fulfill()
        }
        wait(for: [done], timeout: 600)
    }

    func testAsyncChunksAndWritesSuspendWhileFull() async throws {
        let pair = BoundStreamPair(bufferSize: 1000)
        let payload = Data((0..<300_000).map { UInt8(truncatingIfNeeded: $0 &* 13) })
        let output = HandedOver(pair.output), input = HandedOver(pair.input)
        let writer = Task {
            try await output.value.write(payload)
            output.value.close()
        }
        var received = Data()
        for try await chunk in input.value.chunks(ofSize: 777) {
            XCTAssertLessThanOrEqual(chunk.count, 777)
            received.append(chunk)
        }
        try await writer.value
        XCTAssertEqual(received, payload)

        let closed = BoundStreamPair(bufferSize: 10)
        closed.input.open()
        closed.input.close()
        do {
            try await HandedOver(closed.output).value.write(Data(count: 100))
            XCTFail("writing after the reader closed must throw")
        } catch let error as StreamFailure {
            XCTAssertEqual(error, .readerClosed)
        }
    }
}

/// Written the way Apple-platform code is: a delegate class on a worker thread that schedules
/// its streams in `RunLoop.current` and calls `run()`.
private final class WorkerThreadEcho: NSObject, StreamDelegate {
    let input: InputStream
    let output: OutputStream
    let message: [UInt8]
    var received: [UInt8] = []
    var sent = 0

    init(input: InputStream, output: OutputStream, message: String) {
        self.input = input
        self.output = output
        self.message = Array(message.utf8)
    }

    func stream(_ aStream: Stream, handle eventCode: Stream.Event) {
        switch eventCode {
        case .hasSpaceAvailable where aStream === output && sent < message.count:
            let n = message[sent...].withUnsafeBufferPointer { output.write($0.baseAddress!, maxLength: $0.count) }
            if n > 0 { sent += n }
            if sent == message.count { output.close() }
        case .hasBytesAvailable:
            var buffer = [UInt8](repeating: 0, count: 64)
            let n = input.read(&buffer, maxLength: buffer.count)
            if n > 0 { received += buffer[0..<n] }
        case .endEncountered:
            input.close()
        default:
            break
        }
    }
}

final class WorkerRunLoopTests: XCTestCase {
    func testStreamsScheduledOnAWorkerThreadKeepItsRunLoopRunningUntilTheyClose() {
        let finished = DispatchSemaphore(value: 0)
        let outcome = Locked<(received: String, seconds: Double)>(("", 0))
        let thread = Thread {
            var input: InputStream?
            var output: OutputStream?
            Stream.getBoundStreams(withBufferSize: 8, inputStream: &input, outputStream: &output)
            let echo = WorkerThreadEcho(input: input!, output: output!, message: "hello from a worker run loop")
            input!.delegate = echo
            output!.delegate = echo
            input!.schedule(in: .current, forMode: .default)
            output!.schedule(in: .current, forMode: .default)
            input!.open()
            output!.open()
            let start = Date()
            RunLoop.current.run()  // on Apple's systems: returns once both streams are closed
            let received = String(decoding: echo.received, as: UTF8.self), seconds = Date().timeIntervalSince(start)
            outcome.withLock { $0 = (received, seconds) }
            finished.signal()
        }
        thread.start()
        XCTAssertEqual(finished.wait(timeout: .now() + 10), .success, "run() returns once both streams are closed")
        XCTAssertEqual(outcome.value.received, "hello from a worker run loop", "every event came while run() ran")
    }

    func testRemovingAStreamFromTheRunLoopLetsRunReturn() {
        let finished = DispatchSemaphore(value: 0)
        let events = Locked<[Stream.Event]>([])
        final class Log: NSObject, StreamDelegate {
            let events: Locked<[Stream.Event]>
            init(_ events: Locked<[Stream.Event]>) { self.events = events }
            func stream(_ aStream: Stream, handle eventCode: Stream.Event) {
                events.withLock { $0.append(eventCode) }
                // Done with it: off the run loop, still open.
                if eventCode == .openCompleted { aStream.remove(from: .current, forMode: .default) }
            }
        }
        let thread = Thread {
            let pair = BoundStreamPair(bufferSize: 8)
            let log = Log(events)
            pair.input.delegate = log
            pair.input.schedule(in: .current, forMode: .default)
            pair.input.open()
            RunLoop.current.run()
            pair.input.close()
            finished.signal()
        }
        thread.start()
        XCTAssertEqual(finished.wait(timeout: .now() + 10), .success, "run() returns once the stream is removed")
        XCTAssertEqual(events.value, [.openCompleted])
    }
}
