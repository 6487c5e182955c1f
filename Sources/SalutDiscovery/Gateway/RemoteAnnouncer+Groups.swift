import Foundation

extension DiscoveryGateway.RemoteAnnouncer {
    typealias Announcement = DiscoveryGateway.Announcement
    typealias AnnouncedGroup = DiscoveryGateway.AnnouncedGroup

    /// At most this many of one host's services, published in one zone read, share an entry
    /// group (``DiscoveryGateway/AnnouncedGroup``): eight services' records (a PTR, SRV and TXT
    /// each) fill about one packet, so a group's goodbyes take about one packet on each of IPv4
    /// and IPv6; and at most seven others are taken down for a second when one of them leaves.
    /// (avahi-daemon allows a client 32 additions to a group by default,
    /// `entries-per-entry-group-max`; a daemon that allows fewer gets the services one by one.)
    static let servicesPerGroup = 8

    /// How a service is announced on the link.
    enum Announced: Sendable {
        /// In an entry group of its own (renamed there if its name was taken).
        case alone(ServiceAdvertisement)
        /// With others of its host, in one group (never renamed).
        case member(of: AnnouncedGroup)

        /// The name the service `id` has on the link.
        func name(of id: Announcement.ID) -> String {
            switch self {
            case .alone(let handle): handle.name
            case .member: id.key.name
            }
        }

        /// Whether the service is no longer announced though it was (its group stopped: one of
        /// its names taken on the link since).
        var isLost: Bool {
            if case .member(let group) = self { group.failure != nil } else { false }
        }

        /// Announces `txtRecord` as the service `id`'s TXT record.
        ///
        /// - Throws: `DiscoveryError` when the record cannot be published.
        func changeTXTRecord(of id: Announcement.ID, to txtRecord: TXTRecord) async throws {
            switch self {
            case .alone(let handle): try await handle.changeTXTRecord(to: txtRecord)
            case .member(let group): try group.changeTXTRecord(of: id, to: txtRecord)
            }
        }
    }

    /// Publishes `announcements`, each host's in groups of up to ``servicesPerGroup`` (a
    /// service alone in its own), and each of `alone` in a group of its own, up to
    /// ``publishingAtOnce`` groups at once; the results in that order. A group that fails is
    /// published again one service at a time: a name the link refused (`collision`: which one
    /// is not said) is then the only one renamed, and a daemon that allows fewer records a
    /// group still takes them.
    ///
    /// `alone`: the services a leaving one took down with its group. Were they grouped again, a
    /// service that keeps coming and going under the same host name (any device on the other
    /// link may name any host in its SRV record) could take them down every time.
    func publish(
        _ announcements: [Announcement], alone: [Announcement], context: DiscoveryContext
    ) async -> [(Announcement, Result<Announced, any Error>)] {
        let groups = Self.groups(of: announcements) + alone.map { [$0] }
        let published = await DiscoveryGateway.inTurns(groups, atOnce: Self.publishingAtOnce) {
            chunk in
            if chunk.count > 1 {
                if let group = try? await AnnouncedGroup.publish(chunk, context: context) {
                    return chunk.map { ($0, Result<Announced, any Error>.success(.member(of: group))) }
                }
            }
            return await DiscoveryGateway.inTurns(chunk, atOnce: Self.servicesPerGroup) { announcement in
                await Result(catching: {
                    Announced.alone(
                        try await ServiceAdvertisement.publish(
                            name: announcement.service.key.name, type: announcement.service.key.type,
                            port: Int(announcement.service.port), txtRecord: announcement.service.txtRecord,
                            context: context, host: announcement.hostName))
                })
            }
        }
        return published.flatMap(\.1)
    }

