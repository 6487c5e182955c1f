import CAvahi
import Foundation

/// Watches one service's TXT record with an Avahi record browser and reports each new value.
final class TXTMonitorOperation: QueueOperation, @unchecked Sendable {
    // @unchecked: every mutable property is used only on `context.queue`.

    let service: DiscoveredService
    private let deliver: @Sendable (TXTRecord) -> Void
    private var browser: OpaquePointer?
    private var last: TXTRecord?

    init(context: DiscoveryContext, service: DiscoveredService, deliver: @escaping @Sendable (TXTRecord) -> Void) {
        self.service = service
        self.deliver = deliver
        super.init(context: context)
    }

    override func clientIsRunning(_ client: OpaquePointer) {
        guard browser == nil, !stopped else { return }
        var fullName = [CChar](repeating: 0, count: Int(AVAHI_DOMAIN_NAME_MAX))
        guard avahi_service_name_join(&fullName, fullName.count, service.name, service.type, service.domain) >= 0,
            // Avahi cuts a joined name that does not fit and still reports success: a name
            // that fills the buffer may be cut, and watching it would watch another name.
            strlen(fullName) < fullName.count - 1
        else { return }
        let me = userdata
        browser = avahi_record_browser_new(
            client, AvahiIfIndex(AVAHI_IF_UNSPEC), AvahiProtocol(AVAHI_PROTO_UNSPEC), fullName,
            UInt16(AVAHI_DNS_CLASS_IN), UInt16(AVAHI_DNS_TYPE_TXT), AvahiLookupFlags(rawValue: 0),
            { _, _, _, event, _, _, _, rdata, size, _, userdata in
                guard event == AVAHI_BROWSER_NEW, let rdata else { return }
                let op = TXTMonitorOperation.from(userdata)
                op.received(TXTRecord(parsingLeniently: Data(bytes: rdata, count: size)))
            }, me)
    }

    override func releaseAvahiObjects() {
        if let browser { avahi_record_browser_free(browser) }
        browser = nil
    }

    private func received(_ txt: TXTRecord) {
        guard !stopped, txt != last else { return }
        last = txt
        deliver(txt)
    }
}
