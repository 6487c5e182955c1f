import Foundation
import SalutStreams

/// Apple's `NetService` on Linux: publish, resolve and monitor a DNS-SD service through the
/// avahi-daemon, with Apple's names, signatures and delegate semantics.
///
/// ```swift
/// let service = NetService(domain: "", type: "_http._tcp.", name: "", port: 8080)
/// service.delegate = self
/// service.publish()
/// RunLoop.main.run()
/// ```
///
/// Differences from Apple's, all documented where they apply: `includesPeerToPeer` is accepted
/// and ignored (Linux has no AWDL). `.listenForConnections` listens on IPv4 and IPv6 on one port
/// and hands accepted connections to the delegate; `getInputStream(_:outputStream:)` resolves
/// and connects. Errors are reported through the delegate with `NetService.ErrorCode` values;
/// ``lastError`` keeps the typed Swift error.
///
/// Sendable, as Apple code expects (services travel between threads, queues and delegates): all
/// of the class's own state is behind a lock. A subclass inherits that promise unchecked, so a
/// subclass that adds mutable stored properties must guard them itself.
open class NetService: NSObject, @unchecked Sendable {
    // @unchecked: every mutable property lives in `state`, a lock-protected box; delegate calls
    // are made on the scheduled run loop by `scheduler`. (Subclasses: see the type's comment.)

    /// Apple's publish options.
    public struct Options: OptionSet, Sendable {
        public let rawValue: UInt
        public init(rawValue: UInt) { self.rawValue = rawValue }
        /// Fail with `collisionError` instead of renaming on a name conflict.
        public static let noAutoRename = Options(rawValue: 1 << 0)
        /// Listen on a TCP port and report connections to the delegate (see the streams layer).
        public static let listenForConnections = Options(rawValue: 1 << 1)
    }

    /// Apple's error codes, found under ``errorCode`` in delegate error dictionaries.
    public enum ErrorCode: Int, Sendable {
        case unknownError = -72000
        case collisionError = -72001
        case notFoundError = -72002
        case activityInProgress = -72003
        case badArgumentError = -72004
        case cancelledError = -72005
        case invalidError = -72006
        case timeoutError = -72007
        case missingRequiredConfigurationError = -72008
    }

    /// The key of the error code in delegate error dictionaries.
    public static let errorCode = "NSNetServicesErrorCode"
    /// The key of the error domain in delegate error dictionaries.
    public static let errorDomain = "NSNetServicesErrorDomain"
    /// The domain value reported under ``errorDomain`` (CFNetwork's net-services domain).
    static let netServicesDomain = 10

    /// The addresses and host name this service resolved to, when it has (with a port): a
    /// connection opened from it goes there without resolving again.
    private final func resolvedEndpoint() -> (addresses: [SocketAddress], hostName: String?)? {
        let snapshot = state.value
        guard let addresses = snapshot.addresses?.compactMap(SocketAddress.init), !addresses.isEmpty, snapshot.port > 0
        else { return nil }
        return (addresses, snapshot.hostName)
    }

    private struct State {
        var name: String
        var hostName: String?
        var port: Int
        var addresses: [Data]?
        var txtData: Data?
        var includesPeerToPeer = false
        weak var delegate: (any NetServiceDelegate)?
        var registration: RegisterOperation?
        var resolver: ResolveOperation?
        var monitor: TXTMonitorOperation?
        var resolveGeneration = 0
        /// Whether the resolution under way has found addresses (an earlier one's stay in
        /// `addresses`, and must not count for it).
        var resolveFound = false
        var publishedName: String?
        var lastError: DiscoveryError?
        var listener: StreamListener?
        var listenerTLS: TLSConfiguration?
        var listenerLimits = ConnectionLimits()
        var wideArea: WideAreaPublishing?
        /// A wide-area publication on its way to the zone's server, then the published one.
        var wideAreaPublishing: Task<Void, Never>?
        var wideAreaAdvertisement: ServiceAdvertisement?
        /// Counts wide-area publications: a task acts only while the pending one is its own
        /// (after publish, stop, publish, the first task must not take the second's place).
        var wideAreaGeneration = 0
        /// `getInputStream` was called: Apple documents that the service makes no more delegate
        /// calls after it.
        var delegateCallsEnded = false
    }

