import Salut

extension PeerConfiguration {
    /// TLS as a receiver speaks it with this device's identity: TLS 1.3 only, with peerxfer's
    /// cipher suites, asking every sender for its certificate. Senders' certificates are
    /// self-signed, so no chain is checked: the sender's key is what the accept policy judges.
    var receiverTLS: TLSConfiguration {
        var tls = TLSConfiguration.server(
            certificateChainFile: identity.certificateFile, privateKeyFile: identity.privateKeyFile)
        tls.requiresClientCertificate = true
        tls.validatesCertificateChain = false
        tls.minimumVersion = .v1_3
        tls.tls13CipherSuites = TransferLimits.cipherSuites
        return tls
    }

    /// TLS as a sender speaks it with this device's identity to the receiver whose key is
    /// `key` (the SHA-256 of its public key): any other key ends the handshake, and no name
    /// is checked (trust is by key).
    func senderTLS(pinning key: String) -> TLSConfiguration {
        var tls = TLSConfiguration(
            role: .client, pinnedSHA256: [key], certificateChainFile: identity.certificateFile,
            privateKeyFile: identity.privateKeyFile, minimumVersion: .v1_3)
        tls.peerName = nil
        tls.tls13CipherSuites = TransferLimits.cipherSuites
        return tls
    }
}
