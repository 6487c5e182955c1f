import Foundation
import SalutStreams

extension DiscoveryGateway {
    /// The other links' services, read from the zone, announced on this link by mDNS through
    /// avahi-daemon (``Configuration/announceRemote``): a phone or `avahi-browse` that only
    /// speaks mDNS sees another link's printer as a service of its own link, on a host
    /// `HOST.LABEL.local` whose addresses are the printer's routed ones.
    ///
    /// DNS pushes nothing, so the zone's serial is asked every ``Configuration/announceInterval``
    /// and the zone read again when it changed; each read becomes an ``AnnouncementPlan``,
    /// applied a few names at a time. A zone that cannot be read, or a service whose records do
    /// not answer, changes nothing (what is announced stays until a read says otherwise). An
    /// announcement that fails for good (its name or host taken) is not tried again until the
    /// zone changes it; one that fails otherwise is tried at the next read. Everything
    /// announced is withdrawn before ``run()`` returns.
    ///
    /// The announcements go through a connection to avahi-daemon of their own, so that they
    /// cannot use up the objects the daemon allows the gateway's browsing (1,024 per client by
    /// default): hence at most ``maximumAnnounced`` of them.
    struct RemoteAnnouncer: Sendable {
        let zone: GatewayZone
        let configuration: Configuration
        let reports: @Sendable (Report) -> Void
        /// Told of each service announced here, so that the gateway does not take it for one of
        /// the link's own.
        let announcing: @Sendable (ServiceKey, AnnouncementChange) -> Void

        /// What happens to an announced service's name on this link.
        enum AnnouncementChange: Sendable {
            /// It is about to be published under this name.
            case publishing
            /// It stands under this name (said `publishing` first): if the link was seen to
            /// have it, it is this announcement.
            case published
            /// It is no longer announced under this name.
            case withdrawn
        }

        /// At most this many services are announced (each takes two of the daemon's objects at
        /// most: its own, and its host's).
        static let maximumAnnounced = DiscoveryGateway.maximumAnnouncedServices
        /// At most this many other links are read.
        static let maximumLabels = 64
        /// At most this many hosts, and as many services, are published at once: avahi-daemon
        /// probes each name for about a second, so a few at a time had hundreds of services take
        /// most of a minute to show on the link (docs/benchmarks.md, the gateway against the
        /// reflector), while the daemon's packet budget (below) is shared by all of them (it
        /// packs the probes and announcements due together, about two packets a name).
        static let publishingAtOnce = 400
        /// At most this many services of ordinary size (a large TXT record, or a group, counts for
        /// more: ``goodbyeWeight(ofRecordBytes:)``) are withdrawn a second. avahi-daemon sends at most
        /// `ratelimit-burst` packets a second on an interface (Debian sets 1,000) and drops the
        /// rest: 400 withdrawn at once lost some of their goodbyes, and the link's caches kept
        /// those services for up to 75 minutes. A withdrawal's goodbyes took 1.7 packets on the
        /// link (IPv4 and IPv6, some packed together): 400 a second is about 680 packets, two
        /// thirds of the budget, and no goodbye was lost in 7 rounds of 400 (docs/benchmarks.md).
        static let withdrawalsPerSecond = 400
        /// How often a zone whose serial cannot be read is read whole.
        static let unknownSerialEvery: Duration = .seconds(2)
        /// How long a changed zone's serial must stay the same before the zone is read.
        static let stillFor: Duration = .milliseconds(100)
        /// How often an unchanged zone is read again while an announcement waits to be tried
        /// again.
        static let retryEvery: Duration = .seconds(30)