    private let givenType: String
    private let givenDomain: String
    /// The service type as given, for example `_http._tcp.`. Open, as Apple declares it: a
    /// subclass may override it, and publishing, resolving and connecting use the override.
    open var type: String { givenType }
    /// The domain as given, for example `local.` (empty means the default domain). Open, as
    /// Apple declares it.
    open var domain: String { givenDomain }
    let context: DiscoveryContext
    private let state: Locked<State>
    private let scheduler = DelegateScheduler()

    /// Makes a service to publish on `port`.
    /// - Parameters:
    ///   - domain: the domain; `""` for the default (`local.`).
    ///   - type: `_name._tcp.` or `_name._udp.`; `_sub._sub._name._tcp.` adds a subtype.
    ///   - name: the instance name; `""` for this host's name.
    ///   - port: the port the service listens on (0 with `.listenForConnections` picks one).
    public init(domain: String, type: String, name: String, port: Int32) {
        self.givenDomain = domain
        self.givenType = type
        self.context = .shared
        self.state = Locked(State(name: name, port: Int(port)))
        super.init()
    }

    /// Makes a service to resolve (its port is -1 until resolved).
    public convenience init(domain: String, type: String, name: String) {
        self.init(domain: domain, type: type, name: name, port: -1)
    }

    // MARK: Properties

    /// The instance name; after publishing, the final name (after any automatic rename).
    open var name: String { state.value.name }
    /// The host the service runs on, once resolved (for example `printer.local.`).
    open var hostName: String? { state.value.hostName }
    /// The port; -1 until known.
    open var port: Int { state.value.port }
    /// The resolved addresses as `sockaddr_in`/`sockaddr_in6` bytes; IPv6 link-local addresses
    /// carry their interface as scope id. Nil until resolved.
    open var addresses: [Data]? { state.value.addresses }
    /// Accepted for source compatibility; Linux has no peer-to-peer (AWDL) interfaces, so it
    /// changes nothing.
    open var includesPeerToPeer: Bool {
        get { state.value.includesPeerToPeer }
        set { state.withLock { $0.includesPeerToPeer = newValue } }
    }
    /// The delegate, held weakly as on Apple platforms.
    open var delegate: (any NetServiceDelegate)? {
        get { state.value.delegate }
        set { state.withLock { $0.delegate = newValue } }
    }
    /// TLS for the connections an auto-listening service accepts (Salut addition): a server
    /// configuration with the service's certificate and key. Set before
    /// `publish(options: .listenForConnections)`; nil (the default) accepts plain TCP.
    public var listenerTLS: TLSConfiguration? {
        get { state.value.listenerTLS }
        set { state.withLock { $0.listenerTLS = newValue } }
    }
    /// Bounds on the connections an auto-listening service accepts (Salut addition): how long
    /// a peer has for the TLS handshake and its first byte (10 s each by default), an optional
    /// idle bound, and how many connections may be setting up at once. Set before
    /// `publish(options: .listenForConnections)`. Every accepted connection reaches the
    /// delegate at once, and its bounds run from the accept: one cut by a bound reports the
    /// error on its streams (`SocketStreamError.limitExceeded(_:)`) when they are opened or
    /// read.
    public var listenerLimits: ConnectionLimits {
        get { state.value.listenerLimits }
        set { state.withLock { $0.listenerLimits = newValue } }
    }

