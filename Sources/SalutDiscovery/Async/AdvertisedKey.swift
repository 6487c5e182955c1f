import Foundation
import SalutStreams

// "Pin the key this service advertises": a service publishes the SHA-256 of its TLS public key
// in its TXT record (peerxfer's `fp`, the LAN-chat example's `fp`), and a client connects with
// TLS pinned to that key, trusting it on first use and refusing a later change.

extension TXTRecord {
    /// The SHA-256 of a TLS public key advertised under `txtKey`, as 64 lower-case hex digits
    /// (the form of `TLSPeerTrust.publicKeySHA256` and `TLSIdentity.publicKeySHA256`); nil
    /// when the record has no such entry or its value is not 64 hex digits (the value is from
    /// the network: nothing else is taken). For the records of a browse
    /// (``BrowseUpdate/txtRecords``).
    public func advertisedPublicKeySHA256(forTXTKey txtKey: String) -> String? {
        guard let value = string(for: txtKey), let digest = SHA256Digest(hex: value) else { return nil }
        return digest.hex
    }
}

extension ResolvedService {
    /// The SHA-256 of a TLS public key the service advertises under `txtKey` in its TXT record
    /// (``TXTRecord/advertisedPublicKeySHA256(forTXTKey:)``).
    public func advertisedPublicKeySHA256(forTXTKey txtKey: String) -> String? {
        txtRecord.advertisedPublicKeySHA256(forTXTKey: txtKey)
    }
}

extension DiscoveredService {
    /// Resolves the service, reads the SHA-256 of the TLS public key it advertises under
    /// `txtKey` in its TXT record, and connects with TLS pinned to that key: the connection
    /// stands only if the service holds the private key of what it advertises (no certificate
    /// chain or name is checked; the pin replaces them).
    ///
    /// Alone, this proves only that you reached whoever advertises under this name now. Trust on
    /// first use makes it a policy: keep the key of the first connection
    /// (`pair.peerTrust?.publicKeySHA256`) and pass it as `trustedKey` from then on; a service
    /// that advertises another key is then refused before anything is connected. A
    /// `TrustedKeys` book does that bookkeeping (see
    /// ``connect(pinningAdvertisedKey:trustedKeys:tls:bufferSize:resolveTimeout:context:)``);
    /// a table of your own must compare names by their bytes, not as Swift compares text (a
    /// look-alike written with other code points, a Kelvin sign for a `K`, is another name).
    ///
    /// ```swift
    /// let pair = try await service.connect(pinningAdvertisedKey: "fp", trustedKey: book.key(for: service.name))
    /// guard let key = pair.peerTrust?.publicKeySHA256, try book.trustOnFirstUse(key, for: service.name) else {
    ///     pair.close()   // another key was trusted for the name meanwhile
    ///     return
    /// }
    /// ```
    /// - Parameters:
    ///   - txtKey: the TXT entry holding the key's SHA-256 (64 hex digits).
    ///   - trustedKey: the key trusted for this service before (hex, either case, colons
    ///     allowed), or nil on first use.
    ///   - tls: the rest of the TLS configuration (this end's certificate for mutual TLS, the
    ///     versions); it is used as a client's, and its pins are replaced by the advertised key.
    ///   - bufferSize: bytes buffered in each direction.
    ///   - resolveTimeout: how long resolving may take (as for ``resolve(timeout:settle:context:)``).
    ///   - context: the connection to the avahi-daemon to resolve through.
    /// - Returns: the open streams.
    /// - Throws: a `SocketStreamError`: `nameNotFound` when the service does not resolve; a TLS
    ///   error (`SocketStreamError.tlsError`) of code `advertisedKeyMissing` when it advertises
    ///   no key, `advertisedKeyChanged` when it advertises another key than `trustedKey` (its
    ///   `advertisedPublicKeyFingerprint` says which), `invalidConfiguration` when `trustedKey`
    ///   is not a SHA-256 fingerprint, `pinMismatch` when the server presents another key than
    ///   it advertises (or what it advertises is its certificate's hash, not its key's);
    ///   connection failures as for any host (an unreachable or timed-out connection is also
    ///   reported as a failed contact: see ``DiscoveryContext/reportFailedContact(with:)``);
    ///   `CancellationError` when the task is cancelled.
    public func connect(
        pinningAdvertisedKey txtKey: String, trustedKey: String? = nil, tls: TLSConfiguration = .client,
        bufferSize: Int = 256 * 1024, resolveTimeout: TimeInterval = 5, context: DiscoveryContext = .shared
    ) async throws -> BoundStreamPair {
        var trusted: String?
        if let trustedKey {
            let digits = trustedKey.filter { $0 != ":" && $0 != " " }
            guard let digest = SHA256Digest(hex: digits) else {
                throw SocketStreamError.tls(
                    .invalidConfiguration(
                        "the trusted key \"\(TerminalText.escaped(trustedKey))\" is not a SHA-256 fingerprint (64 hex digits)"
                    ))
            }
            trusted = digest.hex
        }
        // A resolution made a moment ago (`resolve()` to read the record first) serves, as for
        // `connect(tls:)`; else one now. Either way the connection goes to the addresses of
        // the same answer whose key it pins.
        let resolved: ResolvedService
        if let recent = context.recentResolutions.take(self) {
            resolved = recent
        } else {
            do {
                resolved = try await resolve(timeout: resolveTimeout, context: context)
                _ = context.recentResolutions.take(self)  // used here, not by a later connect
            } catch let error as DiscoveryError where error.code == .cancelled {
                throw CancellationError()
            } catch {
                throw SocketStreamError.nameNotFound(description, detail: "\(error)")
            }
        }
        guard let advertised = resolved.advertisedPublicKeySHA256(forTXTKey: txtKey) else {
            throw SocketStreamError.tls(.advertisedKeyMissing(service: resolved.service.description, txtKey: txtKey))
        }
        if let trusted, trusted != advertised {
            throw SocketStreamError.tls(
                .advertisedKeyChanged(service: resolved.service.description, advertised: advertised, trusted: trusted))
        }
        var pinned = tls
        pinned.role = .client  // a server-role configuration would check nothing
        pinned.pinnedSHA256 = [advertised]
        let pair = SocketStreams.pair(
            toHost: description, port: 0, bufferSize: bufferSize, tls: pinned,
            targetResolver: { _, _ in (resolved.addresses, resolved.hostName) })
        try await open(pair, reportingFailuresTo: context)
        // A pin also matches a certificate's hash; what is advertised must be the key's, or
        // the key remembered from this connection would never match the advertisement again.
        guard let trust = pair.peerTrust, trust.publicKeySHA256 == advertised else {
            pair.input.close()
            pair.output.close()
            throw SocketStreamError.tls(
                .pinMismatch(
                    certificate: pair.peerTrust?.certificateSHA256 ?? "none",
                    publicKey: pair.peerTrust?.publicKeySHA256 ?? "none"))
        }
        return pair
    }

