import Foundation
import SalutStreams

extension DiscoveredService {
    /// Unopened streams to the service: opening either one resolves the service (through the
    /// avahi-daemon; a resolution made with `resolve()` in the last 10 seconds is reused, unless
    /// a ``connect(tls:bufferSize:resolveTimeout:context:)`` to it has failed since) and
    /// connects to its addresses the Happy Eyeballs way.
    ///
    /// With `tls`, the certificate is checked against `tls.peerName` or else the service's
    /// resolved host name (pins work as for any host).
    /// - Parameters:
    ///   - tls: TLS to run on the connection, or nil for plain TCP.
    ///   - bufferSize: bytes buffered in each direction.
    ///   - resolveTimeout: how long resolving may take before the streams fail with
    ///     `SocketStreamError.nameNotFound(_:detail:)`; NaN, zero or a negative value takes
    ///     the default (5 s), and at most a billion seconds are waited.
    ///   - context: the connection to the avahi-daemon to resolve through.
    public func streams(tls: TLSConfiguration? = nil, bufferSize: Int = 256 * 1024,
                        resolveTimeout: TimeInterval = 5, context: DiscoveryContext = .shared) -> BoundStreamPair {
        SocketStreams.pair(toHost: description, port: 0, bufferSize: bufferSize, tls: tls,
                           targetResolver: targetResolver(timeout: resolveTimeout, context: context))
    }

    /// Resolves the service for a socket pair: its addresses (with the service's port) and its
    /// host name, or `SocketStreamError.nameNotFound(_:detail:)`.
    package func targetResolver(timeout: TimeInterval, context: DiscoveryContext) -> TargetResolver {
        let service = self
        return { _, _ in
            // Resolved a moment ago (`resolve()` then `connect()`): no second round of mDNS.
            if let recent = context.recentResolutions.recent(service) {
                return (recent.addresses, recent.hostName)
            }
            do {
                let resolved = try await service.resolve(timeout: timeout, context: context)
                return (resolved.addresses, resolved.hostName)
            } catch {
                throw SocketStreamError.nameNotFound(service.description, detail: "\(error)")
            }
        }
    }

    /// Resolves the service, connects, and returns the open streams.
    /// - Throws: a `SocketStreamError`: `SocketStreamError.nameNotFound(_:detail:)` when the
    ///   service does not resolve, connection and TLS failures as for any host. `resolveTimeout`
    ///   is taken as by ``streams(tls:bufferSize:resolveTimeout:context:)``.
    public func connect(tls: TLSConfiguration? = nil, bufferSize: Int = 256 * 1024,
                        resolveTimeout: TimeInterval = 5, context: DiscoveryContext = .shared) async throws -> BoundStreamPair {
        let pair = streams(tls: tls, bufferSize: bufferSize, resolveTimeout: resolveTimeout, context: context)
        do {
            try await pair.open()
        } catch let error as SocketStreamError where [.connectionRefused, .unreachable, .timedOut].contains(error.code) {
            // The addresses did not take the connection: the next attempt asks the network again
            // instead of reusing them (a service restarted a moment ago listens on a new port).
            context.recentResolutions.forget(self)
            throw error
        }
        return pair
    }

    /// Unopened streams to the service in its wide-area domain: opening either one resolves it
    /// with unicast DNS queries to `wideArea`'s name server (as ``resolve(wideArea:timeout:)``)
    /// and connects to its addresses the Happy Eyeballs way; TLS as in
    /// ``streams(tls:bufferSize:resolveTimeout:context:)``.
    public func streams(tls: TLSConfiguration? = nil, bufferSize: Int = 256 * 1024, resolveTimeout: TimeInterval = 10,
                        wideArea: WideAreaBrowsing) -> BoundStreamPair {
        let service = self
        return SocketStreams.pair(toHost: description, port: 0, bufferSize: bufferSize, tls: tls, targetResolver: { _, _ in
            do {
                let resolved = try await service.resolve(wideArea: wideArea, timeout: resolveTimeout)
                return (resolved.addresses, resolved.hostName)
            } catch {
                throw SocketStreamError.nameNotFound(service.description, detail: "\(error)")
            }
        })
    }

    /// Resolves the service in its wide-area domain by unicast DNS, connects, and returns the
    /// open streams.
    /// - Throws: a `SocketStreamError`: `SocketStreamError.nameNotFound(_:detail:)` when the
    ///   service does not resolve (the detail says why), connection and TLS failures as for any host.
    public func connect(tls: TLSConfiguration? = nil, bufferSize: Int = 256 * 1024, resolveTimeout: TimeInterval = 10,
                        wideArea: WideAreaBrowsing) async throws -> BoundStreamPair {
        let pair = streams(tls: tls, bufferSize: bufferSize, resolveTimeout: resolveTimeout, wideArea: wideArea)
        try await pair.open()
        return pair
    }
}
