import Dispatch

/// Finds a service whose name differs only in ASCII case from the one asked for, and resolves
/// it too.
///
/// DNS-SD names compare without regard to ASCII case (RFC 6762 section 16), and Apple's
/// resolver finds "Kitchen" when asked for "kitchen"; Avahi's resolver answers only the
/// spelling that was published. So when the spelling asked for has not answered within a
/// moment, this watches the service's type (through its shared browser, ``InstancePaths``) and
/// resolves every instance whose name matches but for case, reporting through the same
/// `deliver` as the exact resolution. A resolution that answers at once (the usual case) never
/// starts watching.
final class OtherCaseResolution: @unchecked Sendable {
    // @unchecked: `watching`, `resolvers`, `resolving` and `stopped` are touched only on
    // `context.queue` (the delayed start, the watch's reports and `stop` all run there).

    private let context: DiscoveryContext
    private let service: DiscoveredService
    private let deliver: @Sendable (ResolvedService) -> Void
    /// The type's shared browser, while this watches it.
    private var watching: InstancePaths?
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
            self.watching?.unwatch(self.service.name, by: ObjectIdentifier(self))
            self.watching = nil
            self.resolvers.forEach { $0.stop() }
            self.resolvers = []
        }
    }

    /// On the queue.
    private func startBrowsing() {
        guard !stopped else { return }
        let paths = InstancePaths.of(type: service.type, domain: service.domain, in: context)
        watching = paths
        // (The handler holds this object until `stop` ends the watch.)
        paths.watch(service.name, by: ObjectIdentifier(self), ignoringCase: true) { name, seen, _ in
            if seen { self.found(name) }
        }
    }

    /// On the queue: resolves an instance named like the service but for case, once.
    private func found(_ name: String) {
        guard !stopped, name != service.name, !resolving.contains(name) else { return }
        resolving.insert(name)
        let spelled = DiscoveredService(name: name, type: service.type, domain: service.domain)
        let resolver = ResolveOperation(context: context, service: spelled, deliver: deliver)
        resolvers.append(resolver)
        resolver.start()
    }
}
