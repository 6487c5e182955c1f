// salut-demo: publishes a service with a TXT record, browses for its type, resolves what it
// finds and prints it. Run by Scripts/demo against the sandbox's avahi-daemon.
import Foundation
import Salut

@main
struct DiscoveryDemo {
    static func main() async {
        do {
            try await run()
        } catch {
            FileHandle.standardError.write(Data("salut-demo: \(error)\n".utf8))
            exit(1)
        }
    }

    static func run() async throws {
        let info = try await DiscoveryContext.shared.daemonInfo()
        print("daemon: \(info.version) on host \(info.hostNameFQDN)")

        let type = "_salut-demo._tcp"
        let txt = try TXTRecord(["greeting": "salut", "version": "1"])
        let ad = try await ServiceAdvertisement.publish(name: "Salut Demo", type: type, port: 7777, txtRecord: txt)
        print("published: \"\(ad.name)\" \(type) port 7777 txt {\(txt)}")

        var found: DiscoveredService?
        for try await update in try ServiceBrowser(type: type) {
            for case .added(let service) in update.changes {
                print("found:     \"\(service.name)\" \(service.type) in \(service.domain)")
                if service.name == ad.name { found = service }
            }
            if found != nil { break }
        }
        guard let found else { return }
        let resolved = try await found.resolve(timeout: 5)
        print("resolved:  \(resolved.hostName):\(resolved.port)")
        print("           addresses \(resolved.addresses.map(\.description).joined(separator: ", "))")
        print("           txt {\(resolved.txtRecord)}")
        await ad.withdraw()
    }
}