    /// How to publish in a wide-area domain (Salut addition): the TSIG key that signs the DNS
    /// updates, and optionally the name server, host name and addresses. Set before
    /// `publish()` on a service whose ``domain`` is a unicast DNS zone (`home.arpa.`): the
    /// service is then registered in that zone by signed DNS updates, as
    /// `ServiceAdvertisement.publish(…, wideArea:)` does, since avahi-daemon cannot publish
    /// outside `.local`. ``stop()`` removes the records; `setTXTRecord(_:)` changes them.
    /// Ignored for `local.` (and an empty domain). A failure reaches
    /// `netService(_:didNotPublish:)` with the closest error code (`collisionError` for a
    /// taken name with `.noAutoRename`, `badArgumentError` for bad input,
    /// `missingRequiredConfigurationError` for a refused signature, an unknown key or a server
    /// that is not the zone's, `unknownError` for other refusals), and ``lastError`` says what
    /// the server answered.
    public var wideAreaPublishing: WideAreaPublishing? {
        get { state.value.wideArea }
        set { state.withLock { $0.wideArea = newValue } }
    }

    /// The typed Swift error behind the last `didNotPublish`/`didNotResolve` (Salut addition).
    public var lastError: DiscoveryError? { state.value.lastError }

    // MARK: Run loops

    /// Delivers delegate calls on `aRunLoop` in `mode` (the main run loop by default).
    open func schedule(in aRunLoop: RunLoop, forMode mode: RunLoop.Mode) {
        scheduler.schedule(in: aRunLoop, forMode: mode)
    }

    /// Stops delivering delegate calls on `aRunLoop` in `mode`.
    open func remove(from aRunLoop: RunLoop, forMode mode: RunLoop.Mode) {
        scheduler.remove(from: aRunLoop, forMode: mode)
    }

    // MARK: Publishing

    /// Publishes the service, renaming it automatically on a name conflict.
    open func publish() {
        publish(options: [])
    }

    /// Publishes the service. The delegate hears `netServiceWillPublish`, then
    /// `netServiceDidPublish` or `netService(_:didNotPublish:)` (`badArgumentError` for a
    /// malformed name, type, domain or port; `collisionError` with `.noAutoRename`;
    /// `activityInProgress` when already publishing).
    ///
    /// With `.listenForConnections`, the service first listens on its port (0 or -1: one the
    /// system picks, then found in ``port``) on IPv4 and IPv6 and publishes that port; each
    /// accepted connection reaches `netService(_:didAcceptConnectionWith:outputStream:)` as an
    /// unopened stream pair. A port that cannot be bound is reported as `unknownError` with
    /// ``lastError`` ``DiscoveryError/listenFailed(_:)``. ``stop()`` closes the listener.
    open func publish(options: Options = []) {
        let busy = state.withLock {
            $0.registration != nil || $0.wideAreaPublishing != nil || $0.wideAreaAdvertisement != nil
        }
        guard !busy else { return report(.activityInProgress, publishing: true) }
        if options.contains(.listenForConnections) {
            do {
                let settings = state.value
                let listener = try StreamListener(
                    port: max(0, settings.port), tls: settings.listenerTLS, limits: settings.listenerLimits)
                state.withLock {
                    $0.listener = listener; $0.port = Int(listener.port)
                }
                listener.accept { [weak self] connection in
                    guard let self else { return }
                    let streams = connection.streams
                    self.call {
                        $1.netService($0, didAcceptConnectionWith: streams.input, outputStream: streams.output)
                    }
                }
            } catch {
                return report(.listenFailed("\(error)"), publishing: true)
            }
        }
        let snapshot = state.value
        let request: RegisterOperation.Request
        do {
            try ServiceNames.checkName(snapshot.name, allowEmpty: true)
            let txt = try snapshot.txtData.map { try TXTRecord(parsing: $0) } ?? TXTRecord()
            try txt.validateForPublishing()
            let parsedType = try ServiceNames.parseType(type, domain: domain)
            ServiceNames.noteIfLong(parsedType)
            request = .init(
                name: snapshot.name, type: parsedType,
                domain: try ServiceNames.normaliseDomain(domain),
                port: try ServiceNames.checkPort(snapshot.port), txt: txt,
                allowRename: !options.contains(.noAutoRename))
        } catch {
            state.withLock { state -> StreamListener? in
                defer { state.listener = nil }
                return state.listener
            }?.stop()
            return report(error as? DiscoveryError ?? .invalidTXTRecord(reason: "\(error)"), publishing: true)
        }
        if let wideArea = snapshot.wideArea, !ServiceNames.isOnTheLink(request.domain) {
            return publishWideArea(request, wideArea: wideArea)
        }
        let operation = RegisterOperation(context: context, request: request) { [weak self] event in
            self?.registrationEvent(event)
        }
        state.withLock {
            $0.registration = operation; $0.publishedName = nil
        }
        call { $1.netServiceWillPublish($0) }
        operation.start()
    }

