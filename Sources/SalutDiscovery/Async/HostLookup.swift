import Foundation
import SalutStreams

extension DiscoveryContext {
    /// The address families a host lookup asks for.
    public enum AddressFamily: Sendable {
        /// IPv4 and IPv6.
        case any
        /// IPv4 only.
        case ipv4
        /// IPv6 only.
        case ipv6
    }

    /// Checks a host name as ``addresses(ofHost:family:timeout:settle:)`` does before it asks
    /// the daemon, without asking it: a name with its domain (`myhost.local`, not `myhost`), not
    /// an IP address, at most 253 bytes in labels of 1 to 63 bytes, no backslash or control
    /// character.
    /// - Throws: ``DiscoveryError/invalidHostName(_:reason:)`` saying what is wrong.
    public static func validate(hostName: String) throws {
        _ = try ServiceNames.checkHostName(hostName)
    }

    /// Resolves an mDNS host name such as `printer.local` to its addresses through the
    /// avahi-daemon (the system resolver may not know `.local` names).
    ///
    /// Returns once the first address has come and `settle` seconds more have passed for the
    /// other family. Addresses have port 0; IPv6 link-local ones carry their scope id.
    /// A `timeout` or `settle` that is not a positive number (NaN, 0, negative) takes its
    /// default; at most a billion seconds are waited.
    /// - Throws: ``DiscoveryError/timedOut`` or ``DiscoveryError/notFound`` when no address comes
    ///   within `timeout` seconds; ``DiscoveryError/invalidHostName(_:reason:)`` for a name
    ///   ``validate(hostName:)`` refuses.
    public func addresses(
        ofHost hostName: String, family: AddressFamily = .any,
        timeout: TimeInterval = 5, settle: TimeInterval = 0.1
    ) async throws -> [SocketAddress] {
        let name = try ServiceNames.checkHostName(hostName)
        let waiter = OneShot<[SocketAddress]>()
        let found = Locked<[SocketAddress]>([])
        let mapped: HostLookupOperation.Family = family == .ipv4 ? .ipv4 : family == .ipv6 ? .ipv6 : .any
        let operation = HostLookupOperation(context: self, hostName: name, family: mapped) { result in
            switch result {
            case .success(let address):
                let first = found.withLock { list -> Bool in
                    if !list.contains(address) { list.append(address) }
                    return list.count == 1
                }
                let wanted = family == .any ? 2 : 1
                if found.value.count >= wanted { waiter.succeed(found.value) }
                if first {
                    self.queue.asyncAfter(deadline: .now() + OperationLimit.clampedSeconds(settle, default: 0.1)) {
                        waiter.succeed(found.value)
                    }
                }
            case .failure(let error):
                if found.value.isEmpty { waiter.fail(error) }
            }
        }
        operation.start()
        queue.asyncAfter(deadline: .now() + OperationLimit.clampedSeconds(timeout, default: 5)) {
            let list = found.value
            if list.isEmpty { waiter.fail(.timedOut) } else { waiter.succeed(list) }
        }
        defer { operation.stop() }
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { waiter.set($0) }
        } onCancel: {
            waiter.fail(.cancelled)
        }
    }
}
