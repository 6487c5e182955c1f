import Foundation

extension ServiceBrowser {
    /// This browser's updates with the TXT record of each service they list
    /// (``BrowseUpdate/txtRecords``), as Network.framework's browse with TXT records gives them:
    /// no resolving of every service by hand to read its record.
    ///
    /// ```swift
    /// for try await update in try ServiceBrowser(type: "_chat._tcp").includingTXTRecords() {
    ///     for case .added(let service) in update.changes {
    ///         print(service.name, update.txtRecords[service]?.string(for: "fp") ?? "no key")
    ///     }
    /// }
    /// ```
    ///
    /// The cost: the TXT record of each listed service is followed through the avahi-daemon (one
    /// record browser a service: one mDNS query when it is added, then only the changes its
    /// publisher announces), or, for a browser of a wide-area domain made with `wideArea:`,
    /// asked of its name server at the record's TTL. An update that adds services waits for their records, up to
    /// `wait`; a service whose record has not come by then is listed without one, and its record
    /// follows in a later update with no changes (as does every later change of a record).
    /// - Parameters:
    ///   - wait: how long an update that adds services waits for their records (at most 60 s;
    ///     zero hands every update over at once).
    ///   - maximumWatched: how many services' records are followed at a time (at least 0); the
    ///     others are listed without a record. Bounds the work a crowded or hostile link can cause.
    public func includingTXTRecords(
        waitingUpTo wait: Duration = .seconds(1), maximumWatched: Int = 256
    ) -> IncludingTXTRecords {
        IncludingTXTRecords(
            browser: self, wait: Swift.min(Swift.max(wait, .zero), .seconds(60)), maximumWatched: maximumWatched)
    }

    /// A ``ServiceBrowser``'s updates with the TXT records of the services they list; made by
    /// ``ServiceBrowser/includingTXTRecords(waitingUpTo:maximumWatched:)``. Each iteration starts
    /// its own browser; leaving the loop stops it and every record it follows.
    public struct IncludingTXTRecords: AsyncSequence, Sendable {
        public typealias Element = BrowseUpdate

        let browser: ServiceBrowser
        let wait: Duration
        let maximumWatched: Int

        /// What the shell hears: from the browser, a record watch, or a deadline.
        private enum Event: Sendable {
            case browsed(BrowseUpdate)
            case ended((any Error)?)
            case record(TXTRecord, DiscoveredService, watch: Int)
            case deadline(Int)
        }

        /// The updates; the sequence throws what the browser throws.
        public func makeAsyncIterator() -> Iterator {
            let (browser, wait, maximumWatched) = (self.browser, self.wait, self.maximumWatched)
            let outbox = Outbox()
            let task = Task { await Self.drive(browser, wait: wait, maximumWatched: maximumWatched, into: outbox) }
            return Iterator(outbox: outbox, driver: Driver(task))
        }

        /// The shell: one task owns the machine and performs its actions; the browser, each
        /// record watch and each deadline are tasks that only send it events.
        private static func drive(
            _ browser: ServiceBrowser, wait: Duration, maximumWatched: Int,
            into outbox: Outbox
        ) async {
            let (events, sink) = AsyncStream<Event>.makeStream()
            var machine = StateMachine(maximumWatched: maximumWatched)
            var watches: [DiscoveredService: Task<Void, Never>] = [:]
            // One hold at a time, so one deadline: a new one replaces the last.
            var deadline: Task<Void, Never>?
            let browsing = Task {
                do {
                    for try await update in browser { sink.yield(.browsed(update)) }
                    sink.yield(.ended(nil))
                } catch {
                    sink.yield(.ended(error))
                }
            }
            defer {
                browsing.cancel()
                for watch in watches.values { watch.cancel() }
                deadline?.cancel()
                sink.finish()
            }
            for await event in events {
                let actions: [StateMachine.Action]
                switch event {
                case .browsed(let update): actions = machine.browsed(update)
                case .record(let record, let service, let number):
                    actions = machine.received(record, for: service, watch: number)
                case .deadline(let number): actions = machine.deadlinePassed(number)
                case .ended(let error):
                    // An update held for records goes before the end.
                    for case .deliver(let update) in machine.browsingEnded() { outbox.put(update) }
                    outbox.finish(throwing: error)
                    return
                }
                for action in actions {
                    switch action {
                    case .deliver(let update): outbox.put(update)
                    case .watch(let service, let number):
                        watches[service]?.cancel()
                        watches[service] = Task { await Self.follow(service, number, of: browser, into: sink) }
                    case .stopWatching(let service):
                        watches.removeValue(forKey: service)?.cancel()
                    case .startDeadline(let number):
                        deadline?.cancel()
                        deadline = Task {
                            try? await Task.sleep(for: wait)
                            sink.yield(.deadline(number))
                        }
                    }
                }
            }
            outbox.finish()  // cancelled: the consumer left
        }

        /// Sends the service's TXT record, and every change of it, until cancelled.
        private static func follow(
            _ service: DiscoveredService, _ number: Int, of browser: ServiceBrowser,
            into sink: AsyncStream<Event>.Continuation
        ) async {
            if let unicast = browser.unicast {
                guard let records = try? service.txtRecordUpdates(wideArea: unicast) else { return }
                do {
                    for try await record in records { sink.yield(.record(record, service, watch: number)) }
                } catch {}  // a first look that failed: listed without a record
                return
            }
            guard let records = try? service.txtRecordUpdates(context: browser.context) else { return }
            for await record in records { sink.yield(.record(record, service, watch: number)) }
        }
    }
}
