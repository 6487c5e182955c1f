import Foundation
import SalutStreams

/// A host name and its addresses published on the link by mDNS, for a host that does not
/// publish them itself (a device on another network, reached through a router), as
/// `avahi-publish -a` does; a service published with
/// ``ServiceAdvertisement/publish(name:type:domain:port:txtRecord:subtypes:allowRename:timeout:context:host:)``
/// can then name it as its host. The records are withdrawn by ``cancel()`` or the handle's
/// release.
///
/// ```swift
/// let host = try await HostAdvertisement.publish(hostName: "printer.lab-a.local", addresses: ["198.18.1.10"])
/// let printer = try await ServiceAdvertisement.publish(
///     name: "Office Printer", type: "_ipp._tcp", port: 631, host: host.hostName)
/// ```
public final class HostAdvertisement: Sendable {
    private let operation: AddressRecordOperation

    /// The host name as published, ending in `.local`.
    public var hostName: String { operation.hostName }

    /// Why the records were withdrawn for good after they were published (another host on
    /// the link took the name later, or the daemon refused them when it came back); nil while
    /// they stand.
    public var failure: DiscoveryError? { operation.failure.value }

    private init(operation: AddressRecordOperation) {
        self.operation = operation
    }

    deinit {
        operation.stop()
    }

    /// Publishes `hostName` with `addresses` on the link and returns once avahi-daemon has
    /// established them.
    /// - Parameters:
    ///   - hostName: a name in `.local` (`printer.lab-a.local`; more than one label before
    ///     `.local` keeps it apart from the link's own host names).
    ///   - addresses: IPv4 and IPv6 addresses in text form; at least one.
    ///   - timeout: how long to wait for the daemon, in seconds (NaN, zero or less: 10 s).
    ///   - context: the connection to the avahi-daemon to publish through.
    /// - Throws: ``DiscoveryError/collision(name:)`` when another host on the link has the
    ///   name; ``DiscoveryError/Code-swift.struct/invalidDomain`` for a name that is not a host
    ///   name in `.local`, or an address that is not one; ``DiscoveryError/timedOut``;
    ///   ``DiscoveryError/cancelled`` when the calling task is cancelled; the daemon's refusal
    ///   (too many objects for this client, for example) as a ``DiscoveryError``.
    public static func publish(
        hostName: String, addresses: [String], timeout: TimeInterval = 10, context: DiscoveryContext = .shared
    ) async throws -> HostAdvertisement {
        var parsed: [[UInt8]] = []
        for address in addresses {
            guard let bytes = SocketAddress.literal(address, port: 0)?.rawBytes else {
                throw DiscoveryError.invalidDomain("\(address.debugDescription) is not an IP address")
            }
            parsed.append(bytes)
        }
        return try await publish(hostName: hostName, rawAddresses: parsed, timeout: timeout, context: context)
    }

    /// Like ``publish(hostName:addresses:timeout:context:)``, with addresses as their 4 or 16
    /// bytes in network order.
    static func publish(
        hostName: String, rawAddresses: [[UInt8]], timeout: TimeInterval = 10, context: DiscoveryContext = .shared
    ) async throws -> HostAdvertisement {
        let lowered = hostName.lowercased()
        guard lowered.hasSuffix(".local") || lowered.hasSuffix(".local."), AvahiValues.isValidDomain(hostName),
            !rawAddresses.isEmpty, rawAddresses.allSatisfy({ $0.count == 4 || $0.count == 16 })
        else {
            throw DiscoveryError.invalidDomain(
                "\(hostName.debugDescription) with \(rawAddresses.count) address(es) is not a host name in .local with addresses"
            )
        }
        let seconds = OperationLimit.clampedSeconds(timeout, default: 10)
        let operation = try await QueueOperation.startedAndEstablished(within: seconds, on: context.queue) { waiter in
            AddressRecordOperation(context: context, hostName: hostName, addresses: rawAddresses) { event in
                switch event {
                case .published: waiter.succeed(())
                case .failed(let error): waiter.fail(error)
                case .withdrawn: break
                }
            }
        }
        return HostAdvertisement(operation: operation)
    }

    /// Withdraws the records now (the daemon sends its goodbyes shortly after).
    public func cancel() {
        operation.stop()
    }

    /// Withdraws the records and returns once the daemon has been told.
    public func withdraw() async {
        await operation.stopAndWait()
    }
}
