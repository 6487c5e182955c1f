import Foundation
import Salut

/// `browse --verify`: a service is shown only while its responder answers a direct mDNS query
/// (`LivenessCheck`), asked when the daemon lists it and again every period. One that stops
/// answering is listed as removed, saying so, though avahi-daemon's cache may list it for an
/// hour more; one that answers again comes back. A service the daemon lists that never
/// answered is not shown (said once on stderr at --log-level info).
///
/// Concurrency: an actor; each watched service has one task that checks and sleeps. Lines are
/// printed by one task, in the order they were decided, so a service's removal never
/// overtakes its addition (whose resolution may take a while).
actor LivenessWatch {
    private struct Watched {
        var task: Task<Void, Never>
        var sightings: [ServiceSighting]
        var shown = false
        var checked = false
        var saidSilent = false
    }

    private struct Line: Sendable {
        var event: String
        var service: DiscoveredService
        var sightings: [ServiceSighting]
        var reason: String?
    }

    private let check: LivenessCheck
    private let period: Duration
    private let verbose: Bool
    private var watched: [DiscoveredService: Watched] = [:]
    private var settling: [CheckedContinuation<Void, Never>] = []
    private let lines: AsyncStream<Line>.Continuation
    private let printing: Task<Void, Never>

    init(printer: BrowsePrinter, period: Duration, verbose: Bool) {
        check = LivenessCheck(attempts: 3, interval: .seconds(1))
        self.period = period
        self.verbose = verbose
        let (stream, continuation) = AsyncStream.makeStream(of: Line.self)
        lines = continuation
        printing = Task {
            for await line in stream {
                await printer.report(line.event, line.service, sightings: line.sightings, reason: line.reason)
            }
        }
    }

    /// The daemon lists `service`: it is checked now and every period until ``lost(_:)``.
    func found(_ service: DiscoveredService, sightings: [ServiceSighting]) {
        if watched[service] != nil {
            watched[service]?.sightings = sightings
            return
        }
        let task = Task { [check, period] in
            while !Task.isCancelled {
                let sightings = self.sightings(of: service)
                let answered: Bool?
                do { answered = try await check.isAnswering(service, on: sightings) } catch {
                    // Our own failure to ask (an interface gone) says nothing about the service.
                    note("cannot check \(Terminal.escaped(service.name)): \(error)")
                    answered = nil
                }
                self.checked(service, answered: answered)
                try? await Task.sleep(for: period)
            }
        }
        watched[service] = Watched(task: task, sightings: sightings)
    }

    /// The daemon no longer lists `service` (its goodbye came, or its records expired).
    func lost(_ service: DiscoveredService, sightings: [ServiceSighting]) {
        guard let gone = watched.removeValue(forKey: service) else { return }
        gone.task.cancel()
        if gone.shown { lines.yield(Line(event: "remove", service: service, sightings: sightings)) }
        settleIfDone()
    }

    /// Returns once every service listed so far has had its first check and its line is
    /// printed; then the watch is over (for --terminate).
    func finish() async {
        if watched.values.contains(where: { !$0.checked }) {
            await withCheckedContinuation { settling.append($0) }
        }
        watched.values.forEach { $0.task.cancel() }
        watched = [:]
        lines.finish()
        await printing.value
    }

    private func sightings(of service: DiscoveredService) -> [ServiceSighting] {
        watched[service]?.sightings ?? []
    }

    private func checked(_ service: DiscoveredService, answered: Bool?) {
        guard var entry = watched[service] else { return }  // lost meanwhile
        entry.checked = true
        switch answered {
        case true? where !entry.shown:
            entry.shown = true
            lines.yield(Line(event: "add", service: service, sightings: entry.sightings))
        case false? where entry.shown:
            entry.shown = false
            lines.yield(
                Line(
                    event: "remove", service: service, sightings: entry.sightings,
                    reason: "stopped answering; avahi-daemon may still list it"))
        case false? where !entry.saidSilent && verbose:
            entry.saidSilent = true
            note(
                "\(Terminal.escaped(service.name)) (\(Terminal.escaped(service.type))) is listed by avahi-daemon but does not answer: not shown"
            )
        case nil where !entry.shown:
            // Could not ask: shown rather than hidden for our own failure.
            entry.shown = true
            lines.yield(Line(event: "add", service: service, sightings: entry.sightings))
        default: break
        }
        watched[service] = entry
        settleIfDone()
    }

    private func settleIfDone() {
        guard !settling.isEmpty, !watched.values.contains(where: { !$0.checked }) else { return }
        let waiting = settling
        settling = []
        waiting.forEach { $0.resume() }
    }
}
