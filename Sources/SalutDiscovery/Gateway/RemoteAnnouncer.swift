import Foundation
import SalutStreams

extension DiscoveryGateway {
    /// The other links' services, read from the zone, announced on this link by mDNS through
    /// avahi-daemon (``Configuration/announceRemote``): a phone or `avahi-browse` that only
    /// speaks mDNS sees another link's printer as a service of its own link, on a host
    /// `HOST.LABEL.local` whose addresses are the printer's routed ones.
    ///
    /// DNS pushes nothing, so the zone is read again every ``Configuration/announceInterval``;
    /// each read is turned into an ``AnnouncementPlan`` and applied. A zone that cannot be read
    /// changes nothing (what is announced stays until a read says otherwise). Everything
    /// announced is withdrawn when the gateway stops.
    struct RemoteAnnouncer: Sendable {
        let zone: GatewayZone
        let configuration: Configuration
        let reports: @Sendable (Report) -> Void

        /// The announcements on the link and the handles that keep them there, owned by the
        /// announcer's one task.
        private struct Made {
            var services: [Announcement.ID: (announcement: Announcement, handle: ServiceAdvertisement)] = [:]
            var hosts: [String: (addresses: [[UInt8]], handle: HostAdvertisement)] = [:]
            /// Announcements that could not be made, as they were: not tried again until the
            /// zone changes them.
            var failed: [Announcement.ID: Announcement] = [:]
        }

        /// Announces until the calling task is cancelled, then withdraws everything.
        func run() async {
            var made = Made()
            var toldFailure = false
            while !Task.isCancelled {
                do {
                    let wanted = try await readZone()
                    toldFailure = false
                    await apply(wanted: wanted, to: &made)
                } catch {
                    if !toldFailure {
                        reports(
                            .retrying(
                                reason: "reading the other links' services: \(error)",
                                seconds: Double(configuration.announceInterval.components.seconds)))
                    }
                    toldFailure = true
                }
                try? await Task.sleep(for: configuration.announceInterval)
            }
            await withTaskGroup(of: Void.self) { group in
                for (_, service) in made.services { group.addTask { await service.handle.withdraw() } }
                for (_, host) in made.hosts { group.addTask { await host.handle.withdraw() } }
            }
        }

        /// The announcements the zone asks for: every other label's services that have a host
        /// and an address, at most ``Configuration/maximumServices`` (in label and name order).
        private func readZone() async throws -> [Announcement.ID: Announcement] {
            var wanted: [Announcement.ID: Announcement] = [:]
            for (label, domain) in try await zone.otherLabels().sorted(by: { $0.key < $1.key }) {
                for (_, service) in try await zone.list(under: domain).sorted(by: { $0.key < $1.key })
                where !service.host.isEmpty && !service.addresses.isEmpty {
                    guard wanted.count < configuration.maximumServices else { return wanted }
                    let announcement = Announcement(label: label, service: service)
                    wanted[announcement.id] = announcement
                }
            }
            return wanted
        }

        /// Changes the link from what `made` holds to `wanted`.
        private func apply(wanted: [Announcement.ID: Announcement], to made: inout Made) async {
            // What failed and is still wanted as it was is not tried again.
            made.failed = made.failed.filter { wanted[$0.key] == $0.value }
            let attempted = wanted.filter { made.failed[$0.key] == nil }
            let plan = AnnouncementPlan(
                made: made.services.mapValues(\.announcement), hosts: made.hosts.mapValues(\.addresses),
                wanted: attempted)
            guard !plan.isEmpty else { return }
            for id in plan.withdrawServices {
                guard let gone = made.services.removeValue(forKey: id) else { continue }
                await gone.handle.withdraw()
                if attempted[id] == nil { reports(.unannounced(id.key, fromLabel: id.label)) }
            }
            for host in plan.withdrawHosts {
                await made.hosts.removeValue(forKey: host)?.handle.withdraw()
            }
            // Hosts, then their services, each group at once (avahi-daemon probes each name
            // for about a second: one after another, a hundred would take minutes).
            let hosts = await withTaskGroup(of: (String, [[UInt8]], Result<HostAdvertisement, DiscoveryError>).self) {
                group in
                for (host, addresses) in plan.publishHosts {
                    group.addTask {
                        do {
                            return (
                                host, addresses,
                                .success(
                                    try await HostAdvertisement.publish(
                                        hostName: host, rawAddresses: addresses))
                            )
                        } catch {
                            return (host, addresses, .failure(error as? DiscoveryError ?? .dnsFailure("\(error)")))
                        }
                    }
                }
                return await group.reduce(into: []) { $0.append($1) }
            }
            var hostFailures: [String: DiscoveryError] = [:]
            for (host, addresses, result) in hosts {
                switch result {
                case .success(let handle): made.hosts[host] = (addresses, handle)
                case .failure(let error): hostFailures[host] = error
                }
            }
            let services = await withTaskGroup(of: (Announcement, Result<ServiceAdvertisement, DiscoveryError>).self) {
                group in
                for announcement in plan.publishServices {
                    if let failure = hostFailures[announcement.hostName] {
                        group.addTask { (announcement, .failure(failure)) }
                        continue
                    }
                    group.addTask {
                        do {
                            return (
                                announcement,
                                .success(
                                    try await ServiceAdvertisement.publish(
                                        name: announcement.service.key.name, type: announcement.service.key.type,
                                        port: Int(announcement.service.port),
                                        txtRecord: announcement.service.txtRecord, host: announcement.hostName))
                            )
                        } catch {
                            return (announcement, .failure(error as? DiscoveryError ?? .dnsFailure("\(error)")))
                        }
                    }
                }
                return await group.reduce(into: []) { $0.append($1) }
            }
            for (announcement, result) in services.sorted(by: { $0.0.id < $1.0.id }) {
                switch result {
                case .success(let handle):
                    made.services[announcement.id] = (announcement, handle)
                    reports(.announced(announcement.service.key, fromLabel: announcement.label, as: handle.name))
                case .failure(let error):
                    made.failed[announcement.id] = announcement
                    reports(
                        .skipped(
                            announcement.service.key,
                            reason: "not announced from \(announcement.label) on this link: \(error)"))
                }
            }
            for announcement in plan.changeText {
                guard let current = made.services[announcement.id] else { continue }
                do {
                    try await current.handle.changeTXTRecord(to: announcement.service.txtRecord)
                    made.services[announcement.id] = (announcement, current.handle)
                    reports(
                        .announced(announcement.service.key, fromLabel: announcement.label, as: current.handle.name))
                } catch {
                    reports(
                        .skipped(announcement.service.key, reason: "its new TXT record was not announced: \(error)"))
                }
            }
            // Hosts no service names any more.
            let named = Set(made.services.values.map(\.announcement.hostName))
            for host in made.hosts.keys where !named.contains(host) {
                await made.hosts.removeValue(forKey: host)?.handle.withdraw()
            }
        }
    }
}

extension DiscoveryGateway.MirroredService {
    /// Its TXT strings as a record (a record that cannot be one: empty).
    var txtRecord: TXTRecord {
        let bytes = txt.flatMap { string in [UInt8(min(string.count, 255))] + string.prefix(255) }
        return TXTRecord(parsingLeniently: Data(bytes))
    }
}