        /// What is announced now, owned by the announcer's one task.
        struct Made {
            var announcements: [Announcement.ID: Announcement] = [:]
            var services: [Announcement.ID: Announced] = [:]
            var hosts: [String: [[UInt8]]] = [:]
            var hostHandles: [String: HostAdvertisement] = [:]
            /// Announcements that failed for good, as they were: not tried again until the zone
            /// changes them.
            var refused: [Announcement.ID: Announcement] = [:]
            /// Hosts whose name another machine on the link took, with the addresses they had:
            /// not published again (nor their services) until the zone changes them.
            var refusedHosts: [String: [[UInt8]]] = [:]
            /// Failures already reported (said once per version of the zone).
            var told = Set<String>()
            /// Whether a failure that may pass was met: the zone is read again in 30 s.
            var retryPending = false
            /// The name each announced service is counted under in ``announcing`` (a service
            /// announced alone may be renamed by the daemon later, when another machine takes its
            /// name: ``sayRenames(in:)``).
            var countedNames: [Announcement.ID: String] = [:]
            /// Services announced each alone from now on, never in a group again: those a group
            /// took down with it (a member that left, or a name taken on the link). A device that
            /// keeps coming and going, or keeps claiming a name, then takes down no other.
            var ungrouped = Set<Announcement.ID>()
        }

        /// Says through ``announcing`` and the reports that services announced alone were renamed
        /// since (another machine took their name: the daemon took the next one), so that the
        /// gateway counts their new names as its own and not the old ones.
        private func sayRenames(in made: inout Made) {
            for (id, announced) in made.services.sorted(by: { $0.key < $1.key }) {
                guard case .alone(let handle) = announced, let counted = made.countedNames[id], counted != handle.name
                else { continue }
                let name = handle.name
                announcing(ServiceKey(name: counted, type: id.key.type), .withdrawn)
                announcing(ServiceKey(name: name, type: id.key.type), .publishing)
                announcing(ServiceKey(name: name, type: id.key.type), .published)
                made.countedNames[id] = name
                reports(.announced(id.key, fromLabel: id.label, as: name))
            }
        }

        /// Announces until the calling task is cancelled, then withdraws everything.
        func run() async {
            let context = DiscoveryContext(label: "gateway announcements")
            var made = Made()
            var lastSerial: UInt32?
            var lastRead = ContinuousClock.now
            var toldFailure = false
            while !Task.isCancelled {
                do {
                    // An unchanged zone is not read again (unless something failed and may
                    // be tried again).
                    var serial = try await zone.serial()
                    // A zone being written (another gateway's burst of updates) is read once it
                    // holds still for a moment, a second late at most: read half-written, its
                    // services were announced in two rounds of a second's probing each.
                    if serial != lastSerial, serial != nil {
                        let latest = ContinuousClock.now + .seconds(1)
                        while ContinuousClock.now < latest {
                            try await Task.sleep(for: Self.stillFor)
                            let again = try await zone.serial()
                            if again == serial { break }
                            serial = again
                        }
                    }
                    sayRenames(in: &made)
                    let hostLost =
                        made.hostHandles.values.contains { $0.failure != nil }
                        || made.services.values.contains(where: \.isLost)
                    // Something to try again (a failure that may pass): at most every 30 s.
                    let retryDue = made.retryPending && .now - lastRead > Self.retryEvery
                    // A zone whose serial cannot be read is read whole, at most every 2 s.
                    let unknownDue = serial == nil && .now - lastRead >= Self.unknownSerialEvery
                    if unknownDue || serial != lastSerial || retryDue || hostLost {
                        // A new version of the zone: its failures may be said again.
                        if serial != lastSerial { made.told = [] }
                        lastRead = .now
                        let (wanted, unreadable) = try await readZone()
                        await apply(wanted: wanted, unreadable: unreadable, to: &made, context: context)
                        if !unreadable.isEmpty { made.retryPending = true }
                        lastSerial = serial
                    }
                    toldFailure = false
                } catch {
                    if Task.isCancelled { break }
                    if !toldFailure {
                        reports(
                            .retrying(
                                reason: "reading the other links' services: \(error)",
                                seconds: configuration.announceInterval / .seconds(1)))
                    }
                    toldFailure = true
                }
                try? await Task.sleep(for: configuration.announceInterval)
            }
            // (Paced, even now: a goodbye the daemon drops leaves the service in every cache.)
            var pace = WithdrawalPace()
            _ = await withdraw(Array(made.services.keys), from: &made, pace: &pace)
            for (_, handle) in made.hostHandles { await handle.withdraw() }
        }

