import CAvahi
import Foundation
import SalutStreams

/// Publishes a host name and its addresses (A and AAAA records, no reverse PTR) through an Avahi
/// entry group: what `avahi-publish -a -R` does, for a host that does not speak mDNS itself.
///
/// A host name cannot be renamed as a service can: a name taken on the link fails with
/// `collision`. When the daemon goes away or re-registers, the records are withdrawn and
/// published again as soon as it runs.
final class AddressRecordOperation: QueueOperation, @unchecked Sendable {
    // @unchecked: every mutable property is used only on `context.queue`.

    enum Event: Sendable {
        /// The records are established on the link.
        case published
        /// The records were withdrawn because the daemon went away; they come back by themselves.
        case withdrawn
        /// Publishing failed for good; the operation has stopped.
        case failed(DiscoveryError)
    }

    /// The host's fully qualified name, `printer.lab-a.local`.
    let hostName: String
    /// IPv4 (4 bytes) and IPv6 (16 bytes) addresses.
    let addresses: [[UInt8]]
    private let deliver: @Sendable (Event) -> Void
    private var group: OpaquePointer?
    /// Why the records were given up, once they were (readable from any thread).
    let failure = Locked<DiscoveryError?>(nil)

    init(
        context: DiscoveryContext, hostName: String, addresses: [[UInt8]],
        deliver: @escaping @Sendable (Event) -> Void
    ) {
        self.hostName = hostName
        self.addresses = addresses
        self.deliver = deliver
        super.init(context: context)
    }

    // MARK: AvahiOperation

    override func clientIsRunning(_ client: OpaquePointer) {
        guard !stopped else { return }
        if group == nil {
            group = avahi_entry_group_new(
                client,
                { _, state, userdata in
                    guard let userdata else { return }
                    AddressRecordOperation.from(userdata).groupChanged(state)
                }, userdata)
            guard group != nil else { return fail(DiscoveryError(avahiCode: avahi_client_errno(client))) }
        }
        if let group, avahi_entry_group_is_empty(group) != 0 { addEntries(group) }
    }

    override func clientIsReregistering() {
        if let group { avahi_entry_group_reset(group) }
    }

    override func clientIsLost() {
        releaseAvahiObjects()
        deliver(.withdrawn)
    }

    override func releaseAvahiObjects() {
        if let group { avahi_entry_group_free(group) }
        group = nil
    }

    // MARK: Private

    private func addEntries(_ group: OpaquePointer) {
        var result: Int32 = 0
        for bytes in addresses where result >= 0 {
            guard var address = Self.avahiAddress(bytes) else { continue }
            result = avahi_entry_group_add_address(
                group, AvahiIfIndex(AVAHI_IF_UNSPEC), AvahiProtocol(AVAHI_PROTO_UNSPEC), AVAHI_PUBLISH_NO_REVERSE,
                hostName, &address)
        }
        if result == Int32(AVAHI_ERR_COLLISION) { return fail(.collision(name: hostName)) }
        if result >= 0 { result = avahi_entry_group_commit(group) }
        if result < 0 { fail(DiscoveryError(avahiCode: result)) }
    }

    private func groupChanged(_ state: AvahiEntryGroupState) {
        guard !stopped else { return }
        switch state {
        case AVAHI_ENTRY_GROUP_ESTABLISHED:
            deliver(.published)
        case AVAHI_ENTRY_GROUP_COLLISION:
            fail(.collision(name: hostName))
        case AVAHI_ENTRY_GROUP_FAILURE:
            let code = context.runningClient.map { avahi_client_errno($0) } ?? Int32(AVAHI_ERR_FAILURE)
            fail(DiscoveryError(avahiCode: code))
        default:
            break
        }
    }

    private func fail(_ error: DiscoveryError) {
        failure.withLock { $0 = error }
        halt()
        deliver(.failed(error))
    }

    /// `bytes` (4 for IPv4, 16 for IPv6, network order) as an `AvahiAddress`; nil for another
    /// length.
    static func avahiAddress(_ bytes: [UInt8]) -> AvahiAddress? {
        var address = AvahiAddress()
        switch bytes.count {
        case 4:
            address.proto = AvahiProtocol(AVAHI_PROTO_INET)
            withUnsafeMutableBytes(of: &address.data.ipv4.address) { $0.copyBytes(from: bytes) }
        case 16:
            address.proto = AvahiProtocol(AVAHI_PROTO_INET6)
            withUnsafeMutableBytes(of: &address.data.ipv6.address) { $0.copyBytes(from: bytes) }
        default:
            return nil
        }
        return address
    }
}
