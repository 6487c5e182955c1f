import CAvahi
import Foundation

/// Watches one service's TXT record with an Avahi record browser and reports each new value.
final class TXTMonitorOperation: AvahiOperation, @unchecked Sendable {
    // @unchecked: every mutable property is used only on `context.queue`.

    let context: DiscoveryContext
    let service: DiscoveredService
    private let deliver: @Sendable (TXTRecord) -> Void
    private var browser: OpaquePointer?
    private var last: TXTRecord?
    private var stopped = false

    init(context: DiscoveryContext, service: DiscoveredService, deliver: @escaping @Sendable (TXTRecord) -> Void) {
        self.context = context
        self.service = service
        self.deliver = deliver
    }

    func start() {
        context.queue.async { if !self.stopped { self.context.attach(self) } }
    }

    func stop() {
        context.queue.async {
            self.stopped = true
            self.clientIsLost()
            self.context.detach(self)
        }
    }

    func clientIsRunning(_ client: OpaquePointer) {
        guard browser == nil, !stopped else { return }
        var fullName = [CChar](repeating: 0, count: Int(AVAHI_DOMAIN_NAME_MAX))
        guard avahi_service_name_join(&fullName, fullName.count, service.name, service.type, service.domain) >= 0 else { return }
        let me = Unmanaged.passUnretained(self).toOpaque()
        browser = avahi_record_browser_new(
            client, AvahiIfIndex(AVAHI_IF_UNSPEC), AvahiProtocol(AVAHI_PROTO_UNSPEC), fullName,
            UInt16(AVAHI_DNS_CLASS_IN), UInt16(AVAHI_DNS_TYPE_TXT), AvahiLookupFlags(rawValue: 0),
            { _, _, _, event, _, _, _, rdata, size, _, userdata in
                guard event == AVAHI_BROWSER_NEW, let rdata else { return }
                let op = Unmanaged<TXTMonitorOperation>.fromOpaque(userdata!).takeUnretainedValue()
                op.received(TXTRecord(parsingLeniently: Data(bytes: rdata, count: size)))
            }, me)
    }

    func clientIsLost() {
        if let browser { avahi_record_browser_free(browser) }
        browser = nil
    }

    private func received(_ txt: TXTRecord) {
        guard !stopped, txt != last else { return }
        last = txt
        deliver(txt)
    }
}
