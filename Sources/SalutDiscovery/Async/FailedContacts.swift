import SalutStreams

/// The failed contacts with services reported to one ``DiscoveryContext``, handed to the
/// browsers of that context that listen (see ``ServiceBrowser/FailedContactStateMachine``).
///
/// Concurrency: the listeners are kept in one `Locked` state; a report calls them outside the
/// lock, on the reporting thread (each listener only takes its own lock and starts a task).
final class FailedContacts: Sendable {
    private struct State {
        var listeners: [UInt64: @Sendable (DiscoveredService) -> Void] = [:]
        var nextID: UInt64 = 0
    }

    private let state = Locked(State())

    /// Calls `listener` with each service reported from now on, until ``stopListening(_:)``
    /// with the number returned.
    func listen(_ listener: @escaping @Sendable (DiscoveredService) -> Void) -> UInt64 {
        state.withLock { state in
            state.nextID += 1
            state.listeners[state.nextID] = listener
            return state.nextID
        }
    }

    /// Stops calling the listener `id`.
    func stopListening(_ id: UInt64) {
        _ = state.withLock { $0.listeners.removeValue(forKey: id) }
    }

    /// Tells every listener that a contact with `service` failed.
    func report(_ service: DiscoveredService) {
        for listener in state.withLock({ Array($0.listeners.values) }) { listener(service) }
    }
}

extension DiscoveryContext {
    /// Says that `service`, found by a browser of this context, could not be reached: a
    /// connection to it found no route or timed out, or its resolution timed out, by whatever
    /// means the app used (a refused connection is no such failure: the host answered it).
    /// Salut's own ``DiscoveredService/resolve(timeout:settle:context:)`` and
    /// ``DiscoveredService/connect(tls:bufferSize:resolveTimeout:context:)`` report their
    /// failures themselves.
    ///
    /// Each ``ServiceBrowser`` of this context that lists the service then asks its responder
    /// directly (a ``LivenessCheck``, about 3 seconds when nothing answers) and, when nothing
    /// answers, lists it as removed, though avahi-daemon may list it for up to 75 minutes more
    /// (RFC 6762 §10.5). A service whose responder answers stays listed, and so do all when
    /// direct answers never come in on their interface (see ``ServiceBrowser``). Cheap to
    /// call: a service already being checked, or not listed, costs nothing.
    public func reportFailedContact(with service: DiscoveredService) {
        failedContacts.report(service)
    }
}