    private func registrationEvent(_ event: RegisterOperation.Event) {
        switch event {
        case .published(let final):
            let isNew = state.withLock { state -> Bool in
                guard state.registration != nil, state.publishedName != final else { return false }
                state.publishedName = final
                state.name = final
                return true
            }
            if isNew { call { $1.netServiceDidPublish($0) } }
        case .failed(let error):
            let listener = state.withLock { state -> StreamListener? in
                defer { state.registration = nil; state.listener = nil }
                return state.listener
            }
            listener?.stop()
            report(error, publishing: true)
        case .withdrawn:
            break
        }
    }

    /// Publishes `request` in its wide-area zone: `willPublish` now, then `didPublish` (with the
    /// final name) or `didNotPublish` once the zone's server answered.
    private func publishWideArea(_ request: RegisterOperation.Request, wideArea: WideAreaPublishing) {
        // willPublish goes first; the task starts under the lock, so that it finds itself
        // recorded as wanted however soon it ends.
        call { $1.netServiceWillPublish($0) }
        state.withLock { state in
            state.publishedName = nil
            state.wideAreaGeneration += 1
            state.wideAreaPublishing = publishingTask(request, wideArea: wideArea, generation: state.wideAreaGeneration)
        }
    }

    private func publishingTask(
        _ request: RegisterOperation.Request, wideArea: WideAreaPublishing,
        generation: Int
    ) -> Task<Void, Never> {
        Task { [weak self, request] in
            do {
                let advertisement = try await ServiceAdvertisement.publish(
                    name: request.name, type: request.type.browseType, domain: request.domain, port: Int(request.port),
                    txtRecord: request.txt, allowRename: request.allowRename, wideArea: wideArea)
                guard let self else { return await advertisement.withdraw() }
                // Kept only while this very publication is still wanted (no stop() meanwhile);
                // a TXT record set while it was on its way goes to the zone now.
                let (kept, latestTXT) = self.state.withLock { state -> (Bool, Data?) in
                    guard state.wideAreaPublishing != nil, state.wideAreaGeneration == generation else {
                        return (false, nil)
                    }
                    state.wideAreaPublishing = nil
                    state.wideAreaAdvertisement = advertisement
                    state.publishedName = advertisement.name
                    state.name = advertisement.name
                    return (true, state.txtData)
                }
                guard kept else { return await advertisement.withdraw() }
                let latest = (try? latestTXT.map { try TXTRecord(parsing: $0) } ?? TXTRecord()) ?? request.txt
                if latest != request.txt { try? advertisement.updateTXTRecord(latest) }
                self.call { $1.netServiceDidPublish($0) }
            } catch {
                guard let self else { return }
                // Reported only while still wanted: after stop(), the delegate heard didStop.
                let (wanted, listener) = self.state.withLock { state -> (Bool, StreamListener?) in
                    guard state.wideAreaPublishing != nil, state.wideAreaGeneration == generation else {
                        return (false, nil)
                    }
                    defer { state.wideAreaPublishing = nil; state.listener = nil }
                    return (true, state.listener)
                }
                guard wanted else { return }
                listener?.stop()
                self.report(error as? DiscoveryError ?? .dnsFailure("\(error)"), publishing: true)
            }
        }
    }

    // MARK: Resolving

