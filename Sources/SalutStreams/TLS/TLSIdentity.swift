import COpenSSL
import Foundation

/// A TLS identity on disk: a private key and its certificate, as PEM files.
///
/// Peer-to-peer tools have no certificate authority: each device makes its own key and a
/// self-signed certificate once, publishes the SHA-256 of its public key (in a TXT record, for
/// example), and peers pin that fingerprint (``TLSConfiguration/pinnedSHA256``).
///
/// ```swift
/// let identity = try TLSIdentity.loadOrCreate(directory: configDirectory, commonName: "kitchen")
/// let server = TLSConfiguration.server(certificateChainFile: identity.certificateFile,
///                                      privateKeyFile: identity.privateKeyFile)
/// print(identity.publicKeySHA256)
/// ```
public struct TLSIdentity: Sendable, Hashable {
    /// The PEM file holding the certificate.
    public let certificateFile: String
    /// The PEM file holding the private key (readable by its owner only when Salut made it).
    public let privateKeyFile: String
    /// SHA-256 of the certificate's SubjectPublicKeyInfo, lower-case hex: what a peer pins.
    public let publicKeySHA256: String

    /// Reads the identity in `certificateFile` and `privateKeyFile`.
    /// - Throws: ``TLSError/cannotLoad(file:reason:)`` when either file cannot be read or parsed,
    ///   or the key does not belong to the certificate.
    public init(certificateFile: String, privateKeyFile: String) throws {
        let certificate = try Self.readCertificate(certificateFile)
        defer { X509_free(certificate) }
        let key = try Self.readPrivateKey(privateKeyFile)
        defer { EVP_PKEY_free(key) }
        guard X509_check_private_key(certificate, key) == 1 else {
            ERR_clear_error()
            throw TLSError.cannotLoad(
                file: privateKeyFile, reason: "the key does not belong to the certificate in \(certificateFile)")
        }
        self.certificateFile = certificateFile
        self.privateKeyFile = privateKeyFile
        self.publicKeySHA256 = Fingerprint.hex(TLSConnection.publicKeyDigest(certificate))
    }

    /// A client configuration presenting this identity to servers that ask for a client
    /// certificate; servers are validated as with `TLSConfiguration.client` unless pinned
    /// (``TLSConfiguration/pinnedSHA256``, or `connect(pinningAdvertisedKey:)`, which pins for
    /// you).
    public var clientConfiguration: TLSConfiguration {
        TLSConfiguration(certificateChainFile: certificateFile, privateKeyFile: privateKeyFile)
    }

    /// A server configuration presenting this identity.
    /// - Parameter requiringClientKeys: when true, every client must present a certificate, and
    ///   its chain is not validated (peers' certificates are self-signed, as this one is): its
    ///   key is for the listener's trust evaluator to judge (`StreamListener(tls:trustEvaluator:)`).
    ///   Without an evaluator any client key passes.
    public func serverConfiguration(requiringClientKeys: Bool = false) -> TLSConfiguration {
        var configuration = TLSConfiguration.server(
            certificateChainFile: certificateFile, privateKeyFile: privateKeyFile)
        configuration.requiresClientCertificate = requiringClientKeys
        configuration.validatesCertificateChain = !requiringClientKeys
        return configuration
    }

    /// The identity kept in `directory` as `certificate.pem` and `key.pem`, made on first use:
    /// an Ed25519 key and a self-signed certificate for `commonName`, valid for 100 years. The
    /// directory is created (mode 0700) if missing; the key file is written with mode 0600, each
    /// file appears atomically, and the certificate last: a first run interrupted between the
    /// two leaves a key without a certificate, which was never shown to anyone, so the next run
    /// makes a new identity in its place. Processes that start at once make one identity
    /// between them: it is made under a lock on `directory/identity.lock`, waited for up to 10 s.
    /// - Throws: ``TLSError/cannotLoad(file:reason:)`` when an existing identity cannot be read
    ///   or a new one cannot be written (the reason says which system call failed and why).
    public static func loadOrCreate(directory: String, commonName: String) throws -> TLSIdentity {
        let certificateFile = (directory as NSString).appendingPathComponent("certificate.pem")
        let keyFile = (directory as NSString).appendingPathComponent("key.pem")
        // The certificate is written last: once it exists, the identity is complete.
        if FileManager.default.fileExists(atPath: certificateFile) {
            try checkPrivate(keyFile)
            return try TLSIdentity(certificateFile: certificateFile, privateKeyFile: keyFile)
        }
        do {
            try FileManager.default.createDirectory(
                atPath: directory, withIntermediateDirectories: true,
                attributes: [.posixPermissions: 0o700])
        } catch {
            throw TLSError.cannotLoad(
                file: directory, reason: "cannot create the directory: \(error.localizedDescription)")
        }
        // One process makes it: two at once would each write a key and a certificate, and
        // could leave one's key beside the other's certificate.
        return try FileLock.withExclusiveLock(on: (directory as NSString).appendingPathComponent("identity.lock")) {
            // Made by another process while this one waited for the lock.
            if FileManager.default.fileExists(atPath: certificateFile) {
                return try TLSIdentity(certificateFile: certificateFile, privateKeyFile: keyFile)
            }
            let (keyPEM, certificatePEM) = try makeSelfSigned(commonName: commonName)
            // The key first: a certificate without its key would be read as a broken identity.
            try writeAtomically(keyPEM, to: keyFile, mode: 0o600)
            try writeAtomically(certificatePEM, to: certificateFile, mode: 0o644)
            return try TLSIdentity(certificateFile: certificateFile, privateKeyFile: keyFile)
        }
    }