        /// The announcements the zone asks for: every other label's services of the types this
        /// gateway takes that have a host of one label and an address, at most
        /// ``maximumAnnounced`` (in label and name order); and the services listed whose
        /// records did not answer.
        private func readZone() async throws -> (
            wanted: [Announcement.ID: Announcement], unreadable: Set<Announcement.ID>
        ) {
            let limit = min(configuration.maximumServices, Self.maximumAnnounced)
            let excluded = Set(configuration.excludedTypes.map { $0.lowercased() })
            let only = Set(configuration.types.map { $0.lowercased() })
            let admitting: (String) -> Bool = { type in
                let type = type.lowercased()
                return DiscoveryGateway.mayMirror(type: type) && !excluded.contains(type)
                    && (only.isEmpty || only.contains(type))
            }
            var unreadable = Set<Announcement.ID>()
            // Each link's share first: the links take turns, one service each, so that one link
            // with many services cannot crowd the others out of the limit.
            let labels = try await zone.otherLabels(limit: Self.maximumLabels).sorted(by: { $0.key < $1.key })
            // Each link's share of the limit is read, no more (a read costs queries per service);
            // what the links with fewer leave is shared among those that filled theirs, which are
            // read again with the larger share (a zone with many quiet labels gave a busy link
            // only its 1/N of the limit). At most three reads in all: a zone whose labels hold
            // every size cannot make one read of the zone cost more than about three limits.
            var listedByLabel: [String: [ServiceKey: MirroredService]] = [:]
            var share = labels.isEmpty ? limit : (limit + labels.count - 1) / labels.count
            var toRead = labels
            var passes = 0
            while !toRead.isEmpty, passes < 3 {
                passes += 1
                for (label, domain) in toRead {
                    listedByLabel[label] = try await zone.list(
                        under: domain, admitting: admitting, limit: share, maximumTypes: configuration.maximumTypes)
                }
                let full = toRead.filter { listedByLabel[$0.key]?.count == share }
                let spare = limit - listedByLabel.values.reduce(0) { $0 + $1.count }
                guard !full.isEmpty, spare > 0 else { break }
                share += (spare + full.count - 1) / full.count
                toRead = full
            }
            var byLabel: [[Announcement]] = []
            for (label, _) in labels {
                let listed = listedByLabel[label] ?? [:]
                var announcements: [Announcement] = []
                for (_, service) in listed.sorted(by: { $0.key < $1.key }) {
                    var announcement = Announcement(label: label, service: service)
                    if service.isUnreadable {
                        unreadable.insert(announcement.id)
                        continue
                    }
                    // Only addresses that mean something off the zone's link: never loopback,
                    // link-local or unspecified ones, whatever the zone holds.
                    announcement.service.addresses = service.addresses.filter(MirroredService.routesOffTheLink)
                    // (A host the link cannot name, of several labels or escapes, is not
                    // announced: it would be published as any name the zone says.)
                    if MirroredService.isHostLabel(Substring(service.host)), !announcement.service.addresses.isEmpty {
                        announcements.append(announcement)
                    }
                }
                byLabel.append(announcements)
            }
            var wanted: [Announcement.ID: Announcement] = [:]
            var turn = 0
            while wanted.count < limit, byLabel.contains(where: { turn < $0.count }) {
                for announcements in byLabel where turn < announcements.count && wanted.count < limit {
                    wanted[announcements[turn].id] = announcements[turn]
                }
                turn += 1
            }
            return (wanted, unreadable)
        }

