import Dispatch

/// Finds a service whose name differs only in ASCII case from the one asked for, and resolves
/// it too.
///
/// DNS-SD names compare without regard to ASCII case (RFC 6762 section 16), and Apple's
/// resolver finds "Kitchen" when asked for "kitchen"; Avahi's resolver answers only the
/// spelling that was published. So when the spelling asked for has not answered within a
/// moment, this browses the service's type and resolves every instance whose name matches
/// but for case, reporting through the same `deliver` as the exact resolution. A resolution
/// that answers at once (the usual case) never starts the browse.
final class OtherCaseResolution: @unchecked Sendable {
    // @unchecked: `browse`, `resolvers`, `resolving` and `stopped` are touched only on
    // `context.queue` (the delayed start, the browse's deliveries and `stop` all run there).

    private let context: DiscoveryContext
    private let service: DiscoveredService
    private let deliver: @Sendable (ResolvedService) -> Void
    private var browse: BrowseOperation?
    private var resolvers: [ResolveOperation] = []
    private var resolving = Set<String>()
    private var stopped = false

    /// How long the exact spelling has to answer before other spellings are looked for: a
    /// service that is there answers in milliseconds.
    static let delay: DispatchTimeInterval = .milliseconds(500)

    /// `service` must be validated (a base type, a normalised domain).
    init(context: DiscoveryContext, service: DiscoveredService, deliver: @escaping @Sendable (ResolvedService) -> Void)
    {
        self.context = context
        self.service = service
        self.deliver = deliver
    }

    /// Starts looking after ``delay``, unless stopped before.
    func start() {
        context.queue.asyncAfter(deadline: .now() + Self.delay) { self.startBrowsing() }
    }

    /// Stops the browse and every resolution it started; safe to call more than once.
    func stop() {
        context.queue.async {
            self.stopped = true
            self.browse?.stop()
            self.browse = nil
            self.resolvers.forEach { $0.stop() }
            self.resolvers = []
        }
    }

    /// On the queue.
    private func startBrowsing() {
        guard !stopped else { return }
        let operation = BrowseOperation(context: context, target: .services(type: service.type, domain: service.domain))
        { [weak self] event in
            guard case .update(let update) = event else { return }
            // Deliveries come on the queue.
            self?.found(update.services)
        }
        browse = operation
        operation.start()
    }

    /// On the queue: resolves each newly seen instance named like the service but for case.
    private func found(_ services: Set<DiscoveredService>) {
        guard !stopped else { return }
        for other in services
        where other.name != service.name && !resolving.contains(other.name)
            && ServiceNames.sameIgnoringASCIICase(other.name, service.name)
        {
            resolving.insert(other.name)
            let spelled = DiscoveredService(name: other.name, type: service.type, domain: service.domain)
            let resolver = ResolveOperation(context: context, service: spelled, deliver: deliver)
            resolvers.append(resolver)
            resolver.start()
        }
    }
}