    /// Resolves with a 5-second timeout. Deprecated, as Apple deprecated it: use
    /// ``resolve(withTimeout:)``.
    @available(*, deprecated, message: "Use resolve(withTimeout:) instead, as on Apple's systems.")
    open func resolve() {
        resolve(withTimeout: 5)
    }

    /// Resolves the service: fills `hostName`, `port`, `addresses` and the TXT record, and calls
    /// `netServiceDidResolveAddress` each time addresses arrive. If nothing resolves within
    /// `timeout` seconds the delegate hears `didNotResolve` with `timeoutError` (and the
    /// browsers of the link that list the service ask whether it is still there: see
    /// ``DiscoveryContext/reportFailedContact(with:)``); otherwise
    /// resolving stops at the timeout and the delegate hears `netServiceDidStop`. A NaN timeout
    /// takes the default (5 s), zero or a negative one ends the attempt at once, and at most a
    /// billion seconds are waited.
    open func resolve(withTimeout timeout: TimeInterval) {
        let snapshot = state.value
        guard snapshot.resolver == nil else { return report(.activityInProgress, publishing: false) }
        let target: DiscoveredService
        do {
            target = try DiscoveredService(name: snapshot.name, type: type, domain: domain).validatedForLookup()
        } catch {
            return report(error as? DiscoveryError ?? .notFound, publishing: false)
        }
        let operation = ResolveOperation(context: context, service: target) { [weak self] result in
            self?.resolved(result)
        }
        let generation = state.withLock { state -> Int in
            state.resolver = operation
            state.resolveGeneration += 1
            state.resolveFound = false
            return state.resolveGeneration
        }
        call { $1.netServiceWillResolve($0) }
        operation.start()
        let seconds = timeout.isNaN ? 5 : min(max(0, timeout), 1e9)
        context.queue.asyncAfter(deadline: .now() + seconds) { [weak self] in
            // A second or more of asking with no answer is a failed contact; less is the app's
            // own short limit, nothing to conclude from.
            self?.resolveTimedOut(generation, target: seconds >= 1 ? target : nil)
        }
    }

    private func resolved(_ result: ResolvedService) {
        let active = state.withLock { state -> Bool in
            guard state.resolver != nil else { return false }
            state.hostName = result.hostName.hasSuffix(".") ? result.hostName : result.hostName + "."
            state.port = Int(result.port)
            state.addresses = result.addresses.map(\.data)
            state.txtData = result.txtRecord.data
            if !result.addresses.isEmpty { state.resolveFound = true }
            return true
        }
        if active { call { $1.netServiceDidResolveAddress($0) } }
    }

    /// The resolution's time is up: it stops; when it found no address, the delegate hears
    /// `didNotResolve`, and (given a `target`) the context's browsers that list the service ask
    /// whether it is still there (see ``DiscoveryContext/reportFailedContact(with:)``).
    private func resolveTimedOut(_ generation: Int, target: DiscoveredService?) {
        let (operation, found) = state.withLock { state -> (ResolveOperation?, Bool) in
            guard state.resolveGeneration == generation, let operation = state.resolver else { return (nil, false) }
            state.resolver = nil
            return (operation, state.resolveFound)
        }
        guard let operation else { return }
        operation.stop()
        if found { return call { $1.netServiceDidStop($0) } }
        if let target { context.reportFailedContact(with: target) }
        report(.timedOut, publishing: false)
    }

    // MARK: Stopping

    /// Stops publishing (the service is withdrawn at once, and an auto-listening service's
    /// listener is closed) and resolving; the delegate hears `netServiceDidStop` when something
    /// was running.
    open func stop() {
        let (registration, resolver, listener, pending, advertisement) = state.withLock {
            state -> (RegisterOperation?, ResolveOperation?, StreamListener?, Task<Void, Never>?, ServiceAdvertisement?)
            in
            defer {
                state.registration = nil; state.resolver = nil; state.publishedName = nil; state.listener = nil
                state.wideAreaPublishing = nil; state.wideAreaAdvertisement = nil
            }
            return (
                state.registration, state.resolver, state.listener, state.wideAreaPublishing,
                state.wideAreaAdvertisement
            )
        }
        listener?.stop()
        registration?.stop()
        resolver?.stop()
        // A wide-area publication still on its way is withdrawn once the server answered it
        // (its task finds it no longer wanted); a published one is removed now.
        advertisement?.cancel()
        if registration != nil || resolver != nil || pending != nil || advertisement != nil {
            call { $1.netServiceDidStop($0) }
        }
    }

