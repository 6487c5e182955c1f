import Foundation

/// A plaintext TCP listener on loopback (Python's `socket`), for tests that check what a client
/// sends in the clear. It prints each piece it receives as hex (`chunk …`) and, when a client
/// goes, everything that client sent (`got …`, `got -` for nothing); it accepts clients one
/// after another for up to 30 s of silence.
public final class RecordingListener: Sendable {
    /// The Python process; its output is the record.
    public let process: Foreign
    /// The loopback port it listens on.
    public let port: Int

    /// Starts the listener and returns once it listens.
    /// - Throws: `DeadlineExceeded` when it does not say its port within 10 s.
    public init() throws {
        process = try Foreign([
            "python3", "-c",
            """
            import socket, sys
            s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(4)
            print("port", s.getsockname()[1], flush=True)
            s.settimeout(30)
            while True:
                c, _ = s.accept(); c.settimeout(5); got = b""
                try:
                    while True:
                        b = c.recv(65536)
                        if not b: break
                        got += b
                        print("chunk", b.hex(), flush=True)
                except Exception: pass
                print("got", got.hex() or "-", flush=True)
            """,
        ])
        guard process.waitForOutput(containing: "port ", seconds: 10),
            let port = Int(process.output.components(separatedBy: "port ").last!.prefix { $0.isNumber })
        else {
            process.stop()
            throw DeadlineExceeded(what: "the recording listener's port: \(process.output)", seconds: 10)
        }
        self.port = port
    }

    /// Everything it has printed so far.
    public var output: String { process.output }

    /// Waits until its output contains `text`, for at most `seconds`.
    public func waitForOutput(containing text: String, seconds: Double) -> Bool {
        process.waitForOutput(containing: text, seconds: seconds)
    }

    /// Whether `bytes`, as hex, appears in anything it received.
    public func received(_ bytes: Data) -> Bool {
        output.contains(bytes.map { String(format: "%02x", $0) }.joined())
    }

    /// Stops the listener.
    public func stop() { process.stop() }
}
