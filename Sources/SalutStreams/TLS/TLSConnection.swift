import COpenSSL
import Foundation
import Glibc

/// What a TLS peer presented, and what the configured policy made of it: handed to trust
/// evaluators (a session's trust challenge, for example) and kept for metrics.
public struct TLSPeerTrust: Sendable, Hashable {
    /// SHA-256 of the peer's leaf certificate (DER), lower-case hex.
    public var certificateSHA256: String
    /// SHA-256 of the leaf's SubjectPublicKeyInfo (DER), lower-case hex: stays the same when a
    /// certificate is renewed with the same key.
    public var publicKeySHA256: String
    /// The leaf certificate's subject, in OpenSSL's one-line form.
    public var subject: String
    /// The negotiated protocol version, for example `TLSv1.3`.
    public var protocolVersion: String
    /// The negotiated cipher suite, for example `TLS_AES_256_GCM_SHA384`.
    public var cipherSuite: String
    /// Nil when the configured policy accepts the peer (pin matched, or chain and name valid,
    /// or validation turned off); otherwise why not.
    public var policyFailure: TLSError?
}

/// Decides whether to trust a peer after the configured policy has been applied (see
/// ``TLSPeerTrust/policyFailure``); call the completion with true to go on. Called once, on
/// the connection's queue, when the handshake has ended; a `StreamListener`'s evaluator is
/// called earlier, inside the handshake, as soon as the client's chain is verified (before the
/// client has proved it holds the key: judge there, record nothing), and one that completes
/// before it returns refuses the client there, with a `bad_certificate` alert the client can
/// report. It may complete later, from any thread: nothing of the peer's is read until then.
/// The first call of the completion decides; later ones are ignored.
public typealias TLSTrustEvaluator = @Sendable (TLSPeerTrust, @escaping @Sendable (Bool) -> Void) -> Void

/// One TLS session over a connected non-blocking socket: handshake steps, then encrypted
/// receive/send for the socket pump.
final class TLSConnection: ByteTransport, @unchecked Sendable {
    // @unchecked: used only on the pump's queue (it is captured, not called, elsewhere).

    enum HandshakeStep: Equatable {
        case done
        case wantRead
        case wantWrite
        case failed(TLSError)
    }

    /// The most application bytes one TLS record carries (2^14, RFC 8446 section 5.1): a
    /// write that found the socket full holds at most this many in its pending record.
    static let largestRecord = 16 * 1024

    private let ssl: OpaquePointer
    private let context: TLSContext
    private var sentCloseNotify = false
    /// Certificate problems the verify callback saw, in order (X509_V_ERR_* codes).
    private var verificationProblems: [Int32] = []
    /// The pins (lower-case hex) the peer's leaf is held to during the handshake itself, or
    /// empty when the verdict waits for the handshake's end (no pins, or an evaluator that
    /// has the last word). Set by the pump before the first handshake step.
    var pinsCheckedInHandshake: [String] = []
    /// What the peer presented when the verify callback refused it for matching no pin.
    private var refusedLeaf: (certificate: String, publicKey: String)?
    /// Asked once, when the peer's chain has been verified (``verifyChain(_:)``): a trust
    /// evaluator's verdict when it answers at once, nil when it answers later (the decision then
    /// waits for the handshake's end). A refusal ends the handshake with a `bad_certificate`
    /// alert, so the peer hears why. Set by the pump before the first step, for a listener's
    /// evaluator only (the peer has not proved it holds the key yet: see `SecuritySetup`).
    var judgeInHandshake: ((TLSPeerTrust) -> Bool?)?
    /// Why the handshake was refused from the verify callback by ``judgeInHandshake``.
    private var refusedInHandshake: TLSError?