    // MARK: TXT records

    /// Starts watching the service's TXT record; each change reaches
    /// `netService(_:didUpdateTXTRecord:)`.
    open func startMonitoring() {
        guard state.value.monitor == nil,
            let target = try? DiscoveredService(name: name, type: type, domain: domain).validatedForLookup()
        else { return }
        let operation = TXTMonitorOperation(context: context, service: target) { [weak self] record in
            guard let self else { return }
            let data = record.data
            self.state.withLock { $0.txtData = data }
            self.call { $1.netService($0, didUpdateTXTRecord: data) }
        }
        state.withLock { $0.monitor = operation }
        operation.start()
    }

    /// Stops watching the TXT record.
    open func stopMonitoring() {
        let operation = state.withLock { state -> TXTMonitorOperation? in
            defer { state.monitor = nil }
            return state.monitor
        }
        operation?.stop()
    }

    /// Sets the TXT record (wire format, as made by ``data(fromTXTRecord:)``); while published,
    /// the live record is updated. Returns false, changing nothing, when the data is malformed
    /// or larger than ``TXTRecord/maximumPublishedSize``.
    @discardableResult
    open func setTXTRecord(_ recordData: Data?) -> Bool {
        guard let record = try? recordData.map({ try TXTRecord(parsing: $0) }) ?? TXTRecord(),
            (try? record.validateForPublishing()) != nil
        else { return false }
        let (registration, advertisement) = state.withLock { state -> (RegisterOperation?, ServiceAdvertisement?) in
            state.txtData = recordData
            return (state.registration, state.wideAreaAdvertisement)
        }
        registration?.updateTXT(record)
        try? advertisement?.updateTXTRecord(record)
        return true
    }

    /// The TXT record: as set, or as last resolved or monitored.
    open func txtRecordData() -> Data? {
        state.value.txtData
    }

    /// The TXT record as one string, its entries separated by `"\u{1}"` (Apple's form before
    /// TXT record data; deprecated there, as here). Nil when there is no record.
    @available(*, deprecated, message: "Use txtRecordData() instead, as on Apple's systems.")
    open func protocolSpecificInformation() -> String? {
        guard let data = txtRecordData() else { return nil }
        var entries: [String] = []
        var index = data.startIndex
        while index < data.endIndex {
            let length = Int(data[index])
            let start = data.index(after: index)
            guard let end = data.index(start, offsetBy: length, limitedBy: data.endIndex) else { break }  // cut short
            if length > 0 { entries.append(String(decoding: data[start..<end], as: UTF8.self)) }
            index = end
        }
        return entries.joined(separator: "\u{1}")
    }

    /// Sets the TXT record from one string, its entries separated by `"\u{1}"` (Apple's
    /// deprecated form; see ``setTXTRecord(_:)``, which this calls). An entry over 255 bytes
    /// leaves the record unchanged.
    @available(*, deprecated, message: "Use setTXTRecord(_:) instead, as on Apple's systems.")
    open func setProtocolSpecificInformation(_ specificInformation: String?) {
        guard let specificInformation else {
            setTXTRecord(nil)
            return
        }
        var data = Data()
        for entry in specificInformation.split(separator: "\u{1}", omittingEmptySubsequences: true) {
            let bytes = Array(entry.utf8)
            guard bytes.count <= 255 else { return }
            data.append(UInt8(bytes.count))
            data.append(contentsOf: bytes)
        }
        setTXTRecord(data)
    }

