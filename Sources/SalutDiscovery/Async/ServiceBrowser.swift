import Foundation
import Glibc

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
///
/// A browse of the link also hears of failed contacts with the services it lists (a
/// resolution that timed out, a connection that failed: see
/// ``DiscoveryContext/reportFailedContact(with:)``): it asks such a service's responder
/// directly and lists the service as removed when nothing answers, within about 3 seconds,
/// though avahi-daemon may list it for an hour more; it asks again every 30 seconds and lists
/// the service again if it answers. Silence counts only on an interface where some check was
/// answered (else another service there is asked first), so a firewall that drops direct
/// answers removes nothing. A host asleep or briefly off the link does not answer either,
/// and may come back.
/// A wide-area domain can also be browsed without Avahi, by unicast DNS queries
/// (``init(type:domain:wideArea:context:)``).
public struct ServiceBrowser: AsyncSequence, Sendable {
    public typealias Element = BrowseUpdate

    let context: DiscoveryContext
    let target: BrowseOperation.Target
    var filter = BrowseOperation.Filter()
    /// Set when a wide-area domain is browsed with Salut's own unicast queries.
    var unicast: WideAreaBrowsing?

    /// Browses for instances of `type` (`_name._tcp`, `_name._udp`, or a subtype
    /// `_sub._sub._name._tcp`) in `domain`.
    /// - Parameters:
    ///   - type: the service type to browse for.
    ///   - domain: the domain to browse (`local` for the link).
    ///   - interface: only answers from this network interface (for example `eth0`); nil: all.
    ///   - family: only answers carried over IPv4 or over IPv6 mDNS; `.any`: both.
    ///   - includeLocal: false leaves out services published by this host.
    ///   - context: the connection to the avahi-daemon to browse through.
    /// - Throws: ``DiscoveryError/invalidServiceType(_:reason:)``,
    ///   ``DiscoveryError/invalidDomain(_:)`` or ``DiscoveryError/unknownInterface(_:)`` for
    ///   malformed input.
    public init(
        type: String, domain: String = "local", interface: String? = nil, family: DiscoveryContext.AddressFamily = .any,
        includeLocal: Bool = true, context: DiscoveryContext = .shared
    ) throws {
        let parsed = try ServiceNames.parseType(type, domain: domain)
        ServiceNames.noteIfLong(parsed)
        self.init(
            context: context,
            target: .services(type: parsed.browseType, domain: try ServiceNames.normaliseDomain(domain)))
        filter = try Self.filter(interface: interface, family: family, includeLocal: includeLocal)
    }

    /// A browser for `type` in `domain` that notes no long type: for a browse the user did not
    /// ask for by that type (netsvc's look at what is published, after a failed resolution).
    package static func withoutTypeNote(type: String, domain: String) throws -> ServiceBrowser {
        let parsed = try ServiceNames.parseType(type, domain: domain)
        return ServiceBrowser(
            context: .shared,
            target: .services(type: parsed.browseType, domain: try ServiceNames.normaliseDomain(domain)))
    }

    /// Browses for the service types present in `domain` (DNS-SD's `_services._dns-sd._udp`).
    /// Each service's `name` is a type such as `_http._tcp`. Filters as for instances.
    public static func serviceTypes(
        domain: String = "local", interface: String? = nil, family: DiscoveryContext.AddressFamily = .any,
        includeLocal: Bool = true, context: DiscoveryContext = .shared
    ) throws -> ServiceBrowser {
        var browser = ServiceBrowser(
            context: context, target: .serviceTypes(domain: try ServiceNames.normaliseDomain(domain)))
        browser.filter = try filter(interface: interface, family: family, includeLocal: includeLocal)
        return browser
    }

    static func filter(
        interface: String?, family: DiscoveryContext.AddressFamily, includeLocal: Bool
    ) throws -> BrowseOperation.Filter {
        var filter = BrowseOperation.Filter(includeLocal: includeLocal)
        if let interface {
            let index = if_nametoindex(interface)
            guard index != 0 else { throw DiscoveryError.unknownInterface(interface) }
            filter.interface = Int32(index)
        }
        switch family {
        case .any: break
        case .ipv4: filter.proto = 0  // AVAHI_PROTO_INET
        case .ipv6: filter.proto = 1  // AVAHI_PROTO_INET6
        }
        return filter
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
        if let unicast, case .services(let type, let domain) = target {
            return unicastUpdates(unicast, type: type, domain: domain).makeAsyncIterator()
        }
        let (context, target, filter) = (self.context, self.target, self.filter)
        return AsyncThrowingStream<BrowseUpdate, any Error> { continuation in
            // A browse of the link checks the failed contacts reported to its context.
            let onTheLink: Bool
            if case .services(_, let domain) = target {
                onTheLink = ServiceNames.isOnTheLink(domain)
            } else {
                onTheLink = false
            }
            let watch = FailedContactWatch(context: context, listening: onTheLink) { continuation.yield($0) }
            let operation = BrowseOperation(context: context, target: target, filter: filter) { event in
                switch event {
                case .update(let update): watch.browsed(update)
                case .failed(let error): continuation.finish(throwing: error)
                }
            }
            continuation.onTermination = { _ in
                operation.stop()
                watch.finish()
            }
            operation.start()
        }.makeAsyncIterator()
    }
}