    /// `announcements` in groups: each host's, in the order they come, at most
    /// ``servicesPerGroup`` a group; the hosts in the order of their first service.
    static func groups(of announcements: [Announcement]) -> [[Announcement]] {
        var byHost: [String: [Announcement]] = [:]
        var hosts: [String] = []
        for announcement in announcements {
            if byHost[announcement.hostName] == nil { hosts.append(announcement.hostName) }
            byHost[announcement.hostName, default: []].append(announcement)
        }
        return hosts.flatMap { host in
            let services = byHost[host] ?? []
            return stride(from: 0, to: services.count, by: servicesPerGroup).map {
                Array(services[$0..<min($0 + servicesPerGroup, services.count)])
            }
        }
    }

    /// Withdraws the services `ids` (those announced) at `pace`, each group once, and says so
    /// through `announcing` once each is gone. Returns the services that stay, announced in a
    /// group with one that goes: withdrawn with it (and said so), no longer in `made`, to be
    /// announced again.
    func withdraw(
        _ ids: [Announcement.ID], from made: inout Made, pace: inout WithdrawalPace
    ) async -> [Announcement] {
        // Each group's, with its members that go.
        var groups: [ObjectIdentifier: (group: AnnouncedGroup, going: [Announcement.ID])] = [:]
        for id in ids {
            guard let announced = made.services.removeValue(forKey: id) else { continue }
            switch announced {
            case .alone(let handle):
                await handle.withdraw()
                await pace.oneMore(
                    weighing: Self.goodbyeWeight(ofRecordBytes: made.announcements[id]?.recordBytes ?? 0))
                announcing(made.counted(id, announced), .withdrawn)
            case .member(let group): groups[ObjectIdentifier(group), default: (group, [])].going.append(id)
            }
            made.countedNames[id] = nil
        }
        var staying: [Announcement] = []
        for (group, going) in groups.values {
            await group.withdraw()
            await pace.oneMore(weighing: Self.goodbyeWeight(ofRecordBytes: group.recordBytes))
            // (A group's members are never renamed.)
            for id in going { announcing(id.key, .withdrawn) }
            // The others still announced in this very group go with it.
            for id in group.ids where !going.contains(id) {
                guard case .member(let holder) = made.services[id], holder === group else { continue }
                made.services[id] = nil
                made.countedNames[id] = nil
                announcing(id.key, .withdrawn)
                if let announcement = made.announcements.removeValue(forKey: id) {
                    staying.append(announcement)
                    made.ungrouped.insert(id)
                }
            }
        }
        return staying.sorted { $0.id < $1.id }
    }
}

extension DiscoveryGateway.RemoteAnnouncer.Made {
    /// The key the service `id` is counted under in ``DiscoveryGateway/RemoteAnnouncer/announcing``:
    /// the name it had when last said (a service alone may have been renamed since).
    func counted(
        _ id: DiscoveryGateway.Announcement.ID, _ announced: DiscoveryGateway.RemoteAnnouncer.Announced
    )
        -> DiscoveryGateway.ServiceKey
    {
        .init(name: countedNames[id] ?? announced.name(of: id), type: id.key.type)
    }
}

extension DiscoveryGateway.RemoteAnnouncer {
    /// What withdrawing records of `bytes` counts for in ``WithdrawalPace``, in withdrawals of
    /// one service of ordinary size: two for each 1,400 bytes begun (about a packet on each of
    /// IPv4 and IPv6; the daemon packs a group's goodbyes, eight ordinary services' in about
    /// three packets, where one alone took 1.7), at least one. A large TXT record counts for
    /// more: each goodbye of it is a packet of its own.
    static func goodbyeWeight(ofRecordBytes bytes: Int) -> Int {
        bytes <= 700 ? 1 : 2 * ((bytes + 1399) / 1400)
    }
}

extension DiscoveryGateway.Announcement {
    /// About how many bytes the service's records take in a packet (its PTR, SRV and TXT, names
    /// compressed).
    var recordBytes: Int { 100 + service.key.name.utf8.count + service.txt.reduce(0) { $0 + 1 + $1.count } }
}
