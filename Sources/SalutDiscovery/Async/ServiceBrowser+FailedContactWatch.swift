import Foundation
import SalutStreams

extension ServiceBrowser {
    /// The shell of one browse's ``FailedContactStateMachine``: hands the daemon's updates
    /// through it, listens for its context's failed contacts, asks the responders it names
    /// (``LivenessCheck``), asks again every ``recheckInterval`` while it says services are
    /// removed, and stops all that when the browse ends.
    ///
    /// Concurrency: the machine is in one `Locked` box, never held while an update is handed
    /// over. Every step that hands over updates runs on the context's serial queue (the daemon's
    /// updates arrive there; a check's answer is sent there), so updates reach the consumer in
    /// the order the machine decided them. Checks run in tasks of their own.
    final class FailedContactWatch: Sendable {
        /// How often services said removed here are asked again, while the daemon lists them.
        static let recheckInterval: Duration = .seconds(30)

        private let machine = Locked(FailedContactStateMachine())
        private let deliver: @Sendable (BrowseUpdate) -> Void
        private let context: DiscoveryContext
        private let listener = Locked<UInt64?>(nil)
        private let rechecking = Locked<Task<Void, Never>?>(nil)

        /// Hands updates to `deliver` (on the context's queue, one at a time); with `listening`,
        /// also checks the failed contacts reported to `context` (a browse of the link; a
        /// wide-area service cannot be asked).
        init(context: DiscoveryContext, listening: Bool, deliver: @escaping @Sendable (BrowseUpdate) -> Void) {
            self.context = context
            self.deliver = deliver
            guard listening else { return }
            let id = context.failedContacts.listen { [weak self] service in self?.failedContact(with: service) }
            listener.withLock { $0 = id }
        }

        /// The daemon's update (on the context's queue).
        func browsed(_ update: BrowseUpdate) {
            if let said = machine.withLock({ $0.browsed(update) }) { deliver(said) }
        }

        /// The browse ended: nothing more is asked or handed over.
        func finish() {
            machine.withLock { $0.finish() }
            if let id = listener.exchange(nil) { context.failedContacts.stopListening(id) }
            rechecking.exchange(nil)?.cancel()
        }

        private func failedContact(with service: DiscoveredService) {
            guard let action = machine.withLock({ $0.failedContact(with: service) }) else { return }
            perform(action)
        }

        private func perform(_ action: FailedContactStateMachine.Action) {
            switch action {
            case .check(let check):
                Task { [weak self] in
                    let answering = try? await LivenessCheck().isAnswering(check.service, on: check.sightings)
                    self?.checked(check, answering: answering)
                }
            }
        }

        /// A check's answer, handed over on the context's queue (where the daemon's updates are),
        /// so that its updates keep their place among them.
        private func checked(_ check: FailedContactStateMachine.Check, answering: Bool?) {
            context.queue.async { [self] in
                let (step, silenced) = machine.withLock { machine in
                    (machine.checked(check, answering: answering), machine.hasSilenced)
                }
                for update in step.updates { deliver(update) }
                step.actions.forEach(perform)
                if silenced { startRechecking() }
            }
        }

        /// Asks the services said removed again every ``recheckInterval``, from the first one on
        /// until the browse ends.
        private func startRechecking() {
            rechecking.withLock { task in
                guard task == nil else { return }
                task = Task { [weak self] in
                    while !Task.isCancelled {
                        try? await Task.sleep(for: Self.recheckInterval)
                        guard let self, !Task.isCancelled else { return }
                        for action in self.machine.withLock({ $0.recheckDue() }) { self.perform(action) }
                    }
                }
            }
        }
    }
}
