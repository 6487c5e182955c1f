import CAvahi
import Dispatch
import SalutStreams

/// Where each named instance of one service type is seen (its interfaces and protocols), from
/// one Avahi service browser shared by every resolution of that type in a context.
///
/// A resolution must know the (interface, protocol) pairs its instance appears on to ask for
/// each of their addresses. With a browser of its own per resolution, resolving N services of
/// one type made avahi-daemon send N × N browse events (a link flooded with a thousand names
/// of one type kept the daemon and the gateway that mirrors the link busy); shared, it sends N.
///
/// Lives on the context's queue, as every operation does; attached while someone watches a
/// name, and gone (its browser freed) once nobody does.
final class InstancePaths: QueueOperation, @unchecked Sendable {
    // @unchecked: every mutable property is used only on `context.queue`.

    /// One interface and protocol an instance is seen on.
    struct Path: Hashable {
        var interface: AvahiIfIndex
        var proto: AvahiProtocol
    }

    /// What a watcher hears: the instance's name as published, and whether it was seen (true)
    /// or lost (false) on a path.
    typealias Handler = (_ name: String, _ seen: Bool, _ path: Path) -> Void

    /// How many unwatched names are remembered at most (a watcher that comes later hears of
    /// them at once). avahi-daemon says each name once per browser, so a name seen beyond this
    /// while nobody watched it stays unknown here: ``mayMissNames`` says so, and a watcher then
    /// looks for its instance another way.
    static let rememberedNames = 4_096

    private struct Watch {
        var name: String
        /// Whether other spellings of the name (in ASCII case) count too.
        var ignoringCase: Bool
        var handler: Handler

        /// Compared by bytes (as mDNS compares names), not as Swift compares text, which takes
        /// a look-alike written with other code points (a Kelvin sign for a `K`) for the name.
        func wants(_ seen: String) -> Bool {
            ignoringCase ? ServiceNames.sameIgnoringASCIICase(seen, name) : ExactText(seen) == ExactText(name)
        }
    }

    /// A name as published, compared and hashed by its bytes.
    private typealias Spelling = ExactText

    let type: String
    let domain: String
    private var browser: OpaquePointer?
    /// The paths of each name seen, by its published spelling.
    private var seen: [Spelling: Set<Path>] = [:]
    /// The watches, by their name in ASCII lower case, then by watcher.
    private var watches: [String: [ObjectIdentifier: Watch]] = [:]
    /// Set once a name went unremembered (past ``rememberedNames``).
    private var droppedNames = false

    /// True when a name may be on the link without this knowing it: names went unremembered,
    /// or avahi-daemon would not make the browser. Call on the context's queue.
    var mayMissNames: Bool { droppedNames || browser == nil }

    private init(context: DiscoveryContext, type: String, domain: String) {
        self.type = type
        self.domain = domain
        super.init(context: context)
    }

    /// The shared browser of `type` in `domain` for `context`, made (and attached) when there is
    /// none. Call on the context's queue.
    static func of(type: String, domain: String, in context: DiscoveryContext) -> InstancePaths {
        dispatchPrecondition(condition: .onQueue(context.queue))
        let key = Self.key(type, domain)
        if let shared = context.instancePaths[key] { return shared }
        let made = InstancePaths(context: context, type: type, domain: domain)
        context.instancePaths[key] = made
        context.attach(made)
        return made
    }

    private static func key(_ type: String, _ domain: String) -> String {
        ASCIICase.foldedText(type) + "\u{0}" + ASCIICase.foldedText(domain)
    }

    /// `watcher` hears of `name` (and, `ignoringCase`, of every spelling of it in ASCII case) on
    /// every path it is seen on now, at once, and as it is seen and lost from now on. Watching
    /// again replaces the watch.
    func watch(_ name: String, by watcher: ObjectIdentifier, ignoringCase: Bool = false, _ handler: @escaping Handler) {
        dispatchPrecondition(condition: .onQueue(context.queue))
        let key = ASCIICase.foldedText(name)
        let watch = Watch(name: name, ignoringCase: ignoringCase, handler: handler)
        watches[key, default: [:]][watcher] = watch
        for (spelling, paths) in seen where watch.wants(spelling.text) {
            for path in paths { handler(spelling.text, true, path) }
        }
    }

    /// `watcher` no longer hears of `name`; the browser goes once nobody watches anything.
    func unwatch(_ name: String, by watcher: ObjectIdentifier) {
        dispatchPrecondition(condition: .onQueue(context.queue))
        let key = ASCIICase.foldedText(name)
        watches[key]?[watcher] = nil
        if watches[key]?.isEmpty == true { watches[key] = nil }
        guard watches.isEmpty else { return }
        if context.instancePaths[Self.key(type, domain)] === self {
            context.instancePaths[Self.key(type, domain)] = nil
        }
        halt()
    }

    // MARK: QueueOperation

    override func clientIsRunning(_ client: OpaquePointer) {
        guard browser == nil, !stopped else { return }
        browser = avahi_service_browser_new(
            client, AvahiIfIndex(AVAHI_IF_UNSPEC), AvahiProtocol(AVAHI_PROTO_UNSPEC), type, domain,
            AvahiLookupFlags(rawValue: 0),
            { _, interface, proto, event, name, _, _, _, userdata in
                guard let name else { return }
                InstancePaths.from(userdata).changed(
                    String(cString: name), event, Path(interface: interface, proto: proto))
            }, userdata)
        if browser == nil {
            SalutLogging.logger.debug(
                "cannot browse \(type) to resolve its services: \(DiscoveryError.avahiMessage(avahi_client_errno(client)))"
            )
        }
    }

    override func releaseAvahiObjects() {
        if let browser { avahi_service_browser_free(browser) }
        browser = nil
        // The daemon will say again what it sees (to the browser made after a reconnection).
        seen = [:]
        droppedNames = false
    }

    // MARK: Private

    private func changed(_ name: String, _ event: AvahiBrowserEvent, _ path: Path) {
        guard !stopped else { return }
        let interested = (watches[ASCIICase.foldedText(name)] ?? [:]).values.filter { $0.wants(name) }
        switch event {
        case AVAHI_BROWSER_NEW:
            let spelling = Spelling(name)
            guard seen[spelling] != nil || !interested.isEmpty || seen.count < context.rememberedInstanceNames else {
                droppedNames = true
                return
            }
            guard seen[spelling, default: []].insert(path).inserted else { return }
            for watch in interested { watch.handler(name, true, path) }
        case AVAHI_BROWSER_REMOVE:
            let spelling = Spelling(name)
            guard seen[spelling]?.remove(path) != nil else { return }
            if seen[spelling]?.isEmpty == true { seen[spelling] = nil }
            for watch in interested { watch.handler(name, false, path) }
        default:
            break
        }
    }
}