        /// Changes the link from what `made` holds to `wanted` (the `unreadable` ones keep what
        /// they have); sets `made.retryPending` when something may succeed later.
        private func apply(
            wanted: [Announcement.ID: Announcement], unreadable: Set<Announcement.ID>, to made: inout Made,
            context: DiscoveryContext
        ) async {
            made.retryPending = false
            let (plan, attempted) = await plan(wanted: wanted, unreadable: unreadable, made: &made)
            guard !plan.isEmpty else { return }
            if configuration.dryRun { return dryRun(plan, made: &made) }
            var pace = WithdrawalPace()
            // (Members of a group that a leaving service took down are announced again.)
            let again = await withdraw(plan, attempted: attempted, from: &made, pace: &pace)
            let publishing = plan.publishServices + again
            let alone = again + plan.publishServices.filter { made.ungrouped.contains($0.id) }
            // Hosts and their services at once, up to ``publishingAtOnce`` of each: avahi-daemon
            // probes each name for about a second, so one after another a hundred would take
            // minutes, and hosts before their services took two seconds for one service to show
            // (docs/benchmarks.md).
            // A service whose host could not be published is withdrawn below, once both are done.
            for announcement in publishing { announcing(announcement.service.key, .publishing) }
            async let publishedHosts = DiscoveryGateway.inTurns(
                plan.publishHosts.sorted { $0.key < $1.key }, atOnce: Self.publishingAtOnce
            ) { pair in
                await Result(catching: {
                    try await HostAdvertisement.publish(hostName: pair.key, rawAddresses: pair.value, context: context)
                })
            }
            async let publishedServices = publish(
                plan.publishServices.filter { !made.ungrouped.contains($0.id) }, alone: alone, context: context)
            let (hosts, published) = await (publishedHosts, publishedServices)
            let hostFailures = await record(hosts: hosts.map { (($0.0.key, $0.0.value), $0.1) }, in: &made)
            let services = await withoutTheirHosts(published, hostFailures: hostFailures, pace: &pace)
            if Task.isCancelled {
                // Kept, so that `run()` withdraws them at its pace (released here, every goodbye
                // would go at once).
                for case (let announcement, .success(let handle)) in services {
                    made.announcements[announcement.id] = announcement
                    made.services[announcement.id] = handle
                    made.countedNames[announcement.id] = announcement.service.key.name
                }
                return
            }
            record(services, withdrawnBefore: plan.withdrawServices + again.map(\.id), in: &made)
            await changeText(plan.changeText, in: &made)
            await tidyHosts(after: hostFailures, in: &made)
        }

        /// What to change, and the services attempted: `wanted` with the `unreadable` ones as
        /// `made` has them, without what failed for good and is still wanted as it was. Hosts
        /// whose name another machine took since go first, with their services.
        private func plan(
            wanted: [Announcement.ID: Announcement], unreadable: Set<Announcement.ID>, made: inout Made
        ) async -> (AnnouncementPlan, attempted: [Announcement.ID: Announcement]) {
            var wanted = wanted
            for id in unreadable { if let kept = made.announcements[id] { wanted[id] = kept } }
            // A host whose name another machine took since: its services go too (their SRV would
            // send clients to that machine), said once; neither comes back until the zone
            // changes the host's addresses.
            for (host, handle) in made.hostHandles {
                guard let failure = handle.failure else { continue }
                made.refusedHosts[host] = made.hosts[host] ?? []
                made.hosts[host] = nil
                made.hostHandles[host] = nil
                await withdrawServices(on: host, because: failure, from: &made)
            }
            // A group that stopped since (one of its names taken on the link): its members are
            // no longer announced (said once), and are announced again, as new (one by one, if
            // the group fails again).
            // (Which groups are lost is decided once: a group may fail on the daemon's queue
            // while its members are looked at.)
            let lost = Set(
                made.services.values.compactMap { announced -> ObjectIdentifier? in
                    guard case .member(let group) = announced, group.failure != nil else { return nil }
                    return ObjectIdentifier(group)
                })
            for (id, announced) in made.services.sorted(by: { $0.key < $1.key }) {
                guard case .member(let group) = announced, lost.contains(ObjectIdentifier(group)) else { continue }
                made.services[id] = nil
                made.announcements[id] = nil
                made.countedNames[id] = nil
                made.ungrouped.insert(id)
                announcing(id.key, .withdrawn)
                reports(.unannounced(id.key, fromLabel: id.label))
                if case .member(let group) = announced, let failure = group.failure,
                    made.told.insert("group \(id)").inserted
                {
                    reports(
                        .skipped(
                            id.key,
                            reason:
                                "withdrawn from this link with the services announced beside it: \(failure); announced again"
                        ))
                }
            }
            made.ungrouped.formIntersection(wanted.keys)
            // What failed for good and is still wanted as it was is not tried again.
            made.refused = made.refused.filter { wanted[$0.key] == $0.value }
            let wantedHosts = AnnouncementPlan.hosts(of: wanted.values)
            made.refusedHosts = made.refusedHosts.filter { wantedHosts[$0.key] == $0.value }
            let attempted = wanted.filter {
                made.refused[$0.key] == nil && made.refusedHosts[$0.value.hostName] == nil
            }
            return (AnnouncementPlan(made: made.announcements, hosts: made.hosts, wanted: attempted), attempted)
        }

