import Foundation
import SalutStreams

extension DiscoveryGateway {
    /// Several of one host's services announced on the link in one avahi-daemon entry group: the
    /// daemon probes their names together, announces them together and, when the group goes,
    /// packs their goodbyes together (one service per group took about two packets a goodbye on
    /// the link, sent one after another, and a burst of them went past the daemon's packet
    /// budget: docs/benchmarks.md, the gateway against the reflector).
    ///
    /// A group is withdrawn whole: a member that leaves while others stay takes them down with
    /// it, and they are announced again, each in a group of its own (``RemoteAnnouncer``). No member
    /// is renamed: a name taken on the link fails the whole group with `collision`, and the
    /// announcer announces its members one by one instead (each then renamed as
    /// ``ServiceAdvertisement`` renames).
    final class AnnouncedGroup: Sendable {
        /// The members, in the order they were added.
        let ids: [Announcement.ID]
        /// About how many bytes the members' records take in packets (their goodbyes' size).
        let recordBytes: Int
        private let operation: RegisterOperation
        private let failed: Locked<DiscoveryError?>

        /// Why the group stopped after it was established (a name of it taken on the link since,
        /// say), or nil while it stands: its members are then no longer announced.
        var failure: DiscoveryError? { failed.value }

        private init(
            ids: [Announcement.ID], recordBytes: Int, operation: RegisterOperation, failed: Locked<DiscoveryError?>
        ) {
            self.ids = ids
            self.recordBytes = recordBytes
            self.operation = operation
            self.failed = failed
        }

        deinit {
            operation.stop()
        }

        /// Publishes `announcements` (two or more, of one host) in one group, through `context`.
        ///
        /// - Throws: `DiscoveryError` as ``ServiceAdvertisement/publish(name:type:domain:port:txtRecord:subtypes:allowRename:timeout:context:host:)``
        ///   does: `collision` when any of the names is taken on the link (which one is not
        ///   said), `timedOut` when the daemon has not established the group within 10 s.
        static func publish(_ announcements: [Announcement], context: DiscoveryContext) async throws -> AnnouncedGroup {
            var requests: [RegisterOperation.Request] = []
            for announcement in announcements {
                var request = try ServiceAdvertisement.request(
                    name: announcement.service.key.name, type: announcement.service.key.type, domain: "local",
                    port: Int(announcement.service.port), txtRecord: announcement.service.txtRecord, subtypes: [],
                    allowRename: false)
                request.host = announcement.hostName
                requests.append(request)
            }
            let failed = Locked<DiscoveryError?>(nil)
            let operation = try await RegisterOperation.established(requests, context: context, within: 10) { event in
                if case .failed(let error) = event { failed.withLock { $0 = error } }
            }
            return AnnouncedGroup(
                ids: announcements.map(\.id), recordBytes: announcements.reduce(0) { $0 + $1.recordBytes },
                operation: operation, failed: failed)
        }

        /// Announces `txtRecord` as the TXT record of the member `id`. A record the daemon
        /// refuses stops the whole group (``failure`` says why), as it would a group of one.
        ///
        /// - Throws: `DiscoveryError` when the record cannot be published.
        func changeTXTRecord(of id: Announcement.ID, to txtRecord: TXTRecord) throws {
            guard let index = ids.firstIndex(of: id) else { return }
            try txtRecord.validateForPublishing()
            operation.updateTXT(txtRecord, at: index)
        }

        /// Withdraws every member (their goodbyes sent together); returns once the daemon has
        /// them.
        func withdraw() async {
            await operation.stopAndWait()
        }
    }
}
