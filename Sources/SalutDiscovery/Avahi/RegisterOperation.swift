import CAvahi
import SalutStreams
import Foundation

/// Publishes one service (with optional subtype and TXT record) through an Avahi entry group, or
/// several in one group (the gateway's announcements: avahi-daemon probes, announces and says
/// goodbye for a group's records together, packed into a few packets).
///
/// On a name collision it either picks Avahi's alternative name ("Name #2" in Avahi 0.8) and
/// tries again, or, when renaming is not allowed (always, for several services: the daemon does
/// not say which name collided), fails with `collision`. When the daemon goes
/// away or re-registers the host name, the entries are withdrawn and registered again as soon as
/// the daemon is running.
final class RegisterOperation: QueueOperation, @unchecked Sendable {
    // @unchecked: every mutable property is used only on `context.queue`.

    enum Event: Sendable {
        /// The service is established under this name.
        case published(name: String)
        /// The entries were withdrawn because the daemon went away; they come back by themselves.
        case withdrawn
        /// Publishing failed for good; the operation has stopped.
        case failed(DiscoveryError)
    }

    struct Request: Sendable {
        var name: String
        var type: ServiceNames.ParsedType
        var domain: String
        var port: UInt16
        var txt: TXTRecord
        var allowRename: Bool
        /// Subtypes beyond the one `type` may carry, for example `_printer`.
        var extraSubtypes: [String] = []
        /// The host the SRV record names, when it is not this host (one whose addresses are
        /// published by someone else: ``HostAdvertisement``, `avahi-publish -a`).
        var host: String?
    }

    /// The services of the group (at least one); the first is the one that may be renamed.
    private var requests: [Request]
    private let deliver: @Sendable (Event) -> Void
    private var group: OpaquePointer?

    /// The first request's, kept as it changes (renames).
    private var request: Request {
        get { requests[0] }
        set { requests[0] = newValue }
    }

    init(context: DiscoveryContext, request: Request, deliver: @escaping @Sendable (Event) -> Void) {
        self.requests = [request]
        self.deliver = deliver
        super.init(context: context)
    }

    /// Publishes `requests` (at least one; none renamed when there are several) in one group.
    init(context: DiscoveryContext, requests: [Request], deliver: @escaping @Sendable (Event) -> Void) {
        precondition(!requests.isEmpty, "a group publishes at least one service")
        self.requests = requests
        if requests.count > 1 {
            for index in self.requests.indices { self.requests[index].allowRename = false }
        }
        self.deliver = deliver
        super.init(context: context)
    }

    /// Publishes `requests` in one group through `context` and returns the operation once the
    /// daemon established them. `events` hears every event first (the `published` that ends
    /// the wait included, and what comes after it).
    /// - Throws: the `DiscoveryError` publishing failed with; `timedOut` when not established
    ///   within `seconds` (the operation is then stopped).
    static func established(
        _ requests: [Request], context: DiscoveryContext, within seconds: TimeInterval,
        events: @escaping @Sendable (Event) -> Void = { _ in }
    ) async throws -> RegisterOperation {
        try await startedAndEstablished(within: seconds, on: context.queue) { waiter in
            RegisterOperation(context: context, requests: requests) { event in
                events(event)
                switch event {
                case .published: waiter.succeed(())
                case .failed(let error): waiter.fail(error)
                case .withdrawn: break
                }
            }
        }
    }

    /// Replaces the TXT record of the service at `index` (the only one, by default), live if the
    /// service is registered.
    func updateTXT(_ txt: TXTRecord, at index: Int = 0) {
        context.queue.async {
            guard self.requests.indices.contains(index) else { return }
            self.requests[index].txt = txt
            guard let group = self.group, avahi_entry_group_is_empty(group) == 0 else { return }
            let request = self.requests[index]
            let list = AvahiValues.stringList(txt)
            defer { avahi_string_list_free(list) }
            let result = avahi_entry_group_update_service_txt_strlst(
                group, AvahiIfIndex(AVAHI_IF_UNSPEC), AvahiProtocol(AVAHI_PROTO_UNSPEC), AvahiPublishFlags(rawValue: 0),
                request.name, request.type.base, request.domain, list)
            if result < 0 { self.fail(DiscoveryError(avahiCode: result)) }
        }
    }

    // MARK: AvahiOperation

    override func clientIsRunning(_ client: OpaquePointer) {
        guard !stopped else { return }
        if group == nil {
            let me = userdata
            group = avahi_entry_group_new(
                client,
                { group, state, userdata in
                    guard let userdata else { return }
                    RegisterOperation.from(userdata).groupChanged(state)
                }, me)
            guard group != nil else { return fail(DiscoveryError(avahiCode: avahi_client_errno(client))) }
        }
        if request.name.isEmpty {
            request.name = String(cString: avahi_client_get_host_name(client))
        }
        if avahi_entry_group_is_empty(group) != 0 { addEntries() }
    }

