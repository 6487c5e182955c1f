import Synchronization

/// The application's bytes one socket connection carried each way, counted where its pump
/// moved them: after TLS, the plain bytes (TLS records and handshakes are not counted), and an
/// upgrade's preface. Written on the connection's queue, read from any thread.
package final class TrafficCounter: Sendable {
    private let sent = Atomic<Int64>(0)
    private let received = Atomic<Int64>(0)

    package init() {}

    /// The bytes sent so far.
    package var bytesSent: Int64 { sent.load(ordering: .relaxed) }
    /// The bytes received so far.
    package var bytesReceived: Int64 { received.load(ordering: .relaxed) }

    func add(sent count: Int) { sent.wrappingAdd(Int64(count), ordering: .relaxed) }
    func add(received count: Int) { received.wrappingAdd(Int64(count), ordering: .relaxed) }
}