        /// Withdraws what `plan` says goes (services at `pace`, then hosts); a service no longer
        /// attempted is reported unannounced. Returns the services that stay, taken down with a
        /// group that a leaving one belonged to, as `attempted` has them: to be announced again.
        private func withdraw(
            _ plan: AnnouncementPlan, attempted: [Announcement.ID: Announcement], from made: inout Made,
            pace: inout WithdrawalPace
        ) async -> [Announcement] {
            let staying = await withdraw(plan.withdrawServices, from: &made, pace: &pace)
            for id in plan.withdrawServices {
                made.announcements[id] = nil
                if attempted[id] == nil { reports(.unannounced(id.key, fromLabel: id.label)) }
            }
            for host in plan.withdrawHosts {
                made.hosts[host] = nil
                await made.hostHandles.removeValue(forKey: host)?.withdraw()
            }
            return staying.map { attempted[$0.id] ?? $0 }
        }

        /// Keeps the hosts published; returns why the others failed. A host taken by another
        /// machine is refused, with the services still naming it; another failure is retried.
        private func record(
            hosts: [((String, [[UInt8]]), Result<HostAdvertisement, any Error>)], in made: inout Made
        ) async -> [String: any Error] {
            var hostFailures: [String: any Error] = [:]
            for ((host, addresses), result) in hosts {
                switch result {
                case .success(let handle):
                    made.hosts[host] = addresses
                    made.hostHandles[host] = handle
                case .failure(let error):
                    hostFailures[host] = error
                    if (error as? DiscoveryError)?.code == .collision {
                        made.refusedHosts[host] = addresses
                        // Published again (its addresses changed) and taken: the services
                        // still naming it go too.
                        await withdrawServices(on: host, because: error, from: &made)
                    } else {
                        made.retryPending = true
                    }
                }
            }
            return hostFailures
        }

        /// `published`, with a service published on a host that could not be withdrawn (at
        /// `pace`) and failed with its host's error: its SRV would name a host this link does
        /// not know, or another machine.
        private func withoutTheirHosts(
            _ published: [(Announcement, Result<Announced, any Error>)], hostFailures: [String: any Error],
            pace: inout WithdrawalPace
        ) async -> [(Announcement, Result<Announced, any Error>)] {
            var services: [(Announcement, Result<Announced, any Error>)] = []
            // (A group holds one host's services: all of them go with it.)
            var groups: [ObjectIdentifier: AnnouncedGroup] = [:]
            for (announcement, result) in published {
                if let failure = hostFailures[announcement.hostName] {
                    switch result {
                    case .success(.alone(let handle)):
                        await handle.withdraw()
                        await pace.oneMore(weighing: Self.goodbyeWeight(ofRecordBytes: announcement.recordBytes))
                    case .success(.member(let group)): groups[ObjectIdentifier(group)] = group
                    case .failure: break
                    }
                    services.append((announcement, .failure(failure)))
                } else {
                    services.append((announcement, result))
                }
            }
            for group in groups.values {
                await group.withdraw()
                await pace.oneMore(weighing: Self.goodbyeWeight(ofRecordBytes: group.recordBytes))
            }
            return services
        }