    /// Connects pinned to the key the service advertises under `txtKey`, trusting on first use
    /// with `trustedKeys`: the key trusted for the service's name is required, and when none is
    /// yet, the key of this connection is trusted for it (written to the book before this
    /// returns). As ``connect(pinningAdvertisedKey:trustedKey:tls:bufferSize:resolveTimeout:context:)``
    /// otherwise.
    ///
    /// ```swift
    /// let book = try TrustedKeys(path: directory + "/known")
    /// let pair = try await service.connect(pinningAdvertisedKey: "fp", trustedKeys: book)
    /// ```
    /// - Throws: as the other form (`advertisedKeyChanged` when the service advertises another
    ///   key than the book holds for its name, also when another connection trusted another key
    ///   for it meanwhile); `AtomicFile.Failure` or `TrustedKeys.Failure` when the book cannot
    ///   be written (the connection is then closed).
    public func connect(
        pinningAdvertisedKey txtKey: String, trustedKeys: TrustedKeys, tls: TLSConfiguration = .client,
        bufferSize: Int = 256 * 1024, resolveTimeout: TimeInterval = 5, context: DiscoveryContext = .shared
    ) async throws -> BoundStreamPair {
        let pair = try await connect(
            pinningAdvertisedKey: txtKey, trustedKey: trustedKeys.key(for: name), tls: tls, bufferSize: bufferSize,
            resolveTimeout: resolveTimeout, context: context)
        let key = pair.peerTrust?.publicKeySHA256 ?? ""
        do {
            guard try trustedKeys.trustOnFirstUse(key, for: name) else {
                throw SocketStreamError.tls(
                    .advertisedKeyChanged(
                        service: description, advertised: key, trusted: trustedKeys.key(for: name) ?? "none"))
            }
        } catch {
            pair.close()
            throw error
        }
        return pair
    }
}
