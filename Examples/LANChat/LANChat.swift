// lan-chat: a LAN chat on Salut's async API: TLS, each key's SHA-256 in TXT (`fp`), connections
// pinned to advertised keys (trusted on first use), each client's key judged as it connects.
import Foundation
import Salut

let usage = """
    usage: lan-chat NAME DIRECTORY [TYPE]
      NAME       the name the others see
      DIRECTORY  keeps this chat's key and the keys it trusts (DIRECTORY/known: a peer whose key
                 changed is refused until its entry is removed; it is then tried again within
                 2 s, and its new key trusted); made if missing
      TYPE       the service type (default _lanchat._tcp)
    Then type lines to send them; Ctrl-D or Ctrl-C leaves.
    """

actor Chat {
    let name: String, ownKey: String, book: TrustedKeys  // peer name -> key trusted on first use
    let identity: TLSConfiguration  // this end's certificate, shown to the peers it joins
    var advertised: [String: String] = [:]  // peer name -> key its TXT record advertises now
    var tried: [String: String] = [:]  // peer name -> its advertised and trusted keys when last joined
    var last: Set<DiscoveredService> = []  // what the browse lists now
    var leaving = false
    var joining: Set<String> = []
    var outgoing: [String: BoundStreamPair] = [:]  // we write, they read
    var incoming: [String: BoundStreamPair] = [:]  // they write, we read: one per peer

    init(name: String, ownKey: String, book: TrustedKeys, identity: TLSConfiguration) {
        (self.name, self.ownKey, self.book, self.identity) = (name, ownKey, book, identity)
    }

    /// The peer a client's key belongs to: the name trusted with it (whatever is advertised now),
    /// or else the one name that advertises it and has no key trusted yet, trusted from now on
    /// once the client proved it holds the key (`proven`). Waits up to 5 s for the browse.
    func admit(_ key: String, proven: Bool = false) async -> String? {
        for _ in 0..<50 {
            if let peer = book.names(trusting: key).first { return peer }
            let claims = advertised.filter { $0.value == key && book.key(for: $0.key) == nil }.map(\.key)
            if claims.count == 1 {
                guard proven else { return claims[0] }
                do {
                    if try book.trustOnFirstUse(key, for: claims[0]) { return claims[0] }
                } catch {
                    say("refused \(claims[0])'s connection: \(error)")
                    return nil
                }
            }
            try? await Task.sleep(for: .milliseconds(100))
        }
        say("refused a client: no name we trust advertises its key \(key)")
        return nil
    }

    /// Follows the browse; names not in Unicode's composed form are left out (they could pass for
    /// a peer's name, and the names here are compared as Swift compares text).
    func seen(_ update: BrowseUpdate) {
        let composed = { (service: DiscoveredService) in
            service.name.precomposedStringWithCanonicalMapping.utf8.elementsEqual(service.name.utf8)
        }
        for case .removed(let service) in update.changes where composed(service) {
            tried[service.name] = nil
            drop(service.name, outgoing[service.name], "it left")
        }
        advertised = update.txtRecords.filter { composed($0.key) }.reduce(into: [:]) {
            $0[$1.key.name] = $1.value.advertisedPublicKeySHA256(forTXTKey: "fp")
        }
        last = update.services.filter(composed)
        joinListed()
    }

    /// Joins each listed peer not connected to, when new, or when its advertised key or the key
    /// trusted for it (`known` edited) changed since it was last tried.
    func joinListed() {
        for service in last where service.name != name && outgoing[service.name] == nil {
            let attempt = attempt(for: service.name)
            guard joining.count < 8, !joining.contains(service.name), tried[service.name] != attempt else { continue }
            (tried[service.name], _) = (attempt, joining.insert(service.name))
            Task { await join(service) }
        }
    }

    /// What a try to join `peer` depends on: the key it advertises and the key trusted for it.
    func attempt(for peer: String) -> String { "\(advertised[peer] ?? "none") \(book.key(for: peer) ?? "none")" }

    /// Who else holds `key`: this chat, or a peer trusted under another name than `name`.
    func holder(of key: String?, besides name: String) -> String? {
        key == ownKey ? "this chat" : book.names(trusting: key ?? "").first { $0 != name }
    }

    func join(_ service: DiscoveredService) async {
        defer {  // as things stand after this try: only a later change tries again
            joining.remove(service.name)
            if tried[service.name] != nil { tried[service.name] = attempt(for: service.name) }  // (unless it left)
        }
        // A name pointing at another peer (or here) with its key is not a peer of its own.
        if let holder = holder(of: advertised[service.name], besides: service.name) {
            return say("not connecting to \(service.name): that is \(holder)'s key")
        }
        do {
            let trusted = book.key(for: service.name)
            let pair = try await service.connect(pinningAdvertisedKey: "fp", trustedKey: trusted, tls: identity)
            let key = pair.peerTrust?.publicKeySHA256 ?? ""
            if let holder = holder(of: key, besides: service.name) {  // its record changed meanwhile
                pair.close()
                return say("not connecting to \(service.name): that is \(holder)'s key")
            }
            do {
                guard try book.trustOnFirstUse(key, for: service.name) else { throw Refusal.changedMeanwhile }
            } catch {
                pair.close()
                throw error
            }
            outgoing[service.name] = pair
            say("connected to \(service.name)" + (trusted == nil ? " (its key \(key) trusted from now on)" : ""))
            Task {  // it never writes to us: this ends when it goes, or refuses our key
                var why = "it closed the connection"
                do { for try await _ in pair.input.chunks {} } catch {
                    let cut = (error as? SocketStreamError)?.tlsError?.code == .closedWithoutCloseNotify
                    why = cut ? "it cut the connection: it may not trust this chat's key" : "\(error)"
                }
                drop(service.name, pair, why)
            }
        } catch let error as SocketStreamError where error.tlsError?.code == .advertisedKeyChanged {
            say(
                "not connecting to \(service.name): \(error); once its owner confirms the new key, remove \"\(service.name)\" from \(book.path)"
            )
        } catch {
            say("not connecting to \(service.name): \(error)")
        }
    }

    func drop(_ peer: String, _ pair: BoundStreamPair?, _ why: String) {
        guard let pair, outgoing[peer]?.input === pair.input else { return }
        outgoing[peer] = nil
        say("disconnected from \(peer) (\(why))")
        pair.close()
    }

    func accepted(_ pair: BoundStreamPair, from peer: String) { incoming.updateValue(pair, forKey: peer)?.close() }
    func ended(_ pair: BoundStreamPair, from peer: String) {
        if incoming[peer]?.input === pair.input { incoming[peer] = nil }
        pair.close()
    }

    /// Sends to each peer in turn; one that takes over 5 s to take a line is dropped.
    func send(_ line: String) async {
        if outgoing.isEmpty { say("(nobody to send to yet: that line went nowhere)") }
        for (peer, pair) in outgoing {
            let writing = Task { try await pair.output.write(Data((line + "\n").utf8)) }
            let watchdog = Task {
                try await Task.sleep(for: .seconds(5)); writing.cancel()
            }
            do { try await writing.value } catch { drop(peer, pair, "it stopped reading: \(error)") }
            watchdog.cancel()
        }
    }

    /// Tries again the peers the last browse listed whose trusted key was changed in `known`.
    func recheck() { joinListed() }

    enum Refusal: Error { case changedMeanwhile }

    func leave() {
        leaving = true
        for (peer, pair) in outgoing { drop(peer, pair, "this chat is leaving") }
        for (peer, pair) in incoming { ended(pair, from: peer) }
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
    let browser = try ServiceBrowser(type: type).includingTXTRecords()  // a bad type fails before a file is made
    let identity = try TLSIdentity.loadOrCreate(directory: directory, commonName: name)
    let (certificate, key) = (identity.certificateFile, identity.privateKeyFile)
    let chat = Chat(
        name: name, ownKey: identity.publicKeySHA256, book: try TrustedKeys(path: directory + "/known"),
        identity: TLSConfiguration(certificateChainFile: certificate, privateKeyFile: key))
    var tls = TLSConfiguration.server(certificateChainFile: certificate, privateKeyFile: key)
    tls.requiresClientCertificate = true
    tls.validatesCertificateChain = false  // self-signed: each client's key is judged by `admit`
    let listener = try StreamListener(tls: tls) { trust, decide in
        Task { decide(await chat.admit(trust.publicKeySHA256) != nil) }
    }
    let ad = try await ServiceAdvertisement.publish(
        name: name, type: type, port: Int(listener.port), txtRecord: try TXTRecord(["fp": identity.publicKeySHA256]),
        allowRename: false)
    say("listening as \(ad.name) (key \(identity.publicKeySHA256))")
    Task {  // incoming: labelled with the name its key was admitted under
        for await connection in listener.connections {
            Task {
                guard (try? await connection.streams.open()) != nil else { return }
                let key = connection.streams.peerTrust?.publicKeySHA256 ?? ""
                guard let from = await chat.admit(key, proven: true) else { return connection.streams.close() }
                await chat.accepted(connection.streams, from: from)
                // It may stay quiet for long: saying hello is the first byte the listener awaits.
                try? await connection.output.write(Data("hello\n".utf8))
                do {
                    for try await line in connection.input.lines(maximumLength: 4096) { say("[\(from)] \(line)") }
                } catch { if await !chat.leaving { say("closed the connection from \(from): \(error)") } }
                await chat.ended(connection.streams, from: from)
            }
        }
    }
    Task { for try await update in browser { await chat.seen(update) } }
    Task {  // an entry removed from `known` is heard without a new advertisement
        while true {
            try await Task.sleep(for: .seconds(2))
            await chat.recheck()
        }
    }
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
    await ad.withdraw()
    listener.stop()
} catch {
    FileHandle.standardError.write(Data("lan-chat: \(error)\n".utf8))
    exit((error as? DiscoveryError)?.code == .invalidServiceType ? 2 : 1)  // a bad TYPE is a usage error
}