        /// Keeps the services published and reports them (renamed ones under their new name);
        /// a service that failed is refused for good (a collision, a bad name) or retried, and
        /// said once. `withdrawnBefore`: those announced before and withdrawn to be announced anew.
        private func record(
            _ services: [(Announcement, Result<Announced, any Error>)],
            withdrawnBefore: [Announcement.ID], in made: inout Made
        ) {
            for (announcement, result) in services {
                let id = announcement.id
                switch result {
                case .success(let announced):
                    made.announcements[id] = announcement
                    made.services[id] = announced
                    made.told.remove("\(id)")
                    let name = announced.name(of: id)
                    made.countedNames[id] = name
                    if name != announcement.service.key.name {
                        // Renamed: the name it was meant to have is another service's here.
                        announcing(announcement.service.key, .withdrawn)
                        announcing(ServiceKey(name: name, type: announcement.service.key.type), .publishing)
                    }
                    announcing(ServiceKey(name: name, type: announcement.service.key.type), .published)
                    reports(.announced(announcement.service.key, fromLabel: announcement.label, as: name))
                case .failure(let error):
                    announcing(announcement.service.key, .withdrawn)
                    // (Announced before and withdrawn to be announced anew: no longer here.)
                    if withdrawnBefore.contains(id) {
                        reports(.unannounced(id.key, fromLabel: id.label))
                    }
                    let forGood =
                        (error as? DiscoveryError).map { [.collision, .invalidDomain].contains($0.code) } ?? false
                    if forGood { made.refused[id] = announcement } else { made.retryPending = true }
                    if made.told.insert("\(id)").inserted {
                        reports(
                            .skipped(
                                announcement.service.key,
                                reason:
                                    "not announced from \(announcement.label) on this link\(forGood ? "" : " (tried again within 30 s)"): \(error)"
                            ))
                    }
                }
            }
        }

        /// Announces the new TXT records of services announced already; one that fails is
        /// retried, and said once.
        private func changeText(_ changed: [Announcement], in made: inout Made) async {
            for announcement in changed {
                guard let handle = made.services[announcement.id] else { continue }
                do {
                    try await handle.changeTXTRecord(of: announcement.id, to: announcement.service.txtRecord)
                    made.announcements[announcement.id] = announcement
                    reports(
                        .announced(
                            announcement.service.key, fromLabel: announcement.label,
                            as: handle.name(of: announcement.id)))
                } catch {
                    made.retryPending = true
                    if made.told.insert("txt \(announcement.id)").inserted {
                        reports(
                            .skipped(announcement.service.key, reason: "its new TXT record was not announced: \(error)")
                        )
                    }
                }
            }
        }

        /// Says once, for the services still naming it, that a host could not be published again
        /// (its addresses changed); withdraws the hosts no service names any more.
        private func tidyHosts(after hostFailures: [String: any Error], in made: inout Made) async {
            for (host, error) in hostFailures where made.told.insert("host \(host)").inserted {
                for (id, announcement) in made.announcements where announcement.hostName == host {
                    reports(.skipped(id.key, reason: "its host \(host) could not be announced again: \(error)"))
                }
            }
            let named = Set(made.announcements.values.map(\.hostName))
            for host in made.hostHandles.keys where !named.contains(host) {
                made.hosts[host] = nil
                await made.hostHandles.removeValue(forKey: host)?.withdraw()
            }
        }