    /// - Parameters:
    ///   - dialledHost: the host the client connected to; the certificate must name it unless
    ///     the configuration gives a `peerName`.
    ///   - carriedOver: bytes already read from the socket that belong to this session (what an
    ///     earlier session read ahead and nobody read in the clear): read before the socket.
    /// - Throws: ``TLSError/invalidConfiguration(_:)`` when OpenSSL cannot set the session up.
    init(context: TLSContext, fd: Int32, dialledHost: String?, carriedOver: [UInt8] = []) throws {
        guard let ssl = SSL_new(context.pointer) else {
            throw TLSError.invalidConfiguration("SSL_new failed: \(OpenSSLErrors.drain())")
        }
        self.ssl = ssl
        self.context = context
        // The verify callback finds this object through our own ex-data slot (held unretained:
        // the SSL is freed in our deinit, before we are gone).
        guard let slot = Self.exDataIndex else {  // (deinit frees the SSL)
            throw TLSError.invalidConfiguration("SSL_get_ex_new_index failed")
        }
        guard SSL_set_ex_data(ssl, slot, Unmanaged.passUnretained(self).toOpaque()) == 1 else {
            throw TLSError.invalidConfiguration("SSL_set_ex_data failed")
        }
        // Our own socket BIO: sends with MSG_NOSIGNAL, so a peer that goes away mid-write is an
        // error, never a SIGPIPE that ends the process.
        guard let bio = salut_BIO_new_socket_nosigpipe(fd) else {
            throw TLSError.invalidConfiguration("cannot make a socket BIO: \(OpenSSLErrors.drain())")
        }
        SSL_set_bio(ssl, bio, bio)  // the SSL owns the BIO from here
        guard carriedOver.withUnsafeBytes({ salut_BIO_preload(bio, $0.baseAddress, $0.count) }) == 1 else {
            throw TLSError.invalidConfiguration("cannot keep the \(carriedOver.count) bytes read before TLS started")
        }
        let configuration = context.configuration
        if configuration.role == .client {
            if let name = (configuration.peerName ?? dialledHost).map(Self.bareHost), !name.isEmpty {
                if Self.isIPLiteral(name) {
                    guard X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), name) == 1 else {
                        throw TLSError.invalidConfiguration("cannot verify against address \(name)")
                    }
                } else {
                    guard SSL_set1_host(ssl, name) == 1, salut_SSL_set_tlsext_host_name(ssl, name) == 1 else {
                        throw TLSError.invalidConfiguration("cannot verify against name \(name)")
                    }
                }
            }
            SSL_set_connect_state(ssl)
        } else {
            SSL_set_accept_state(ssl)
        }
    }

    deinit { SSL_free(ssl) }

    /// The SSL ex-data slot that points back to the `TLSConnection`, taken once per process.
    private static let exDataIndex: Int32? = {
        let index = salut_SSL_get_ex_new_index()
        return index >= 0 ? index : nil
    }()

    /// `[fe80::1%eth0]` → `fe80::1`; a trailing dot of a DNS name is dropped.
    static func bareHost(_ host: String) -> String {
        var name = host
        if name.hasPrefix("["), name.hasSuffix("]") { name = String(name.dropFirst().dropLast()) }
        if let percent = name.firstIndex(of: "%") { name = String(name[..<percent]) }
        if name.hasSuffix(".") { name = String(name.dropLast()) }
        return name
    }

    static func isIPLiteral(_ name: String) -> Bool {
        var v4 = in_addr(), v6 = in6_addr()
        return inet_pton(AF_INET, name, &v4) == 1 || inet_pton(AF_INET6, name, &v6) == 1
    }

    /// The verify callback's work (on the handshake's thread), for each certificate of the
    /// peer's chain: notes each problem for the verdict taken after the handshake, and refuses
    /// a leaf that matches none of ``pinsCheckedInHandshake`` at once, so that a client sends
    /// its own certificate (its long-term key, its name) only to a server that passed its pin.
    /// - Returns: 1 to go on with the handshake, 0 to end it with an alert.
    static func verify(_ ok: Int32, _ store: OpaquePointer) -> Int32 {
        guard let connection = owner(of: store) else { return ok }
        if ok == 0 {
            let code = X509_STORE_CTX_get_error(store)
            if !connection.verificationProblems.contains(code) { connection.verificationProblems.append(code) }
        }
        guard !connection.pinsCheckedInHandshake.isEmpty, X509_STORE_CTX_get_error_depth(store) == 0,
            let leaf = X509_STORE_CTX_get_current_cert(store)
        else { return 1 }
        let certificate = Fingerprint.hex(certificateDigest(leaf))
        let publicKey = Fingerprint.hex(publicKeyDigest(leaf))
        let pins = connection.pinsCheckedInHandshake
        guard pins.contains(certificate) || pins.contains(publicKey) else {
            connection.refusedLeaf = (certificate, publicKey)
            return 0
        }
        return 1
    }

    /// The whole chain's verification (OpenSSL's, with ``verify(_:_:)`` called for each
    /// certificate), then, when ``judgeInHandshake`` is set, the evaluator's verdict on the
    /// result: once per certificate message, with every problem known.
    /// - Returns: 1 to go on with the handshake, 0 to end it with an alert (a refused
    ///   evaluator's is `bad_certificate`).
    static func verifyChain(_ store: OpaquePointer) -> Int32 {
        let verified = X509_verify_cert(store)
        guard verified > 0, let connection = owner(of: store), let judge = connection.judgeInHandshake,
            let leaf = X509_STORE_CTX_get0_cert(store)
        else { return verified }
        connection.judgeInHandshake = nil
        let trust = connection.trust(of: leaf, verifyResult: Int(X509_STORE_CTX_get_error(store)))
        guard judge(trust) != false else {
            connection.refusedInHandshake = trust.policyFailure ?? .rejectedByEvaluator
            X509_STORE_CTX_set_error(store, X509_V_ERR_CERT_REJECTED)  // (the alert: bad_certificate)
            return 0
        }
        return 1
    }

    /// The connection whose handshake is verifying `store`'s chain.
    private static func owner(of store: OpaquePointer) -> TLSConnection? {
        guard let raw = X509_STORE_CTX_get_ex_data(store, SSL_get_ex_data_X509_STORE_CTX_idx()),
            let slot = exDataIndex,
            let owner = SSL_get_ex_data(OpaquePointer(raw), slot)
        else { return nil }
        return Unmanaged<TLSConnection>.fromOpaque(owner).takeUnretainedValue()
    }

    // MARK: Handshake

    /// Advances the handshake as far as the socket allows.
    func handshakeStep() -> HandshakeStep {
        ERR_clear_error()
        errno = 0
        let result = SSL_do_handshake(ssl)
        if result == 1 { return .done }
        if let refusedLeaf {
            _ = OpenSSLErrors.drain()
            return .failed(.pinMismatch(certificate: refusedLeaf.certificate, publicKey: refusedLeaf.publicKey))
        }
        if let refusedInHandshake {
            _ = OpenSSLErrors.drain()
            return .failed(refusedInHandshake)
        }
        let code = SSL_get_error(ssl, result)
        switch code {
        case SSL_ERROR_WANT_READ: return .wantRead
        case SSL_ERROR_WANT_WRITE: return .wantWrite
        case SSL_ERROR_SYSCALL:
            let reason =
                errno == 0 ? "the peer closed the connection during the handshake" : String(cString: strerror(errno))
            let queued = OpenSSLErrors.drain()
            return .failed(.handshakeFailed(queued == "unknown error" ? reason : queued))
        default:
            return .failed(.handshakeFailed(OpenSSLErrors.drain()))
        }
    }

    /// What the peer presented, judged by the configured policy: a pin, when any is configured,
    /// must match the leaf certificate or its public key; otherwise, unless validation is off,
    /// the chain must end in a trusted root and name the expected host.
    func peerTrust() -> TLSPeerTrust {
        guard let leaf = SSL_get1_peer_certificate(ssl) else {
            let configuration = context.configuration
            let needsOne = configuration.role == .client || configuration.requiresClientCertificate
            return TLSPeerTrust(
                certificateSHA256: "", publicKeySHA256: "", subject: "",
                protocolVersion: protocolVersion, cipherSuite: cipherSuite,
                policyFailure: needsOne ? .noPeerCertificate : nil)
        }
        defer { X509_free(leaf) }
        return trust(of: leaf, verifyResult: SSL_get_verify_result(ssl))
    }

    /// `leaf` judged by the policy (see ``peerTrust()``); `verifyResult` is the chain's
    /// verification result (an `X509_V_*` code), beside the problems the verify callback saw.
    private func trust(of leaf: OpaquePointer, verifyResult: Int) -> TLSPeerTrust {
        let configuration = context.configuration
        var trust = TLSPeerTrust(
            certificateSHA256: "", publicKeySHA256: "", subject: "",
            protocolVersion: protocolVersion, cipherSuite: cipherSuite, policyFailure: nil)
        trust.certificateSHA256 = Fingerprint.hex(Self.certificateDigest(leaf))
        trust.publicKeySHA256 = Fingerprint.hex(Self.publicKeyDigest(leaf))
        if let name = X509_get_subject_name(leaf), let line = X509_NAME_oneline(name, nil, 0) {
            trust.subject = String(cString: line)
            CRYPTO_free(line, #fileID, #line)
        }
        if !configuration.pinnedSHA256.isEmpty {
            let pins = configuration.pinnedSHA256.compactMap(Fingerprint.decode).map(Fingerprint.hex)
            if !pins.contains(trust.certificateSHA256) && !pins.contains(trust.publicKeySHA256) {
                trust.policyFailure = .pinMismatch(
                    certificate: trust.certificateSHA256, publicKey: trust.publicKeySHA256)
            }
        } else if configuration.validatesCertificateChain {
            let result = verifyResult
            if result != X509_V_OK || !verificationProblems.isEmpty {
                let codes = verificationProblems.isEmpty ? [Int32(result)] : verificationProblems
                var reasons = codes.map { String(cString: X509_verify_cert_error_string(Int($0))) }
                // What to do next, for the cases people meet first: a test server's own
                // certificate, and a certificate for another name.
                let unknownIssuer = [
                    X509_V_ERR_DEPTH_ZERO_SELF_SIGNED_CERT, X509_V_ERR_SELF_SIGNED_CERT_IN_CHAIN,
                    X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY, X509_V_ERR_UNABLE_TO_VERIFY_LEAF_SIGNATURE,
                ]
                if codes.contains(where: { unknownIssuer.contains($0) }) {
                    reasons.append(
                        "to trust this server, pin its key (SHA-256 \(trust.publicKeySHA256)) or add its certificate "
                            + "to the trust store (for one run: SSL_CERT_FILE=its-certificate.pem)")
                }
                if codes.contains(X509_V_ERR_HOSTNAME_MISMATCH) {
                    reasons.append("the certificate is for \(TerminalText.escaped(trust.subject))")
                }
                trust.policyFailure = .untrustedPeer(reason: reasons.joined(separator: "; "))
            }
        }
        return trust
    }

    static func certificateDigest(_ certificate: OpaquePointer) -> [UInt8] {
        var digest = [UInt8](repeating: 0, count: Int(EVP_MAX_MD_SIZE))
        var length: UInt32 = 0
        guard X509_digest(certificate, EVP_sha256(), &digest, &length) == 1 else { return [] }
        return Array(digest.prefix(Int(length)))
    }

    static func publicKeyDigest(_ certificate: OpaquePointer) -> [UInt8] {
        guard let key = X509_get_X509_PUBKEY(certificate) else { return [] }
        let size = i2d_X509_PUBKEY(key, nil)
        guard size > 0 else { return [] }
        var der = [UInt8](repeating: 0, count: Int(size))
        let written = der.withUnsafeMutableBufferPointer { buffer -> Int32 in
            var cursor: UnsafeMutablePointer<UInt8>? = buffer.baseAddress
            return i2d_X509_PUBKEY(key, &cursor)
        }
        guard written == size else { return [] }
        var digest = [UInt8](repeating: 0, count: Int(SHA256_DIGEST_LENGTH))
        _ = SHA256(der, der.count, &digest)
        return digest
    }

    var protocolVersion: String { String(cString: SSL_get_version(ssl)) }

    var cipherSuite: String {
        guard let cipher = SSL_get_current_cipher(ssl), let name = SSL_CIPHER_get_name(cipher) else { return "" }
        return String(cString: name)
    }

    /// Takes back the bytes that Salut's socket BIO read from the socket after the last TLS
    /// record OpenSSL consumed (it reads ahead): after the peer's close_notify, those are the
    /// first bytes in the clear, which belong to whoever reads the connection next.
    func takeUnreadBytes() -> [UInt8] {
        guard let bio = SSL_get_rbio(ssl) else { return [] }
        let count = salut_BIO_unread_count(bio)
        guard count > 0 else { return [] }
        return [UInt8](unsafeUninitializedCapacity: count) { buffer, taken in
            taken = salut_BIO_take_unread(bio, buffer.baseAddress!, count)
        }
    }

    /// True when the socket BIO holds bytes read ahead that OpenSSL has not consumed.
    var hasUnreadBytes: Bool {
        guard let bio = SSL_get_rbio(ssl) else { return false }
        return salut_BIO_unread_count(bio) > 0
    }

    // MARK: ByteTransport

    func receive(into buffer: UnsafeMutableRawPointer, count: Int) -> TransferOutcome {
        ERR_clear_error()
        errno = 0
        let n = SSL_read(ssl, buffer, Int32(min(count, Int(Int32.max))))
        if n > 0 { return .moved(Int(n)) }
        return outcome(of: n, reading: true)
    }

    func send(from buffer: UnsafeRawPointer, count: Int) -> TransferOutcome {
        ERR_clear_error()
        errno = 0
        let n = SSL_write(ssl, buffer, Int32(min(count, Int(Int32.max))))
        if n > 0 { return .moved(Int(n)) }
        return outcome(of: n, reading: false)
    }

    /// Sends close_notify only (the TCP connection stays up, for a return to plain bytes).
    func sendCloseNotify() -> TransferOutcome {
        ERR_clear_error()
        let result = SSL_shutdown(ssl)
        if result < 0 {
            switch SSL_get_error(ssl, result) {
            case SSL_ERROR_WANT_WRITE: return .wouldBlock
            case SSL_ERROR_WANT_READ: return .needsOtherDirection
            default: return .failed(.tls(.protocolError(OpenSSLErrors.drain())))
            }
        }
        sentCloseNotify = true
        return .ended
    }

    func finishSending() -> TransferOutcome {
        if !sentCloseNotify {
            ERR_clear_error()
            let result = SSL_shutdown(ssl)
            if result < 0 {
                switch SSL_get_error(ssl, result) {
                case SSL_ERROR_WANT_WRITE: return .wouldBlock
                case SSL_ERROR_WANT_READ: return .needsOtherDirection
                default:
                    // The peer is gone: no close_notify went out, and maybe not all the data.
                    sentCloseNotify = true
                    _ = shutdown(SSL_get_fd(ssl), Int32(SHUT_WR))  // best effort; already failed
                    return .failed(.connectionLost("the TLS close_notify could not be sent"))
                }
            }
            sentCloseNotify = true
        }
        guard shutdown(SSL_get_fd(ssl), Int32(SHUT_WR)) == 0 else {
            return .failed(.connectionLost("the half-close failed: \(String(cString: strerror(errno)))"))
        }
        return .ended
    }

    private func outcome(of result: Int32, reading: Bool) -> TransferOutcome {
        switch SSL_get_error(ssl, result) {
        case SSL_ERROR_WANT_READ: return reading ? .wouldBlock : .needsOtherDirection
        case SSL_ERROR_WANT_WRITE: return reading ? .needsOtherDirection : .wouldBlock
        case SSL_ERROR_ZERO_RETURN: return .ended
        case SSL_ERROR_SYSCALL:
            // The TCP stream ended (errno 0) without a close_notify first: a truncation.
            if errno == 0 {
                return .failed(
                    reading ? .tls(.closedWithoutCloseNotify) : .connectionLost("the peer closed the connection"))
            }
            return .failed(.connectionLost(String(cString: strerror(errno))))
        default:
            if reading && salut_error_is_unexpected_eof() != 0 {
                ERR_clear_error()
                return .failed(.tls(.closedWithoutCloseNotify))
            }
            return .failed(.tls(.protocolError(OpenSSLErrors.drain())))
        }
    }
}
