// lan-chat: a LAN chat over TLS: keys advertised in TXT (`fp`), pinned and trusted on first use.
import Foundation
import Salut

let usage = """
    usage: lan-chat NAME DIRECTORY [TYPE]
      NAME       the name the others see
      DIRECTORY  keeps this chat's key and the keys it trusts (made if missing); a peer whose key
                 changed is refused until its entry in DIRECTORY/known (JSON) is removed: do so once
                 its owner confirms the new key (shown when the peer starts)
      TYPE       the service type (default _lanchat._tcp)
    Then type lines to send them; Ctrl-D or Ctrl-C leaves.
    """

actor Chat {
    let peers: AdvertisedPeers, identity: TLSConfiguration  // identity: shown to the peers we join
    var leaving = false
    var joining: Set<DiscoveredService> = []  // joined or being joined
    var outgoing: [DiscoveredService: BoundStreamPair] = [:]  // we write, they read
    var incoming: [String: BoundStreamPair] = [:]  // they write, we read: one per trusted name

    init(peers: AdvertisedPeers, identity: TLSConfiguration) { (self.peers, self.identity) = (peers, identity) }

    /// Follows the browse (nil: looks again at `known`): drops peers that left, joins those due
    /// (new, or whose advertised or trusted key changed since they were last tried).
    func seen(_ update: BrowseUpdate?) {
        for case .removed(let service) in update?.changes ?? [] { drop(service, outgoing[service], "it left") }
        for service in peers.servicesToConnect(after: update, skipping: joining) { Task { await join(service) } }
    }

    /// Joins a peer: connected once it says hello (TLS 1.3 tells a refused client only later).
    func join(_ service: DiscoveredService) async {
        joining.insert(service)
        defer { joining.remove(service) }
        let known = peers.trustedKeys.key(for: service.name) != nil
        do {
            let pair = try await peers.connect(to: service, tls: identity)
            if !known { say("\(service.name)'s key \(pair.peerTrust!.publicKeySHA256) is trusted from now on") }
            Task {  // a bound on the wait for its hello
                try await Task.sleep(for: .seconds(15)); if outgoing[service]?.input !== pair.input { pair.close() }
            }
            defer { pair.close() }
            var lines = pair.input.lines(maximumLength: 64).makeAsyncIterator()
            guard (try? await lines.next()) != nil else {
                return say(
                    "\(service.name) did not admit this chat (if our key changed, they must remove our old entry)")
            }
            outgoing[service] = pair
            say("connected to \(service.name)")
            do { while try await lines.next() != nil {} } catch { return drop(service, pair, "\(error)") }
            drop(service, pair, "it closed the connection")
        } catch {
            say("not connecting to \(service.name): \(error)")
        }
    }

    func drop(_ service: DiscoveredService, _ pair: BoundStreamPair?, _ why: String) {
        guard let pair, outgoing[service]?.input === pair.input else { return }
        outgoing[service] = nil
        say("disconnected from \(service.name) (\(why))")
        pair.close()
    }

    /// Admits a client under its key's name (trusted on first use), shows its lines until it goes.
    func serve(_ pair: BoundStreamPair) async {
        guard (try? await pair.open()) != nil, let key = pair.peerTrust?.publicKeySHA256 else { return pair.close() }
        var admitted: String?
        do { admitted = try await peers.owner(ofClientKey: key, trustingOnFirstUse: true) } catch {
            say("refused a client with key \(key): \(error)")
        }
        guard let peer = admitted else { return pair.close() }
        incoming.updateValue(pair, forKey: peer)?.close()
        if !joining.contains(where: { $0.name == peer }) { peers.tryAgain(named: peer) }  // it may take our key now
        try? await pair.output.write(Data("hello\n".utf8))  // you are admitted
        do {
            for try await line in pair.input.lines(maximumLength: 4096) { say("[\(peer)] \(line)") }
        } catch { if !leaving { say("closed the connection from \(peer): \(error)") } }
        if incoming[peer]?.input === pair.input { incoming[peer] = nil }
        pair.close()
    }

    /// Sends to each peer in turn; one that takes over 5 s to take a line is dropped.
    func send(_ line: String) async {
        if outgoing.isEmpty { say("(nobody to send to yet: that line went nowhere)") }
        for (peer, pair) in outgoing {
            do { try await pair.output.write(Data((line + "\n").utf8), timeout: .seconds(5)) } catch {
                drop(peer, pair, "it stopped reading: \(error)")
            }
        }
    }

    func leave() {
        leaving = true
        for (peer, pair) in outgoing { drop(peer, pair, "this chat is leaving") }
        incoming.values.forEach { $0.close() }
    }
}