        /// Withdraws the services announced on `host`, whose name another machine took (their SRV
        /// would send clients there), each said once.
        private func withdrawServices(on host: String, because failure: any Error, from made: inout Made) async {
            let onHost = made.announcements.filter { $0.value.hostName == host }.keys.sorted()
            let announced = onHost.filter { made.services[$0] != nil }
            // (A group holds one host's services: none stays behind.)
            var pace = WithdrawalPace()
            _ = await withdraw(announced, from: &made, pace: &pace)
            for id in announced { reports(.unannounced(id.key, fromLabel: id.label)) }
            for id in onHost {
                made.announcements[id] = nil
                if made.told.insert("lost \(id)").inserted {
                    reports(
                        .skipped(
                            id.key,
                            reason:
                                "withdrawn from this link: another machine took its host's name \(host) (\(failure)); announced again once the zone changes the host"
                        ))
                }
            }
        }

        /// With ``Configuration/dryRun``: says what would be announced or withdrawn, and takes
        /// it as done.
        private func dryRun(_ plan: AnnouncementPlan, made: inout Made) {
            var lines: [String] = []
            for id in plan.withdrawServices {
                made.announcements[id] = nil
                lines.append("withdraw \(id.key) (from \(id.label))")
            }
            for host in plan.withdrawHosts {
                made.hosts[host] = nil
                lines.append("withdraw host \(host)")
            }
            for (host, addresses) in plan.publishHosts.sorted(by: { $0.key < $1.key }) {
                made.hosts[host] = addresses
                lines.append("announce host \(host) at \(addresses.map(Self.text).joined(separator: " "))")
            }
            for announcement in plan.publishServices + plan.changeText {
                made.announcements[announcement.id] = announcement
                lines.append(
                    "announce \(announcement.service.key) (from \(announcement.label)) on \(announcement.hostName) port \(announcement.service.port)"
                )
            }
            // (Names from the zone: escaped as the gateway's other dry-run lines are.)
            reports(.wouldSend(lines.map(Self.escaped).joined(separator: "\n")))
        }

        /// `text` with every byte outside printable ASCII, and the backslash, written `\DDD` (as
        /// the gateway's `nsupdate` lines write names): safe to print.
        private static func escaped(_ text: String) -> String {
            var out = ""
            for byte in text.utf8 {
                if (0x20..<0x7f).contains(byte) && byte != UInt8(ascii: "\\") {
                    out.unicodeScalars.append(Unicode.Scalar(byte))
                } else {
                    out += "\\" + String(format: "%03d", Int(byte))
                }
            }
            return out
        }

        /// `bytes` as an address in text.
        private static func text(_ bytes: [UInt8]) -> String {
            bytes.count == 4
                ? SocketAddress(ipv4: bytes, port: 0).host : SocketAddress(ipv6: bytes, port: 0).host
        }

        /// Withdrawals at most ``withdrawalsPerSecond`` a second: after each tenth of them, the
        /// rest of that tenth of a second is waited (not cancellable: a withdrawal that starts
        /// finishes, even as the gateway stops).
        struct WithdrawalPace {
            private var owed = 0
            private var since = ContinuousClock.now

            /// Counts one more withdrawal, or `weight` of them (a group's); waits when a tenth of
            /// a second's share is used up, as many tenths as were used.
            mutating func oneMore(weighing weight: Int = 1) async {
                owed += max(1, weight)
                let batch = max(1, withdrawalsPerSecond / 10)
                guard owed >= batch else { return }
                let due = since + .milliseconds(100 * (owed / batch))
                owed %= batch
                let clock = ContinuousClock()
                if due > clock.now {
                    // (A detached sleep: a cancelled gateway still paces its last goodbyes.)
                    await Task.detached { try? await clock.sleep(until: due) }.value
                }
                since = clock.now
            }
        }
    }
}

extension Result where Failure == any Error {
    /// The result of `body`: its value, or what it threw.
    init(catching body: () async throws -> Success) async {
        do { self = .success(try await body()) } catch { self = .failure(error) }
    }
}

extension DiscoveryGateway.MirroredService {
    /// Its TXT strings as a record (a record that cannot be one: empty).
    var txtRecord: TXTRecord {
        let bytes = txt.flatMap { string in [UInt8(min(string.count, 255))] + string.prefix(255) }
        return TXTRecord(parsingLeniently: Data(bytes))
    }
}
