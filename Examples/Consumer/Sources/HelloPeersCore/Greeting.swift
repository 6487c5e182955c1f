import Foundation
import Salut

/// One greeting service and one visitor, in the same program: publish an echo service, find it
/// by browsing, connect to it by name and check that what was sent comes back.
public enum Greeting {
    /// What the visitor sends and expects back.
    public static let message = Data("hello, peer\n".utf8)

    /// Publishes `_hello-peers._tcp` as `name`, finds it, says hello, and returns the reply and
    /// the port the service listened on.
    /// - Throws: a `DiscoveryError` when publishing or browsing fails (no avahi-daemon, for
    ///   example), a `SocketStreamError` when the connection fails, or `GreetingError`.
    public static func roundTrip(
        name: String, timeout: Duration = .seconds(20)
    ) async throws -> (reply: Data, port: Int) {
        let advertisement = try await ServiceAdvertisement.listen(
            name: name, type: "_hello-peers._tcp", txtRecord: try TXTRecord(["v": "1"]), allowRename: false)
        defer { advertisement.cancel() }
        let serving = Task {
            for await connection in advertisement.connections {
                Task { await echo(connection) }
            }
        }
        defer { serving.cancel() }

        let found = try await withDeadline(timeout) { try await find(name: advertisement.name) }
        let resolved = try await found.resolve(timeout: 5)
        let pair = try await found.connect()
        try await pair.output.write(message)
        pair.output.close()
        let reply = try await withDeadline(timeout) {
            var received = Data()
            for try await chunk in pair.input.chunks { received.append(chunk) }
            return received
        }
        pair.input.close()
        return (reply, Int(resolved.port))
    }

    /// The first service of our type with this name that the browser reports.
    static func find(name: String) async throws -> DiscoveredService {
        for try await update in try ServiceBrowser(type: "_hello-peers._tcp") {
            for case .added(let service) in update.changes where service.name == name {
                return service
            }
        }
        throw GreetingError("the browser ended before \"\(name)\" was seen")
    }

    /// Sends back everything a visitor sends, then closes.
    static func echo(_ connection: AcceptedConnection) async {
        do {
            try await connection.streams.open()
            for try await chunk in connection.input.chunks { try await connection.output.write(chunk) }
        } catch {}
        connection.output.close()
        connection.input.close()
    }

    /// Runs `body`, or throws `GreetingError` when it takes longer than `limit`.
    static func withDeadline<T: Sendable>(
        _ limit: Duration, _ body: @escaping @Sendable () async throws -> T
    ) async throws -> T {
        try await withThrowingTaskGroup(of: T.self) { group in
            group.addTask { try await body() }
            group.addTask {
                try await Task.sleep(for: limit)
                throw GreetingError("nothing within \(limit)")
            }
            defer { group.cancelAll() }
            return try await group.next()!
        }
    }
}

/// A greeting that did not complete, and why.
public struct GreetingError: Error, CustomStringConvertible {
    /// Why.
    public let description: String
    init(_ description: String) { self.description = description }
}
