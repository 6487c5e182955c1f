// lan-chat: a LAN chat on Salut's async API. Usage: lan-chat NAME DIRECTORY [TYPE]
// (TYPE default _lanchat._tcp; lines come from stdin). Publishes NAME with TLS and the SHA-256 of its key in its TXT record (`fp`), browses for the
// others with their TXT records, connects to each pinned to the key it advertises (trusted on
// first use, kept in DIRECTORY/known), sends each line typed to all of them and prints what
// arrives. A client is accepted only if its key is advertised under a name not trusted with
// another key: an impostor under a known name is refused both ways.
import Foundation
import Salut

actor Chat {
    let name: String
    let knownFile: String
    let identity: TLSConfiguration  // this end's certificate, shown to the peers it joins
    var known: [String: String]  // peer name -> key trusted on first use (kept in knownFile)
    var advertised: [String: String] = [:]  // peer name -> key its TXT record advertises now
    var tried: [String: String?] = [:]  // peer name -> the key it advertised when last joined
    var outgoing: [String: BoundStreamPair] = [:]  // we write, they read
    var incoming: [BoundStreamPair] = []  // they write, we read

    init(name: String, knownFile: String, identity: TLSConfiguration) {
        (self.name, self.knownFile, self.identity) = (name, knownFile, identity)
        let text = (try? String(contentsOfFile: knownFile, encoding: .utf8)) ?? ""
        let pairs = text.split(separator: "\n").map { $0.split(separator: " ", maxSplits: 1).map(String.init) }
        known = Dictionary(pairs.filter { $0.count == 2 }.map { ($0[1], $0[0]) }, uniquingKeysWith: { $1 })
    }

    /// The peer a client's key belongs to: one advertising it under a name not trusted with
    /// another key. Waits up to 5 s for the browse to see it (a client may come first).
    func admit(_ key: String) async -> String? {
        for _ in 0..<50 {
            if let peer = advertised.first(where: { $0.value == key && (known[$0.key] ?? key) == key }) {
                return peer.key
            }
            try? await Task.sleep(for: .milliseconds(100))
        }
        return nil
    }

    /// Joins each listed peer it is not connected to, when new or when its key changed (a name
    /// taken over by another device may change only its TXT record).
    func seen(_ update: BrowseUpdate) async {
        for case .removed(let service) in update.changes { drop(service.name, because: "gone") }
        advertised = [:]
        for (service, record) in update.txtRecords { advertised[service.name] = record.string(for: "fp") }
        let added = Set(update.changes.compactMap { if case .added(let service) = $0 { service } else { nil } })
        for service in update.services where service.name != name && outgoing[service.name] == nil {
            guard added.contains(service) || tried[service.name] != .some(advertised[service.name]) else { continue }
            tried[service.name] = advertised[service.name]
            await join(service)
        }
    }

    func join(_ service: DiscoveredService) async {
        do {
            let pair = try await service.connect(
                pinningAdvertisedKey: "fp", trustedKey: known[service.name], tls: identity)
            if known[service.name] == nil, let key = pair.peerTrust?.publicKeySHA256 {
                known[service.name] = key  // trust on first use
                let lines = known.map { "\($0.value) \($0.key)" }.sorted().joined(separator: "\n")
                try? lines.write(toFile: knownFile, atomically: true, encoding: .utf8)
            }
            outgoing[service.name] = pair
            say("joined: \(service.name)")
            Task {  // it never writes to us: this ends when it goes, or refuses our key
                var why = "closed"
                do { for try await _ in pair.input.chunks {} } catch { why = "\(error)" }
                drop(service.name, because: why)
            }
        } catch {
            say("refused \(service.name): \(error)")
        }
    }

    func drop(_ peer: String, because why: String) {
        guard let pair = outgoing.removeValue(forKey: peer) else { return }
        pair.input.close(); pair.output.close()
        say("left: \(peer) (\(why))")
    }

    func accepted(_ pair: BoundStreamPair) { incoming.append(pair) }
    func send(_ line: String) async {
        for (peer, pair) in outgoing {
            do { try await pair.output.write(Data((line + "\n").utf8)) } catch { drop(peer, because: "\(error)") }
        }
    }

    func leave() {
        for peer in outgoing.keys { drop(peer, because: "leaving") }
        for pair in incoming { pair.input.close(); pair.output.close() }
    }
}

/// One line on stdout, with anything from the network escaped.
func say(_ text: String) { FileHandle.standardOutput.write(Data((TerminalText.escaped(text) + "\n").utf8)) }

let arguments = CommandLine.arguments
guard arguments.count >= 3 else {
    FileHandle.standardError.write(Data("usage: lan-chat NAME DIRECTORY [TYPE]\n".utf8))
    exit(2)
}
let (name, directory) = (arguments[1], arguments[2])
let type = arguments.count > 3 ? arguments[3] : "_lanchat._tcp"
do {
    let identity = try TLSIdentity.loadOrCreate(directory: directory, commonName: name)
    let (certificate, key) = (identity.certificateFile, identity.privateKeyFile)
    let chat = Chat(
        name: name, knownFile: directory + "/known",
        identity: TLSConfiguration(certificateChainFile: certificate, privateKeyFile: key))
    var tls = TLSConfiguration.server(certificateChainFile: certificate, privateKeyFile: key)
    tls.requiresClientCertificate = true
    tls.validatesCertificateChain = false  // self-signed: each client's key is judged below
    // A peer may stay quiet for long: no first-byte bound once its key has passed.
    let listener = try StreamListener(tls: tls, limits: ConnectionLimits(firstByteTimeout: nil)) { trust, decide in
        Task {
            let peer = await chat.admit(trust.publicKeySHA256)
            if peer == nil { say("refused a client with key \(trust.publicKeySHA256)") }
            decide(peer != nil)
        }
    }
    let ad = try await ServiceAdvertisement.publish(
        name: name, type: type, port: Int(listener.port), txtRecord: try TXTRecord(["fp": identity.publicKeySHA256]),
        allowRename: false)
    say("listening as \(ad.name) (key \(identity.publicKeySHA256))")
    Task {  // incoming: labelled with the name its key was admitted under
        for await connection in listener.connections {
            Task {
                guard (try? await connection.streams.open()) != nil else { return }
                await chat.accepted(connection.streams)
                let from = await chat.admit(connection.streams.peerTrust?.publicKeySHA256 ?? "") ?? "?"
                do {
                    for try await line in connection.input.lines(maximumLength: 4096) { say("[\(from)] \(line)") }
                } catch {}
            }
        }
    }
    Task { for try await update in try ServiceBrowser(type: type).includingTXTRecords() { await chat.seen(update) } }
    let (lines, sink) = AsyncStream<String>.makeStream()
    Thread.detachNewThread {
        while let line = readLine() { sink.yield(line) }; sink.finish()
    }
    for await line in lines { await chat.send(line) }
    await chat.leave()
    await ad.withdraw()
    listener.stop()
} catch {
    FileHandle.standardError.write(Data("lan-chat: \(error)\n".utf8))
    exit(1)
}