    /// A private key that others can read is no longer private: refused, saying what to run
    /// (as OpenSSH refuses a key file with loose permissions).
    /// - Throws: ``TLSError/cannotLoad(file:reason:)`` when the group or others may read or write it.
    static func checkPrivate(_ keyFile: String) throws {
        var info = stat()
        guard stat(keyFile, &info) == 0 else { return }  // reading it says what is wrong
        guard info.st_mode & 0o077 == 0 else {
            let mode = String(info.st_mode & 0o777, radix: 8)
            throw TLSError.cannotLoad(
                file: keyFile,
                reason:
                    "the private key's permissions (\(mode)) let others read or change it; if no one else had it, run: chmod 600 '\(keyFile)'"
            )
        }
    }

    /// The SHA-256 of the public key in a PEM certificate file, lower-case hex.
    /// - Throws: ``TLSError/cannotLoad(file:reason:)`` when the file is not a readable certificate.
    public static func publicKeySHA256(ofCertificateFile path: String) throws -> String {
        let certificate = try readCertificate(path)
        defer { X509_free(certificate) }
        return Fingerprint.hex(TLSConnection.publicKeyDigest(certificate))
    }

    // MARK: OpenSSL

    private static func readCertificate(_ path: String) throws -> OpaquePointer {
        guard let file = fopen(path, "r") else {
            throw TLSError.cannotLoad(file: path, reason: String(cString: strerror(errno)))
        }
        defer { fclose(file) }
        guard let certificate = PEM_read_X509(file, nil, nil, nil) else {
            throw TLSError.cannotLoad(file: path, reason: "not a PEM certificate: \(OpenSSLErrors.drain())")
        }
        return certificate
    }

    private static func readPrivateKey(_ path: String) throws -> OpaquePointer {
        guard let file = fopen(path, "r") else {
            throw TLSError.cannotLoad(file: path, reason: String(cString: strerror(errno)))
        }
        defer { fclose(file) }
        guard let key = PEM_read_PrivateKey(file, nil, nil, nil) else {
            throw TLSError.cannotLoad(file: path, reason: "not a PEM private key: \(OpenSSLErrors.drain())")
        }
        return key
    }

    /// A new Ed25519 key and a self-signed certificate for it, both as PEM.
    private static func makeSelfSigned(commonName: String) throws -> (key: Data, certificate: Data) {
        func failure(_ step: String) -> TLSError {
            TLSError.cannotLoad(file: "(new identity)", reason: "\(step) failed: \(OpenSSLErrors.drain())")
        }
        guard let keyContext = EVP_PKEY_CTX_new_id(EVP_PKEY_ED25519, nil) else { throw failure("EVP_PKEY_CTX_new_id") }
        defer { EVP_PKEY_CTX_free(keyContext) }
        var generated: OpaquePointer?
        guard EVP_PKEY_keygen_init(keyContext) == 1, EVP_PKEY_keygen(keyContext, &generated) == 1, let key = generated
        else {
            throw failure("Ed25519 key generation")
        }
        defer { EVP_PKEY_free(key) }
        guard let certificate = X509_new() else { throw failure("X509_new") }
        defer { X509_free(certificate) }
        var serial: UInt64 = 0
        guard RAND_bytes(&serial, 8) == 1 else { throw failure("RAND_bytes") }
        let name = String(commonName.utf8.prefix(64)) ?? "peer"
        guard X509_set_version(certificate, 2) == 1,
            ASN1_INTEGER_set_uint64(X509_get_serialNumber(certificate), serial & 0x7fff_ffff_ffff_ffff) == 1,
            X509_gmtime_adj(X509_getm_notBefore(certificate), -86_400) != nil,
            X509_time_adj_ex(X509_getm_notAfter(certificate), 36_500, 0, nil) != nil,
            X509_set_pubkey(certificate, key) == 1,
            let subject = X509_get_subject_name(certificate),
            X509_NAME_add_entry_by_txt(subject, "CN", MBSTRING_UTF8, name, -1, -1, 0) == 1,
            X509_set_issuer_name(certificate, subject) == 1,
            X509_sign(certificate, key, nil) > 0
        else {
            throw failure("building the certificate")
        }
        return (
            try pem { PEM_write_bio_PrivateKey($0, key, nil, nil, 0, nil, nil) },
            try pem { PEM_write_bio_X509($0, certificate) }
        )
    }

    /// What `write` puts in a memory BIO.
    private static func pem(_ write: (OpaquePointer) -> Int32) throws -> Data {
        guard let bio = BIO_new(BIO_s_mem()) else {
            throw TLSError.cannotLoad(file: "(new identity)", reason: "BIO_new failed")
        }
        defer { BIO_free(bio) }
        guard write(bio) == 1 else {
            throw TLSError.cannotLoad(file: "(new identity)", reason: "PEM encoding failed: \(OpenSSLErrors.drain())")
        }
        var bytes: UnsafeMutablePointer<CChar>?
        let count = BIO_ctrl(bio, BIO_CTRL_INFO, 0, &bytes)
        guard count > 0, let bytes else { throw TLSError.cannotLoad(file: "(new identity)", reason: "empty PEM") }
        return Data(bytes: bytes, count: count)
    }

    /// ``AtomicFile/write(_:to:mode:durable:)``, its failure as a ``TLSError``.
    private static func writeAtomically(_ data: Data, to path: String, mode: mode_t) throws {
        do {
            try AtomicFile.write(data, to: path, mode: mode)
        } catch let failure as AtomicFile.Failure {
            throw TLSError.cannotLoad(file: path, reason: "\(failure.call): \(failure.reason)")
        }
    }
}
