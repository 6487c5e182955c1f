import Foundation
import SalutStreams

/// Properties of a bound stream pair (`Stream.getBoundStreams`, ``BoundStreamPair``) driven by
/// a program on one thread and checked against a model of the buffer.
///
/// The first input byte sizes the buffer (as a signed byte: sizes below 1 must act as 1), the
/// second picks the API that makes the pair; every later byte starts an operation: open or
/// close either end, let go of either end (its `deinit` closes it), write or read `n` bytes.
/// After every step the streams' status, `hasBytesAvailable`, `hasSpaceAvailable` and
/// `streamError` must be what the model says; reads must return exactly the oldest unread
/// bytes (nothing lost, reordered or invented, nothing written past the count returned), a
/// write must take exactly the free space it is offered, end of data and failures must come
/// as documented (0 and `atEnd` once the writer is closed and drained, -1 on a closed or
/// unopened stream, -1 and ``StreamFailure/readerClosed`` for a write after the reader went).
///
/// Nothing here may block: an operation the model says would block is skipped, and since the
/// availability checks must already agree with the model, a wrong model or a wrong stream is a
/// violation before it can be a hang.
public enum BoundPairChecks {
    /// Runs the program `input` spells.
    public static func check(_ input: [UInt8]) throws(PropertyViolation) {
        var reader = ByteReader(input)
        let requested = Int(Int8(bitPattern: reader.byte()))
        var inputStream: InputStream?
        var outputStream: OutputStream?
        if reader.byte() & 1 == 0 {
            let pair = BoundStreamPair(bufferSize: requested)
            (inputStream, outputStream) = (pair.input, pair.output)
        } else {
            Stream.getBoundStreams(withBufferSize: requested, inputStream: &inputStream, outputStream: &outputStream)
        }
        var model = Model(capacity: max(1, requested))
        try model.compare(inputStream, outputStream, after: "making the pair")

        while !reader.isAtEnd {
            let operation = reader.byte()
            let step: String
            switch operation % 10 {
            case 0:
                step = "input.open()"
                inputStream?.open()
                if inputStream != nil, model.inputStatus == .notOpen { model.inputStatus = .open }
            case 1:
                step = "output.open()"
                outputStream?.open()
                if outputStream != nil, model.outputStatus == .notOpen { model.outputStatus = .open }
            case 2:
                step = "input.close()"
                inputStream?.close()
                if inputStream != nil { model.closeReader() }
            case 3:
                step = "output.close()"
                outputStream?.close()
                if outputStream != nil { model.closeWriter() }
            case 4:
                step = "letting the input go"
                if inputStream != nil { model.readerLetGo() }
                inputStream = nil
            case 5:
                step = "letting the output go"
                if outputStream != nil { model.writerLetGo() }
                outputStream = nil
            case 6, 7:
                // 7: offer exactly the free space, one byte less or one more.
                let length = operation % 10 == 6 ? Int(reader.byte()) : max(0, model.space + Int(reader.byte() % 3) - 1)
                step = "write(\(length))"
                guard let outputStream else { continue }
                try write(length, to: outputStream, model: &model)
            default:
                // 9: ask for exactly what is buffered, one byte less or one more.
                let length =
                    operation % 10 == 8 ? Int(reader.byte()) : max(0, model.buffered.count + Int(reader.byte() % 3) - 1)
                step = "read(\(length))"
                guard let inputStream else { continue }
                try read(length, from: inputStream, model: &model)
            }
            try model.compare(inputStream, outputStream, after: step)
        }
    }

    /// Writes `length` bytes of the model's sequence unless the model says the write would block.
    static func write(_ length: Int, to stream: OutputStream, model: inout Model) throws(PropertyViolation) {
        let expected: Int
        if model.outputStatus != .open {
            expected = -1
        } else if length == 0 {
            expected = 0
        } else if model.readerClosed {
            expected = -1
        } else if model.space == 0 {
            return  // would block
        } else {
            expected = min(length, model.space)
        }
        let bytes = (0..<length).map { UInt8((model.written + $0) % 251) }
        let result = bytes.withUnsafeBufferPointer { stream.write($0.baseAddress!, maxLength: length) }
        try require(result == expected, "write(\(length)) returned \(result), expected \(expected); model: \(model)")
        if result > 0 {
            model.buffered.append(contentsOf: bytes.prefix(result))
            model.written += result
        } else if result < 0 && model.outputStatus == .open {
            model.outputStatus = .error  // the reader has gone
        }
    }

