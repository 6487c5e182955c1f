import Foundation
import SalutStreams

extension DiscoveredService {
    /// Unopened streams to the service: opening either one resolves the service (through the
    /// avahi-daemon; a resolution made with `resolve()` in the last 10 seconds serves the first
    /// connection after it, and only that one) and connects to its addresses the Happy Eyeballs
    /// way.
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
    public func streams(
        tls: TLSConfiguration? = nil, bufferSize: Int = 256 * 1024,
        resolveTimeout: TimeInterval = 5, context: DiscoveryContext = .shared
    ) -> BoundStreamPair {
        SocketStreams.pair(
            toHost: description, port: 0, bufferSize: bufferSize, tls: tls,
            targetResolver: targetResolver(timeout: resolveTimeout, context: context))
    }

    /// Resolves the service for a socket pair: its addresses (with the service's port) and its
    /// host name, or `SocketStreamError.nameNotFound(_:detail:)`.
    package func targetResolver(timeout: TimeInterval, context: DiscoveryContext) -> TargetResolver {
        let service = self
        return { _, _ in
            // Resolved a moment ago (`resolve()` then `connect()`): no second round of mDNS.
            if let recent = context.recentResolutions.take(service) {
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

    /// Resolves the service, connects, and returns the open streams. A connection that found
    /// no route or timed out is reported as a failed contact (see
    /// ``DiscoveryContext/reportFailedContact(with:)``).
    /// - Throws: a `SocketStreamError`: `SocketStreamError.nameNotFound(_:detail:)` when the
    ///   service does not resolve, connection and TLS failures as for any host. `resolveTimeout`
    ///   is taken as by ``streams(tls:bufferSize:resolveTimeout:context:)``.
    public func connect(
        tls: TLSConfiguration? = nil, bufferSize: Int = 256 * 1024,
        resolveTimeout: TimeInterval = 5, context: DiscoveryContext = .shared
    ) async throws -> BoundStreamPair {
        let pair = streams(tls: tls, bufferSize: bufferSize, resolveTimeout: resolveTimeout, context: context)
        try await open(pair, reportingFailuresTo: context)
        return pair
    }

    /// Opens `pair`, streams to this service; a connection that found no route or timed out
    /// is reported to `context` as a failed contact before its error is thrown (a refused one
    /// is not: a refusal comes from the host, which is there).
    func open(_ pair: BoundStreamPair, reportingFailuresTo context: DiscoveryContext) async throws {
        do {
            try await pair.open()
        } catch let error as SocketStreamError where [.unreachable, .timedOut].contains(error.code) {
            context.reportFailedContact(with: self)
            throw error
        }
    }

    /// Unopened streams to the service in its wide-area domain: opening either one resolves it
    /// with unicast DNS queries to `wideArea`'s name server (as ``resolve(wideArea:timeout:)``)
    /// and connects to its addresses the Happy Eyeballs way; TLS as in
    /// ``streams(tls:bufferSize:resolveTimeout:context:)``.
    public func streams(
        tls: TLSConfiguration? = nil, bufferSize: Int = 256 * 1024, resolveTimeout: TimeInterval = 10,
        wideArea: WideAreaBrowsing
    ) -> BoundStreamPair {
        let service = self
        return SocketStreams.pair(
            toHost: description, port: 0, bufferSize: bufferSize, tls: tls,
            targetResolver: { _, _ in
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
    public func connect(
        tls: TLSConfiguration? = nil, bufferSize: Int = 256 * 1024, resolveTimeout: TimeInterval = 10,
        wideArea: WideAreaBrowsing
    ) async throws -> BoundStreamPair {
        let pair = streams(tls: tls, bufferSize: bufferSize, resolveTimeout: resolveTimeout, wideArea: wideArea)
        try await pair.open()
        return pair
    }
}