    override func clientIsReregistering() {
        if let group { avahi_entry_group_reset(group) }
    }

    override func clientIsLost() {
        releaseAvahiObjects()
        deliver(.withdrawn)
    }

    override func releaseAvahiObjects() {
        // (A free the daemon did not take leaves the entries published: said, since nothing
        // else would show it.)
        if let group, case let result = avahi_entry_group_free(group), result < 0 {
            SalutLogging.logger.warning(
                "withdrawing \"\(request.name)\" \(request.type.browseType): avahi-daemon refused: \(String(cString: avahi_strerror(result)))"
            )
        }
        group = nil
    }

    // MARK: Private

    private func addEntries() {
        guard let group else { return }
        for request in requests {
            let (result, serviceTaken) = add(request, to: group)
            if serviceTaken { return collided(request) }
            if result < 0 {
                return fail(DiscoveryError(avahiCode: result).naming(service: request.name, domain: request.domain))
            }
        }
        let result = avahi_entry_group_commit(group)
        if result < 0 { fail(DiscoveryError(avahiCode: result).naming(service: request.name, domain: request.domain)) }
    }

    /// Adds `request`'s service and subtypes to `group`; avahi's result, and whether it refused
    /// the service itself because its name is taken (a subtype refused is a failure, not a
    /// reason to rename).
    private func add(_ request: Request, to group: OpaquePointer) -> (Int32, serviceTaken: Bool) {
        let any = AvahiIfIndex(AVAHI_IF_UNSPEC), anyProto = AvahiProtocol(AVAHI_PROTO_UNSPEC)
        let list = AvahiValues.stringList(request.txt)
        defer { avahi_string_list_free(list) }
        var result = avahi_entry_group_add_service_strlst(
            group, any, anyProto, AvahiPublishFlags(rawValue: 0), request.name, request.type.base,
            request.domain, request.host, request.port, list)
        if result == Int32(AVAHI_ERR_COLLISION) { return (result, true) }
        for subtype in [request.type.subtype].compactMap({ $0 }) + request.extraSubtypes where result >= 0 {
            result = avahi_entry_group_add_service_subtype(
                group, any, anyProto, AvahiPublishFlags(rawValue: 0), request.name, request.type.base,
                request.domain, "\(subtype)._sub.\(request.type.base)")
        }
        return (result, false)
    }

    private func groupChanged(_ state: AvahiEntryGroupState) {
        guard !stopped else { return }
        switch state {
        case AVAHI_ENTRY_GROUP_ESTABLISHED:
            if requests.count > 1 {
                SalutLogging.logger.info(
                    "published \(requests.count) services in one group, \"\(request.name)\" \(request.type.browseType) first"
                )
            } else {
                SalutLogging.logger.info(
                    "published \"\(request.name)\" \(request.type.browseType) in \(request.domain) on port \(request.port)"
                )
            }
            deliver(.published(name: request.name))
        case AVAHI_ENTRY_GROUP_COLLISION:
            guard requests.count == 1 else {
                // (The daemon does not say which of several names is taken.)
                SalutLogging.logger.notice(
                    "one of \(requests.count) services in a group, \"\(request.name)\" \(request.type.browseType) first: a name is taken on the network"
                )
                return fail(.collision(name: ""))
            }
            collided(request)
        case AVAHI_ENTRY_GROUP_FAILURE:
            let code = context.runningClient.map { avahi_client_errno($0) } ?? Int32(AVAHI_ERR_FAILURE)
            fail(DiscoveryError(avahiCode: code))
        default:
            break
        }
    }

    /// A name of the group is taken: `taken`'s, when the daemon said which (a group of several
    /// that collided while probing names its first). Only a group of one is renamed.
    private func collided(_ taken: Request) {
        guard taken.allowRename else {
            SalutLogging.logger.notice(
                "\"\(taken.name)\" \(taken.type.browseType): the name is taken on the network; not renamed")
            return fail(.collision(name: taken.name))
        }
        guard let next = avahi_alternative_service_name(request.name) else {
            return fail(.avahi(code: Int32(AVAHI_ERR_NO_MEMORY), message: "no alternative name"))
        }
        SalutLogging.logger.notice(
            "\"\(request.name)\" \(request.type.browseType): the name is taken on the network; trying \"\(String(cString: next))\""
        )
        request.name = String(cString: next)
        avahi_free(next)
        if let group { avahi_entry_group_reset(group) }
        addEntries()
    }

    private func fail(_ error: DiscoveryError) {
        halt()
        deliver(.failed(error))
    }

}
