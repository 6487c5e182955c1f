import Foundation

/// Browses for services as an async sequence of ``BrowseUpdate``s.
///
/// ```swift
/// for try await update in try ServiceBrowser(type: "_http._tcp") {
///     for change in update.changes { print(change) }
///     if update.isComplete { break }   // everything known right now has been seen
/// }
/// ```
///
/// Each iteration starts its own Avahi browser; cancelling the consuming task (or leaving the
/// loop) stops it. Daemon restarts are invisible except as removals followed by re-additions.
public struct ServiceBrowser: AsyncSequence, Sendable {
    public typealias Element = BrowseUpdate

    let context: DiscoveryContext
    let target: BrowseOperation.Target

    /// Browses for instances of `type` (`_name._tcp`, `_name._udp`, or a subtype
    /// `_sub._sub._name._tcp`) in `domain`.
    /// - Throws: ``DiscoveryError/invalidServiceType(_:reason:)`` or
    ///   ``DiscoveryError/invalidDomain(_:)`` for malformed input.
    public init(type: String, domain: String = "local", context: DiscoveryContext = .shared) throws {
        let parsed = try ServiceNames.parseType(type)
        self.init(context: context, target: .services(type: parsed.browseType, domain: try ServiceNames.normaliseDomain(domain)))
    }

    /// Browses for the service types present in `domain` (DNS-SD's `_services._dns-sd._udp`).
    /// Each service's `name` is a type such as `_http._tcp`.
    public static func serviceTypes(domain: String = "local", context: DiscoveryContext = .shared) throws -> ServiceBrowser {
        ServiceBrowser(context: context, target: .serviceTypes(domain: try ServiceNames.normaliseDomain(domain)))
    }

    /// Browses for browsing (or, with `registration`, registration) domains other than `local`.
    public static func domains(registration: Bool = false, context: DiscoveryContext = .shared) -> ServiceBrowser {
        ServiceBrowser(context: context, target: .domains(registration: registration))
    }

    init(context: DiscoveryContext, target: BrowseOperation.Target) {
        self.context = context
        self.target = target
    }

    /// The updates; the sequence throws when the daemon reports a browse failure.
    public func makeAsyncIterator() -> AsyncThrowingStream<BrowseUpdate, any Error>.Iterator {
        AsyncThrowingStream<BrowseUpdate, any Error> { continuation in
            let operation = BrowseOperation(context: context, target: target) { event in
                switch event {
                case .update(let update): continuation.yield(update)
                case .failed(let error): continuation.finish(throwing: error)
                }
            }
            continuation.onTermination = { _ in operation.stop() }
            operation.start()
        }.makeAsyncIterator()
    }
}
