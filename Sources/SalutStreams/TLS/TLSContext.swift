import COpenSSL
import Foundation

/// An OpenSSL `SSL_CTX` built from a ``TLSConfiguration``: protocol versions, trust roots, this
/// end's identity and the verification mode. Shared by every connection made with it (a
/// listener builds one for all the connections it accepts).
final class TLSContext: @unchecked Sendable {
    // @unchecked: the SSL_CTX is only read after `init` (OpenSSL documents SSL_new on a shared,
    // fully configured context as thread-safe).

    let pointer: OpaquePointer
    let configuration: TLSConfiguration

    /// - Throws: ``TLSError/invalidConfiguration(_:)`` or ``TLSError/cannotLoad(file:reason:)``.
    init(_ configuration: TLSConfiguration) throws {
        try configuration.validate()
        let method = configuration.role == .server ? TLS_server_method() : TLS_client_method()
        guard let context = SSL_CTX_new(method) else {
            throw TLSError.invalidConfiguration("SSL_CTX_new failed: \(OpenSSLErrors.drain())")
        }
        pointer = context
        self.configuration = configuration
        // From here `deinit` frees the context if a step below throws.
        guard salut_SSL_CTX_set_min_proto_version(context, Int32(configuration.minimumVersion.rawValue)) == 1 else {
            throw TLSError.invalidConfiguration("OpenSSL refused minimum version \(configuration.minimumVersion)")
        }
        if let maximum = configuration.maximumVersion,
            salut_SSL_CTX_set_max_proto_version(context, Int32(maximum.rawValue)) != 1
        {
            throw TLSError.invalidConfiguration("OpenSSL refused maximum version \(maximum)")
        }
        // Partial writes let the pump send in pieces; the scratch buffer it retries from may
        // move between calls.
        // (SSL_MODE_AUTO_RETRY, on by default, stays on: with it, SSL_read asks to wait for the
        // socket only after our socket BIO found nothing read ahead and the socket empty. Off,
        // OpenSSL could ask to wait while bytes sit in the BIO, and the pump would wait for
        // nothing.)
        _ = salut_SSL_CTX_set_mode(context, Int(SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER))
        _ = SSL_CTX_set_options(context, salut_SSL_OP_NO_RENEGOTIATION)
        if let suites = configuration.tls13CipherSuites {
            guard SSL_CTX_set_ciphersuites(context, suites) == 1 else {
                throw TLSError.invalidConfiguration(
                    "OpenSSL refused the TLS 1.3 cipher suites \"\(suites)\": \(OpenSSLErrors.drain())")
            }
        }
        // TLS 1.2 (when the versions allow it) only with forward secrecy and an AEAD cipher:
        // no CBC, no RSA key exchange, as a scanner rates a server; and the server's order.
        // (A configuration that lowers the minimum below 1.2 asks for old peers: it keeps
        // OpenSSL's own list, which they need.)
        if configuration.minimumVersion >= .v1_2 {
            guard SSL_CTX_set_cipher_list(context, TLSConfiguration.tls12CipherSuites) == 1 else {
                throw TLSError.invalidConfiguration(
                    "OpenSSL refused the TLS 1.2 cipher suites: \(OpenSSLErrors.drain())")
            }
        }
        if configuration.role == .server {
            _ = SSL_CTX_set_options(context, salut_SSL_OP_CIPHER_SERVER_PREFERENCE)
        }

        switch configuration.trustRoots {
        case .system where !configuration.pinnedSHA256.isEmpty || !configuration.validatesCertificateChain:
            // No chain is judged by the store (a pin replaces it, or validation is off):
            // reading the system's store would cost tens of milliseconds per context for nothing.
            break
        case .system:
            guard SSL_CTX_set_default_verify_paths(context) == 1 else {
                throw TLSError.cannotLoad(file: "the system trust store", reason: OpenSSLErrors.drain())
            }
        case .file(let path):
            guard FileManager.default.isReadableFile(atPath: path) else {
                throw TLSError.cannotLoad(file: path, reason: "no such readable file")
            }
            guard SSL_CTX_load_verify_locations(context, path, nil) == 1 else {
                throw TLSError.cannotLoad(file: path, reason: OpenSSLErrors.drain())
            }
        }

        if let chain = configuration.certificateChainFile, let key = configuration.privateKeyFile {
            for file in [chain, key] where !FileManager.default.isReadableFile(atPath: file) {
                throw TLSError.cannotLoad(file: file, reason: "no such readable file")
            }
            guard SSL_CTX_use_certificate_chain_file(context, chain) == 1 else {
                throw TLSError.cannotLoad(file: chain, reason: OpenSSLErrors.drain())
            }
            guard SSL_CTX_use_PrivateKey_file(context, key, SSL_FILETYPE_PEM) == 1 else {
                throw TLSError.cannotLoad(file: key, reason: OpenSSLErrors.drain())
            }
            guard SSL_CTX_check_private_key(context) == 1 else {
                throw TLSError.cannotLoad(file: key, reason: "the key does not match the certificate")
            }
        }

        // The chain is verified during the handshake, but the verdict is taken afterwards (so a
        // pin can stand in for the chain and an evaluator can overrule it): the callback notes
        // each problem on the connection and lets the handshake go on.
        // A connection whose pins are checked during the handshake (no evaluator to overrule
        // them) refuses a leaf that matches none before it sends anything of its own.
        let acceptForLater: @convention(c) (Int32, OpaquePointer?) -> Int32 = { ok, store in
            guard let store else { return 1 }
            return TLSConnection.verify(ok, store)
        }
        // The chain as a whole, then a listener's evaluator on the result (see
        // `TLSConnection.verifyChain`): a refusal there is an alert the peer hears.
        let verifyThenJudge: @convention(c) (OpaquePointer?, UnsafeMutableRawPointer?) -> Int32 = { store, _ in
            guard let store else { return 0 }
            return TLSConnection.verifyChain(store)
        }
        SSL_CTX_set_cert_verify_callback(context, verifyThenJudge, nil)
        switch configuration.role {
        case .client:
            SSL_CTX_set_verify(context, SSL_VERIFY_PEER, acceptForLater)
        case .server where configuration.requiresClientCertificate:
            SSL_CTX_set_verify(context, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, acceptForLater)
        case .server:
            SSL_CTX_set_verify(context, SSL_VERIFY_NONE, nil)
        }
    }

    deinit { SSL_CTX_free(pointer) }
}

/// OpenSSL's thread-local error queue, read into text.
enum OpenSSLErrors {
    /// Every queued error as one line (the queue is left empty); "unknown error" when empty.
    static func drain() -> String {
        var lines: [String] = []
        while true {
            let code = ERR_get_error()
            if code == 0 { break }
            if let reason = ERR_reason_error_string(code) {
                lines.append(String(cString: reason))
            } else {
                var text = [CChar](repeating: 0, count: 256)
                ERR_error_string_n(code, &text, text.count)
                lines.append(String(decoding: text.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self))
            }
        }
        return lines.isEmpty ? "unknown error" : lines.joined(separator: "; ")
    }
}

/// A TLS context built once and shared by many connections (a session's tasks), so that trust
/// roots and identities are loaded once.
package final class SharedTLSContext: Sendable {
    let context: TLSContext

    /// - Throws: ``TLSError`` when the configuration cannot be loaded.
    package init(_ configuration: TLSConfiguration) throws {
        context = try TLSContext(configuration)
    }

    package var configuration: TLSConfiguration { context.configuration }
}
