// apple-sample: Apple-platform NetService code, unchanged but for `import Salut`.
//
// Publishes a service, browses for its type, resolves what it finds, prints it and exits, all
// driven by delegates on the main run loop, as it would be on macOS. Tests run it to prove that
// `RunLoop.main.run()` drives Salut's delegates outside XCTest too.
import Foundation
import Salut

final class Sample: NSObject, NetServiceDelegate, NetServiceBrowserDelegate {
    let type = CommandLine.arguments.count > 1 ? CommandLine.arguments[1] : "_applesample._tcp."
    var service: NetService?
    let browser = NetServiceBrowser()
    var found: [NetService] = []

    func start() {
        let service = NetService(domain: "local.", type: type, name: "Apple Sample", port: 4242)
        service.delegate = self
        service.setTXTRecord(NetService.data(fromTXTRecord: ["hello": "world".data(using: .utf8)!]))
        service.publish()
        self.service = service
    }

    func netServiceDidPublish(_ sender: NetService) {
        print("published \(sender.name)")
        browser.delegate = self
        browser.searchForServices(ofType: type, inDomain: "local.")
    }

    func netService(_ sender: NetService, didNotPublish errorDict: [String: NSNumber]) {
        print("didNotPublish \(errorDict)")
        exit(1)
    }

    func netServiceBrowser(_ browser: NetServiceBrowser, didFind service: NetService, moreComing: Bool) {
        guard service.name == "Apple Sample" else { return }
        found.append(service)
        service.delegate = self
        service.resolve(withTimeout: 5.0)
    }

    func netServiceDidResolveAddress(_ sender: NetService) {
        guard sender !== service, let data = sender.txtRecordData() else { return }
        let txt = NetService.dictionary(fromTXTRecord: data)
        let hello = txt["hello"].flatMap { String(data: $0, encoding: .utf8) } ?? "?"
        print(
            "resolved \(sender.name) at \(sender.hostName ?? "?"):\(sender.port) hello=\(hello) addresses=\(sender.addresses?.count ?? 0)"
        )
        exit(0)
    }

    func netService(_ sender: NetService, didNotResolve errorDict: [String: NSNumber]) {
        print("didNotResolve \(errorDict)")
        exit(1)
    }
}

let sample = Sample()
sample.start()
RunLoop.main.run()
