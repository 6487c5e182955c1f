import Foundation
import Salut

/// `browse --verify`: a service is shown only while its responder answers a direct mDNS query
/// (`LivenessCheck`), asked when the daemon lists it and again every period. One that stops
/// answering (twice in a row: a second check at once confirms the first) is listed as removed,
/// saying so, though avahi-daemon's cache may list it for an hour more; one that answers again
/// comes back (its line says so). A service the daemon lists that never answered is not shown
/// (said once on stderr at --log-level info).
///
/// Concurrency: an actor; each watched service has one task that checks and sleeps, cancelled
/// when the daemon drops the service. A result carries the generation of the entry it was
/// asked for, so a late answer about an earlier listing of the same name is ignored. Lines are
/// printed by one task, in the order they were decided, so a service's removal never overtakes
/// its addition (whose resolution may take a while).
actor LivenessWatch {
    private struct Watched {
        var generation: UInt64
        var task: Task<Void, Never>
        var sightings: [ServiceSighting]
        var shown = false
        var wasShown = false
        var checked = false
        var saidSilent = false
        var saidFailure = false
    }

    /// Per interface: whether any service there ever answered, and how many were silent on
    /// their first check (a firewall that drops the answers makes every one silent).
    private struct InterfaceRecord {
        var answered = false
        var silentAtFirst = 0
        var warned = false
    }

    private struct Line: Sendable {
        var event: String
        var service: DiscoveredService
        var sightings: [ServiceSighting]
        var reason: Reason?
    }

    /// Why a line is not the daemon's own news: a stable word for scripts (JSON "reason") and
    /// its sentence for people.
    enum Reason: String, Sendable {
        case notAnswering = "not-answering"
        case answeringAgain = "answering-again"

        var sentence: String {
            switch self {
            case .notAnswering: "stopped answering; avahi-daemon may still list it"
            case .answeringAgain: "answering again"
            }
        }
    }

    private let check: LivenessCheck
    private let period: Duration
    private var watched: [DiscoveredService: Watched] = [:]
    private var interfaces: [String: InterfaceRecord] = [:]
    private var generations: UInt64 = 0
    private var settling: [CheckedContinuation<Void, Never>] = []
    /// Checks in flight, at most ``checksAtOnce``; the others wait in line (a socket a check
    /// and interface, and a burst of multicast, for every listed service at once otherwise).
    private var checking = 0
    private var waitingToCheck: [CheckedContinuation<Void, Never>] = []
    static let checksAtOnce = 128
    private let lines: AsyncStream<Line>.Continuation
    private let printing: Task<Void, Never>

    init(printer: BrowsePrinter, period: Duration) {
        // Four tries 0.75 s apart: about 3 s. On a link losing 10 % each way a live service
        // misses all four about once in 700 checks; the second check at once makes a false
        // removal about one in 500,000.
        check = LivenessCheck(attempts: 4, interval: .milliseconds(750))
        self.period = period
        let (stream, continuation) = AsyncStream.makeStream(of: Line.self)
        lines = continuation
        printing = Task {
            for await line in stream {
                await printer.report(line.event, line.service, sightings: line.sightings, reason: line.reason)
            }
        }
    }

    /// The daemon lists `service`: it is checked now and every period until ``lost(_:sightings:)``.
    func found(_ service: DiscoveredService, sightings: [ServiceSighting]) {
        guard watched[service] == nil else { return }
        generations += 1
        let generation = generations
        let task = Task { [check, period] in
            while !Task.isCancelled {
                await self.takeCheckSlot()
                if Task.isCancelled {  // dropped while it waited: the slot goes to the next
                    self.releaseCheckSlot()
                    return
                }
                var outcome = await Self.ask(check, service, self.sightings(of: service))
                if case .silent = outcome, self.isShown(service, generation), !Task.isCancelled {
                    // Confirmed before it is said (where it is seen now).
                    outcome = await Self.ask(check, service, self.sightings(of: service))
                }
                self.releaseCheckSlot()
                guard !Task.isCancelled else { return }
                self.checked(service, generation: generation, outcome: outcome)
                try? await Task.sleep(for: period)
            }
        }
        watched[service] = Watched(generation: generation, task: task, sightings: sightings)
    }

    /// Where listed services are seen now: their next checks ask there.
    func seen(_ sightings: [DiscoveredService: [ServiceSighting]]) {
        for (service, places) in sightings where watched[service] != nil && !places.isEmpty {
            watched[service]?.sightings = places
        }
    }

    /// The daemon no longer lists `service` (its goodbye came, or its records expired).
    func lost(_ service: DiscoveredService, sightings: [ServiceSighting]) {
        guard let gone = watched.removeValue(forKey: service) else { return }
        gone.task.cancel()
        if gone.shown { lines.yield(Line(event: "remove", service: service, sightings: sightings)) }
        settleIfDone()
    }

    /// Returns once every service listed so far has had its first check and its line is
    /// printed; then the watch is over (for --terminate, or when the browse ends).
    func finish() async {
        if watched.values.contains(where: { !$0.checked }) {
            await withCheckedContinuation { settling.append($0) }
        }
        watched.values.forEach { $0.task.cancel() }
        watched = [:]
        lines.finish()
        await printing.value
    }

    private enum Outcome {
        case answered
        case silent
        case failed(String)
    }

    private static func ask(
        _ check: LivenessCheck, _ service: DiscoveredService, _ sightings: [ServiceSighting]
    )
        async -> Outcome
    {
        do { return try await check.isAnswering(service, on: sightings) ? .answered : .silent } catch {
            return .failed((error as? DiscoveryError)?.description ?? "\(error)")
        }
    }

    private func takeCheckSlot() async {
        if checking < Self.checksAtOnce {
            checking += 1
            return
        }
        await withCheckedContinuation { waitingToCheck.append($0) }  // the slot is handed over
    }

    private func releaseCheckSlot() {
        if waitingToCheck.isEmpty {
            checking -= 1
        } else {
            waitingToCheck.removeFirst().resume()
        }
    }

    private func sightings(of service: DiscoveredService) -> [ServiceSighting] {
        watched[service]?.sightings ?? []
    }

    private func isShown(_ service: DiscoveredService, _ generation: UInt64) -> Bool {
        watched[service].map { $0.generation == generation && $0.shown } ?? false
    }

    private func checked(_ service: DiscoveredService, generation: UInt64, outcome: Outcome) {
        guard var entry = watched[service], entry.generation == generation else { return }  // lost meanwhile
        let first = !entry.checked
        entry.checked = true
        switch outcome {
        case .answered:
            record(entry.sightings, answered: true, first: first)
            if !entry.shown {
                entry.shown = true
                lines.yield(
                    Line(
                        event: "add", service: service, sightings: entry.sightings,
                        reason: entry.wasShown ? .answeringAgain : nil))
                entry.wasShown = true
            }
        case .silent:
            record(entry.sightings, answered: false, first: first)
            if entry.shown {
                entry.shown = false
                lines.yield(
                    Line(event: "remove", service: service, sightings: entry.sightings, reason: .notAnswering))
            } else if !entry.saidSilent {
                entry.saidSilent = true
                SalutLogging.logger.info(
                    "\(Terminal.escaped(service.name)) (\(Terminal.escaped(service.type))) is listed by avahi-daemon but does not answer a direct query: not shown"
                )
            }
        case .failed(let reason):
            // Our own failure to ask (an interface gone, no descriptor left) says nothing about
            // the service: what is shown stays shown and what is not stays hidden until a check
            // can be made; the failure is said once.
            if !entry.saidFailure {
                entry.saidFailure = true
                SalutLogging.logger.warning(
                    "cannot check \(Terminal.escaped(service.name)): \(Terminal.escaped(reason)); it stays \(entry.shown ? "shown" : "hidden") until a check can be made"
                )
            }
        }
        watched[service] = entry
        settleIfDone()
    }

    /// Warns once per interface where the first checks of three services were all silent and
    /// nothing ever answered: three ghosts, or a firewall that drops the answers.
    private func record(_ sightings: [ServiceSighting], answered: Bool, first: Bool) {
        for name in Set(sightings.map(\.interface)) {
            var entry = interfaces[name, default: InterfaceRecord()]
            if answered { entry.answered = true } else if first { entry.silentAtFirst += 1 }
            if !entry.answered && !entry.warned && entry.silentAtFirst >= 3 {
                entry.warned = true
                SalutLogging.logger.warning(
                    "none of the \(entry.silentAtFirst) services on \(Terminal.escaped(name)) answered a direct query: they may be gone, or a firewall here drops the answers (they come by unicast from UDP port 5353, and firewalld's and ufw's mDNS rules admit only multicast); allow UDP from source port 5353, or browse without --verify"
                )
            }
            interfaces[name] = entry
        }
    }

    private func settleIfDone() {
        guard !settling.isEmpty, !watched.values.contains(where: { !$0.checked }) else { return }
        let waiting = settling
        settling = []
        waiting.forEach { $0.resume() }
    }
}