/// One line on stdout, with anything from the network escaped.
func say(_ text: String) { FileHandle.standardOutput.write(Data((TerminalText.escaped(text) + "\n").utf8)) }

let arguments = CommandLine.arguments
if arguments.count == 2 && ["-h", "--help"].contains(arguments[1]) { print(usage); exit(0) }
guard (3...4).contains(arguments.count), !arguments[1].hasPrefix("-") else {
    let problem =
        arguments.count > 1 && arguments[1].hasPrefix("-")
        ? "unknown option \(TerminalText.escaped(arguments[1]))"
        : arguments.count < 3 ? "give a NAME and a DIRECTORY" : "too many arguments"
    FileHandle.standardError.write(Data(("lan-chat: " + problem + "\n" + usage + "\n").utf8))
    exit(2)
}
let (name, directory, type) = (arguments[1], arguments[2], arguments.count > 3 ? arguments[3] : "_lanchat._tcp")
do {
    try ServiceNames.checkName(name, allowEmpty: false)  // a bad NAME or TYPE fails before a file is made
    let browser = try ServiceBrowser(type: type).includingTXTRecords()
    let identity = try TLSIdentity.loadOrCreate(directory: directory, commonName: name)
    let peers = AdvertisedPeers(
        txtKey: "fp", trustedKeys: try TrustedKeys(path: directory + "/known"), ownKey: identity.publicKeySHA256)
    let chat = Chat(peers: peers, identity: identity.clientConfiguration)
    let ad = try await ServiceAdvertisement.listen(
        name: name, type: type, txtRecord: try TXTRecord(["fp": identity.publicKeySHA256]),
        tls: identity.serverConfiguration(requiringClientKeys: true),  // each client's key judged by `peers`
        trustEvaluator: peers.clientEvaluator { say($0.description) },  // refuses unknown keys in the handshake
        allowRename: false)
    say("listening as \(ad.name) (key \(identity.publicKeySHA256))")
    Task { for await connection in ad.connections { Task { await chat.serve(connection.streams) } } }
    Task { for try await update in browser { await chat.seen(update) } }
    Task { while true { try await Task.sleep(for: .seconds(2)); await chat.seen(nil) } }  // hears `known` edited
    let (lines, sink) = AsyncStream<String>.makeStream()
    Thread.detachNewThread {
        while let line = readLine() { sink.yield(line) }
        sink.finish()
    }
    let stops = [SIGINT, SIGTERM].map { number in  // Ctrl-C or a stop: leave as at the input's end
        signal(number, SIG_IGN)
        let source = DispatchSource.makeSignalSource(signal: number)
        source.setEventHandler { sink.finish() }
        source.resume()
        return source
    }
    for await line in lines { await chat.send(line) }
    stops.forEach { $0.cancel() }
    await chat.leave()
    await ad.withdraw()  // (and stops listening)
} catch {
    FileHandle.standardError.write(Data("lan-chat: \(error)\n".utf8))
    let code = (error as? DiscoveryError)?.code  // a bad NAME or TYPE is a usage error
    exit(code == .invalidServiceType || code == .invalidServiceName ? 2 : 1)
}