    /// Decodes TXT data into a dictionary (boolean attributes map to empty data). Malformed
    /// strings are skipped; the first of two equal keys wins.
    open class func dictionary(fromTXTRecord txtData: Data) -> [String: Data] {
        TXTRecord(parsingLeniently: txtData).dictionary
    }

    /// Encodes a dictionary as TXT data, keys in sorted order. Returns empty data when any key
    /// or value does not fit (empty key, `=` in a key, an attribute over 255 bytes); use
    /// `TXTRecord(data:)` to learn which.
    open class func data(fromTXTRecord txtDictionary: [String: Data]) -> Data {
        (try? TXTRecord(data: txtDictionary.mapValues { Optional($0) }).data) ?? Data()
    }

    // MARK: Streams

    /// Makes unopened streams to the service and returns true. As Apple documents, the service
    /// makes no more delegate calls once this has been called (even those already on their way
    /// to the run loop). Opening either one connects:
    /// to the addresses already resolved, or else after resolving the service through the
    /// avahi-daemon. Failures (not found, refused, TLS) arrive as the streams' `errorOccurred`
    /// with a `SocketStreamError`. TLS can be turned on with the streams' security properties
    /// before opening, as on Apple platforms. Returns false only for a name, type or domain that
    /// cannot be looked up.
    open func getInputStream(
        _ inputStream: UnsafeMutablePointer<InputStream?>?,
        outputStream: UnsafeMutablePointer<OutputStream?>?
    ) -> Bool {
        state.withLock { $0.delegateCallsEnded = true }
        guard let target = try? DiscoveredService(name: name, type: type, domain: domain).validatedForLookup() else {
            inputStream?.pointee = nil
            outputStream?.pointee = nil
            return false
        }
        let resolve = target.targetResolver(timeout: 5, context: context)
        let pair = SocketStreams.pair(toHost: target.description, port: 0) { [weak self] host, port in
            if let known = self?.resolvedEndpoint() { return known }
            return try await resolve(host, port)
        }
        inputStream?.pointee = pair.input
        outputStream?.pointee = pair.output
        return true
    }

    // MARK: Delegate plumbing

    /// Calls the delegate on the scheduled run loop (reading it there, as Apple does), unless
    /// `getInputStream` has been called since. The call waiting holds the service weakly (a
    /// service removed from its run loop and let go must not be kept by its own queued calls);
    /// `body` gets it back with the delegate.
    func call(_ body: @escaping @Sendable (NetService, any NetServiceDelegate) -> Void) {
        scheduler.deliver { [weak self] in
            guard let self else { return }
            let (delegate, ended) = state.withLock { ($0.delegate, $0.delegateCallsEnded) }
            if !ended, let delegate { body(self, delegate) }
        }
    }

    private func report(_ error: DiscoveryError, publishing: Bool) {
        state.withLock { $0.lastError = error }
        let info = error.errorDictionary
        if publishing {
            call { $1.netService($0, didNotPublish: info) }
        } else {
            call { $1.netService($0, didNotResolve: info) }
        }
    }
}

extension DiscoveryError {
    /// The closest `NetService.ErrorCode`.
    public var netServiceErrorCode: NetService.ErrorCode {
        switch code {
        case .collision: return .collisionError
        case .notFound: return .notFoundError
        case .activityInProgress: return .activityInProgress
        case .invalidServiceType, .invalidServiceName, .invalidDomain, .invalidHostName, .invalidPort,
            .invalidTXTRecord,
            .unknownInterface:
            return .badArgumentError
        case .cancelled: return .cancelledError
        case .timedOut: return .timeoutError
        case .daemonUnavailable, .invalidKey, .notAuthorized, .signatureRejected:
            return .missingRequiredConfigurationError
        default: return .unknownError
        }
    }

    /// The Apple-style error dictionary for delegate calls.
    var errorDictionary: [String: NSNumber] {
        [
            NetService.errorCode: NSNumber(value: netServiceErrorCode.rawValue),
            NetService.errorDomain: NSNumber(value: NetService.netServicesDomain),
        ]
    }
}
