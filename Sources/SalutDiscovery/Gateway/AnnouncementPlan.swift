extension DiscoveryGateway {
    /// A service of another link, read from the zone, as this link announces it by mDNS.
    struct Announcement: Sendable, Hashable {
        /// The other link's label.
        var label: String
        /// The service as the zone holds it (its host's name on that link, its routed addresses).
        var service: MirroredService

        /// Which announcement this is: the link's label and the service's name and type.
        var id: ID { ID(label: label, key: service.key) }

        /// The host name it is announced on: `HOST.LABEL.local`. Two labels before `.local`
        /// keep it apart from the link's own hosts (whose names are one label), and tell every
        /// gateway on this link not to write it back into the zone.
        var hostName: String { "\(service.host).\(label).local" }

        /// An announcement's identity.
        struct ID: Sendable, Hashable, Comparable {
            var label: String
            var key: ServiceKey

            static func < (a: ID, b: ID) -> Bool { (a.label, a.key) < (b.label, b.key) }
        }
    }

    /// What to change on the link so that the announcements made become the ones wanted: a
    /// value with no I/O (the announcer applies it), so that tests check each decision.
    ///
    /// A host is published once for all its services, with the addresses its services have in
    /// the zone; a host whose addresses change is published again. A service whose port or
    /// host changes is withdrawn and published again; one whose TXT record alone changes keeps
    /// its place and gets the new record.
    struct AnnouncementPlan: Sendable, Equatable {
        /// Services to withdraw (gone from the zone, or about to be published again).
        var withdrawServices: [Announcement.ID] = []
        /// Host names to withdraw (no service left on them, or their addresses changed).
        var withdrawHosts: [String] = []
        /// Host names to publish, with their addresses.
        var publishHosts: [String: [[UInt8]]] = [:]
        /// Services to publish (after their hosts).
        var publishServices: [Announcement] = []
        /// Services whose TXT record changed.
        var changeText: [Announcement] = []

        /// Whether nothing changes.
        var isEmpty: Bool { self == AnnouncementPlan() }

        /// The changes from `made` (the announcements on the link now, and their hosts'
        /// addresses) to `wanted`.
        init(
            made: [Announcement.ID: Announcement], hosts: [String: [[UInt8]]],
            wanted: [Announcement.ID: Announcement]
        ) {
            let wantedHosts = Self.hosts(of: wanted.values)
            for (host, addresses) in hosts where wantedHosts[host] != addresses {
                withdrawHosts.append(host)
            }
            for (host, addresses) in wantedHosts where hosts[host] != addresses {
                publishHosts[host] = addresses
            }
            for (id, announcement) in made {
                guard let next = wanted[id] else {
                    withdrawServices.append(id)
                    continue
                }
                // (A host published again keeps its name: the services naming it stay.)
                if next.service.port != announcement.service.port || next.hostName != announcement.hostName {
                    withdrawServices.append(id)
                    publishServices.append(next)
                } else if next.service.txt != announcement.service.txt {
                    changeText.append(next)
                }
            }
            for (id, announcement) in wanted where made[id] == nil {
                publishServices.append(announcement)
            }
            withdrawServices.sort()
            withdrawHosts.sort()
            publishServices.sort { $0.id < $1.id }
            changeText.sort { $0.id < $1.id }
        }

        init() {}

        /// Each host's addresses: those of its services, once each, in order.
        static func hosts(of announcements: some Sequence<Announcement>) -> [String: [[UInt8]]] {
            var hosts: [String: [[UInt8]]] = [:]
            for announcement in announcements {
                hosts[announcement.hostName, default: []] += announcement.service.addresses
            }
            return hosts.mapValues(MirroredService.ordered)
        }
    }
}