    /// Reads up to `length` bytes unless the model says the read would block, and compares them
    /// with the oldest unread bytes.
    static func read(_ length: Int, from stream: InputStream, model: inout Model) throws(PropertyViolation) {
        let expected: Int
        if model.inputStatus != .open && model.inputStatus != .atEnd {
            expected = -1
        } else if length == 0 {
            expected = 0
        } else if !model.buffered.isEmpty {
            expected = min(length, model.buffered.count)
        } else if model.writerClosed {
            expected = 0
        } else {
            return  // would block
        }
        let sentinel: UInt8 = 0xFE  // never written: the sequence runs 0...250
        var buffer = [UInt8](repeating: sentinel, count: length + 1)
        let result = buffer.withUnsafeMutableBufferPointer { stream.read($0.baseAddress!, maxLength: length) }
        try require(result == expected, "read(\(length)) returned \(result), expected \(expected); model: \(model)")
        let count = max(0, result)
        try require(
            Array(buffer.prefix(count)) == Array(model.buffered.prefix(count)),
            "read(\(length)) gave \(buffer.prefix(count)), expected \(model.buffered.prefix(count))")
        try require(
            buffer[count...].allSatisfy { $0 == sentinel }, "read(\(length)) wrote past the \(count) bytes it returned")
        model.buffered.removeFirst(count)
        if result == 0 && length > 0 { model.inputStatus = .atEnd }
    }

    /// What the pair must look like.
    struct Model: CustomStringConvertible {
        let capacity: Int
        /// Written and not yet read, oldest first.
        var buffered: [UInt8] = []
        /// How many bytes were written in all (the next byte written is `written % 251`).
        var written = 0
        var inputStatus: Stream.Status = .notOpen
        var outputStatus: Stream.Status = .notOpen
        /// The buffer's view: the input was closed or let go.
        var readerClosed = false
        /// The buffer's view: the output was closed or let go.
        var writerClosed = false

        var space: Int { capacity - buffered.count }

        mutating func closeReader() {
            if inputStatus != .closed && inputStatus != .error { inputStatus = .closed }
            readerClosed = true
        }

        mutating func closeWriter() {
            // A failed stream keeps its `error` status when closed.
            if outputStatus != .closed && outputStatus != .error { outputStatus = .closed }
            writerClosed = true
        }

        mutating func readerLetGo() { readerClosed = true }
        mutating func writerLetGo() { writerClosed = true }

        /// Compares the streams still held with the model.
        func compare(_ input: InputStream?, _ output: OutputStream?, after step: String) throws(PropertyViolation) {
            if let input {
                try require(
                    input.streamStatus == inputStatus,
                    "after \(step): input status \(input.streamStatus.rawValue), expected \(inputStatus.rawValue); model: \(self)"
                )
                let available = !buffered.isEmpty || writerClosed
                try require(
                    input.hasBytesAvailable == available,
                    "after \(step): hasBytesAvailable is \(input.hasBytesAvailable); model: \(self)")
            }
            if let output {
                try require(
                    output.streamStatus == outputStatus,
                    "after \(step): output status \(output.streamStatus.rawValue), expected \(outputStatus.rawValue); model: \(self)"
                )
                let space = self.space > 0 || readerClosed
                try require(
                    output.hasSpaceAvailable == space,
                    "after \(step): hasSpaceAvailable is \(output.hasSpaceAvailable); model: \(self)")
                if outputStatus == .error {
                    try require(
                        output.streamError as? StreamFailure == .readerClosed,
                        "after \(step): output error \(String(describing: output.streamError)), expected readerClosed")
                }
            }
        }

        var description: String {
            "capacity \(capacity), \(buffered.count) buffered, \(written) written, input \(inputStatus.rawValue)"
                + "\(readerClosed ? " (reader closed)" : ""), output \(outputStatus.rawValue)\(writerClosed ? " (writer closed)" : "")"
        }
    }
}
