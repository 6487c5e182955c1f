import Foundation
import SalutStreams

extension DiscoveredService {
    /// Resolves the service to its host, port, TXT record and addresses.
    ///
    /// Returns once the first answer has come and `settle` seconds more have passed for answers
    /// on other interfaces and protocols, so that `addresses` holds IPv4 and IPv6 where the
    /// service has both. The name is compared without regard to ASCII case, as DNS-SD compares
    /// names (RFC 6762): "kitchen" finds a service published as "Kitchen", and the result
    /// carries the published spelling. Use ``resolutions(context:)`` to follow every later change.
    /// A `timeout` or `settle` that is not a positive number (NaN, 0, negative) takes its
    /// default; at most a billion seconds are waited.
    /// - Throws: ``DiscoveryError/timedOut`` when nothing answers within `timeout` seconds (a
    ///   failed contact: see ``DiscoveryContext/reportFailedContact(with:)``);
    ///   ``DiscoveryError/cancelled`` when the task is cancelled; a validation error for a
    ///   malformed name, type or domain.
    public func resolve(
        timeout: TimeInterval = 5, settle: TimeInterval = 0.2,
        context: DiscoveryContext = .shared
    ) async throws -> ResolvedService {
        let target = try validatedForLookup()
        let waiter = OneShot<ResolvedService>()
        let latest = Locked<ResolvedService?>(nil)
        let answered: @Sendable (ResolvedService) -> Void = { result in
            // The first spelling to answer is the result (see `OtherCaseResolution`); later
            // answers of the same instance refine it.
            let previous = latest.withLock { value -> ResolvedService? in
                let previous = value
                if previous == nil || previous?.service.name == result.service.name { value = result }
                return previous
            }
            if previous == nil {
                context.queue.asyncAfter(deadline: .now() + OperationLimit.clampedSeconds(settle, default: 0.2)) {
                    if let value = latest.value { waiter.succeed(value) }
                }
            }
        }
        let operation = ResolveOperation(context: context, service: target, deliver: answered)
        let otherCase = OtherCaseResolution(context: context, service: target, deliver: answered)
        operation.start()
        otherCase.start()
        context.queue.asyncAfter(deadline: .now() + OperationLimit.clampedSeconds(timeout, default: 5)) {
            if let value = latest.value { waiter.succeed(value) } else { waiter.fail(.timedOut) }
        }
        defer {
            operation.stop()
            otherCase.stop()
        }
        let resolved: ResolvedService
        do {
            resolved = try await withTaskCancellationHandler {
                try await withCheckedThrowingContinuation { waiter.set($0) }
            } onCancel: {
                waiter.fail(.cancelled)
            }
        } catch let error as DiscoveryError where error.code == .timedOut {
            // The context's browsers that list it ask whether it is still there.
            context.reportFailedContact(with: self)
            throw error
        }
        context.recentResolutions.remember(resolved)  // a `connect` right after uses it
        return resolved
    }

    /// Resolves continuously: yields the merged result each time it gains an address or its
    /// TXT record changes, until the consuming task stops iterating.
    /// - Throws: a validation error for a malformed name, type or domain.
    public func resolutions(context: DiscoveryContext = .shared) throws -> AsyncStream<ResolvedService> {
        let target = try validatedForLookup()
        return AsyncStream { continuation in
            let operation = ResolveOperation(context: context, service: target) { continuation.yield($0) }
            continuation.onTermination = { _ in operation.stop() }
            operation.start()
        }
    }

    /// The service's TXT record now and after every change, as the network reports it (Avahi
    /// record browser), until the consuming task stops iterating.
    /// - Throws: a validation error for a malformed name, type or domain.
    public func txtRecordUpdates(context: DiscoveryContext = .shared) throws -> AsyncStream<TXTRecord> {
        let target = try validatedForLookup()
        return AsyncStream { continuation in
            let operation = TXTMonitorOperation(context: context, service: target) { continuation.yield($0) }
            continuation.onTermination = { _ in operation.stop() }
            operation.start()
        }
    }

    /// Checks the name (1 to 63 bytes), type and domain as resolving, monitoring and connecting
    /// do before they ask the daemon, without asking it; for validating input early.
    /// - Throws: ``DiscoveryError/invalidServiceName(_:reason:)``,
    ///   ``DiscoveryError/invalidServiceType(_:reason:)`` or ``DiscoveryError/invalidDomain(_:)``.
    public func validate() throws {
        _ = try validatedForLookup()
    }

    /// The service with its type reduced to the base type and its domain normalised, after
    /// checking all three.
    func validatedForLookup() throws -> DiscoveredService {
        try ServiceNames.checkName(name, allowEmpty: false)
        let parsed = try ServiceNames.parseType(type, domain: domain)
        return DiscoveredService(name: name, type: parsed.base, domain: try ServiceNames.normaliseDomain(domain))
    }
}
