import Foundation
import SalutDiscovery
import SalutTestSupport
import XCTest

/// `LivenessCheck` against the real avahi-daemon: a service with a responder answers; a ghost
/// (announced by a foreign responder that left without its goodbye, so the daemon's cache still
/// lists it) does not.
final class LivenessCheckTests: XCTestCase {
    func testAServiceWithAResponderAnswersAndAGhostTheDaemonStillListsDoesNot() async throws {
        let type = uniqueType("g")
        let ad = try await ServiceAdvertisement.publish(name: "Alive One", type: type, port: 4321)
        defer { ad.cancel() }
        try GhostResponder.announce("Gone Without Goodbye", type: type, port: 4322)
        defer { try? GhostResponder.announce("Gone Without Goodbye", type: type, port: 4322, goodbye: true) }
        let sightings = try await listing(type, holds: ["Alive One", "Gone Without Goodbye"])
        let alive = DiscoveredService(name: "Alive One", type: type)
        let ghost = DiscoveredService(name: "Gone Without Goodbye", type: type)
        let aliveSeen = try XCTUnwrap(sightings[alive]), ghostSeen = try XCTUnwrap(sightings[ghost])
        XCTAssertFalse(aliveSeen.isEmpty || ghostSeen.isEmpty, "\(sightings)")

        let check = LivenessCheck(attempts: 2, interval: .milliseconds(500))
        let aliveAnswers = try await check.isAnswering(alive, on: aliveSeen)
        XCTAssertTrue(aliveAnswers, "a published service answers a direct query")
        let ghostAnswers = try await check.isAnswering(ghost, on: ghostSeen)
        XCTAssertFalse(ghostAnswers, "the ghost is listed but nobody answers for it")
        // Names compare without regard to case, as mDNS names do.
        let otherCase = DiscoveredService(name: "ALIVE one", type: type)
        let otherCaseAnswers = try await check.isAnswering(otherCase, on: aliveSeen)
        XCTAssertTrue(otherCaseAnswers)

        // Once withdrawn, the real one no longer answers either.
        await ad.withdraw()
        let withdrawnAnswers = try await check.isAnswering(alive, on: aliveSeen)
        XCTAssertFalse(withdrawnAnswers)
        let nowhere = try await check.isAnswering(alive, on: [])
        XCTAssertFalse(nowhere, "seen nowhere: nothing to ask")
    }

    func testAServiceOutsideTheLinkIsATypedError() async throws {
        let service = DiscoveredService(name: "Printer", type: "_ipp._tcp", domain: "example.com")
        do {
            _ = try await LivenessCheck().isAnswering(service, on: [])
            XCTFail("a wide-area service cannot be checked by mDNS")
        } catch let error as DiscoveryError {
            XCTAssertEqual(error.code, .invalidDomain)
        }
    }

    /// Where each service was seen, gathered from the updates until every name in `names` is
    /// listed.
    private func listing(
        _ type: String, holds names: Set<String>
    ) async throws -> [DiscoveredService: [ServiceSighting]] {
        try await withDeadline(10, "\(names) listed by the daemon") {
            var sightings: [DiscoveredService: [ServiceSighting]] = [:]
            for try await update in try ServiceBrowser(type: type) {
                sightings.merge(update.sightings) { $1 }
                if names.isSubset(of: Set(update.services.map(\.name))) { return sightings }
            }
            throw CancellationError()
        }
    }
}

/// A foreign mDNS responder on loopback that announces a service, answers direct queries for
/// it until its standard input closes (if `answering`), and leaves without its goodbye:
/// avahi-daemon caches the records (the browse record for 75 minutes) though no one answers
/// for them any more. `goodbye` sends the records with TTL 0 instead, to clean up. The host is
/// `ghost-host.local` at 127.0.0.1, or with `addressless`, a host of its own whose address is
/// never announced (a resolution of the service then finds no address).
enum GhostResponder {
    /// Announces and returns at once (the ghost never answers).
    static func announce(
        _ name: String, type: String, port: Int, goodbye: Bool = false, addressless: Bool = false
    ) throws {
        let run = try start(name, type: type, port: port, answering: false, goodbye: goodbye, addressless: addressless)
        let output = run.finish(seconds: 10)
        guard !run.process.isRunning, run.process.terminationStatus == 0 else {
            throw NSError(domain: "GhostResponder", code: 1, userInfo: [NSLocalizedDescriptionKey: output])
        }
    }

    /// The responder's process: it prints "answering" once announced, then (if `answering`)
    /// answers until its input is closed (`closeInput()`) and exits without a goodbye.
    static func start(
        _ name: String, type: String, port: Int, answering: Bool, goodbye: Bool = false, addressless: Bool = false
    ) throws
        -> Foreign
    {
        let script = """
            import socket, struct, sys
            instance, kind, port, ttl = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
            def name(text):
                out = b''
                for label in text.split('.'):
                    out += bytes([len(label.encode())]) + label.encode()
                return out + b'\\0'
            def record(owner, rtype, ttl, data, flush=False):
                return owner + struct.pack('>HHIH', rtype, 0x8001 if flush else 1, ttl, len(data)) + data
            full = bytes([len(instance.encode())]) + instance.encode() + name(kind + '.local')
            host = name(sys.argv[6] + '.local')
            records = [
                record(name(kind + '.local'), 12, 4500 if ttl else 0, full),
                record(full, 33, 120 if ttl else 0, struct.pack('>HHH', 0, 0, port) + host, True),
                record(full, 16, 4500 if ttl else 0, b'\\x05v=one', True),
            ]
            if sys.argv[6] == 'ghost-host':
                records.append(record(host, 1, 120 if ttl else 0, socket.inet_aton('127.0.0.1'), True))
            packet = struct.pack('>HHHHHH', 0, 0x8400, 0, len(records), 0, 0) + b''.join(records)
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(('', 5353))  # mDNS answers count only from port 5353
            s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton('127.0.0.1'))
            s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, 255)
            s.sendto(packet, ('224.0.0.251', 5353))
            if sys.argv[5] == '1':
                import select
                s.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP,
                             socket.inet_aton('224.0.0.251') + socket.inet_aton('127.0.0.1'))
                print('answering', flush=True)
                while True:
                    ready, _, _ = select.select([s, sys.stdin], [], [], 60)
                    if not ready or sys.stdin in ready:
                        break  # told to go (or a minute passed): no goodbye
                    query, source = s.recvfrom(9000)
                    # A query (QR clear) whose first question is our SRV: answered to its port.
                    if len(query) < 12 or query[2] & 0x80 or query[4:6] != b'\\0\\1':
                        continue
                    question_end = 12 + len(full) + 4
                    if query[12:12 + len(full)].lower() != full.lower() or query[question_end - 4:question_end - 2] != b'\\0\\x21':
                        continue
                    answer = query[:2] + struct.pack('>HHHHH', 0x8400, 1, 1, 0, 0) + query[12:question_end] + records[1]
                    s.sendto(answer, source)
            """
        return try Foreign(
            [
                "python3", "-c", script, name, type, String(port), goodbye ? "0" : "1", answering ? "1" : "0",
                addressless ? "ghost-addressless-\(UInt(bitPattern: name.hashValue) % 1_000_000)" : "ghost-host",
            ])
    }
}
