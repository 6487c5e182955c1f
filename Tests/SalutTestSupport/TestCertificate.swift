import Foundation

/// A self-signed certificate and key made with the `openssl` command for one test, with the
/// fingerprints a client would pin.
public struct TestCertificate: Sendable {
    /// PEM certificate file.
    public let certificateFile: String
    /// PEM private key file.
    public let keyFile: String
    /// SHA-256 of the certificate (DER), lower-case hex.
    public let certificateSHA256: String
    /// SHA-256 of the SubjectPublicKeyInfo (DER), lower-case hex.
    public let publicKeySHA256: String

    /// Makes a P-256 certificate for `commonName`, valid for the given subject alternative
    /// names, in a fresh temporary directory.
    /// - Throws: `TestCertificate.Failure` with openssl's output when a command fails.
    public static func make(
        commonName: String = "localhost",
        alternativeNames: String = "DNS:localhost,IP:127.0.0.1,IP:::1"
    ) throws -> TestCertificate {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("salut-cert-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let cert = directory.appendingPathComponent("cert.pem").path
        let key = directory.appendingPathComponent("key.pem").path
        _ = try run(
            "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 "
                + "-subj /CN=\(commonName) -addext subjectAltName=\(alternativeNames) -keyout \(key) -out \(cert)")
        let certificateHash = try run("openssl x509 -in \(cert) -outform der | openssl dgst -sha256 -r")
        let keyHash = try run(
            "openssl x509 -in \(cert) -pubkey -noout | openssl pkey -pubin -outform der | openssl dgst -sha256 -r")
        return TestCertificate(
            certificateFile: cert, keyFile: key,
            certificateSHA256: String(certificateHash.prefix(64)),
            publicKeySHA256: String(keyHash.prefix(64)))
    }

    /// A failed shell command, with its output.
    public struct Failure: Error, CustomStringConvertible {
        public var description: String
    }

    static func run(_ command: String) throws -> String {
        let shell = try Foreign(["/bin/sh", "-c", command])
        guard shell.waitForExit(seconds: 60) else { throw Failure(description: "\(command): still running after 60 s") }
        let text = shell.output
        guard shell.process.terminationStatus == 0 else { throw Failure(description: "\(command): \(text)") }
        return text
    }
}

/// A free TCP port on loopback (bound and released; good enough for a test's own peer).
public func freeLoopbackPort() -> Int {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    defer { close(fd) }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = UInt32(0x7f00_0001).bigEndian
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    _ = withUnsafeMutablePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) }
    }
    _ = withUnsafeMutablePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
    }
    return Int(UInt16(bigEndian: address.sin_port))
}

/// `openssl s_server -rev` (answers each line reversed) on a free loopback port, for one
/// connection, with `certificate`; returns once it listens.
/// - Throws: `DeadlineExceeded` when it does not start listening within 10 s.
public func reversingServer(_ certificate: TestCertificate, extra: [String] = []) throws -> (Foreign, Int) {
    let port = freeLoopbackPort()
    let server = try Foreign(
        [
            "openssl", "s_server", "-accept", "127.0.0.1:\(port)", "-cert", certificate.certificateFile,
            "-key", certificate.keyFile, "-naccept", "1", "-rev",
        ] + extra)
    guard server.waitForOutput(containing: "ACCEPT", seconds: 10) else {
        throw DeadlineExceeded(what: "s_server listening: \(server.output)", seconds: 10)
    }
    return (server, port)
}
