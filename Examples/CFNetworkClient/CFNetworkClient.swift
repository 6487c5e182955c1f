// cfnetwork-client: Apple-platform CFNetwork stream code, unchanged but for `import Salut`.
//
// Usage: cfnetwork-client HOST PORT [LINE]
//
// Creates a stream pair the CoreFoundation way, asks for TLS with CFNetwork's constants
// (validating the server's certificate against the system's trust store, as Apple's defaults
// do), opens it, sends LINE (default "hello") and prints the first line that comes back, driven
// by a stream delegate on the main run loop. Exits 0 on an answer, 1 on an error or after 10 s.
// Tests run it against `openssl s_server -rev` to prove CFNetwork's spelling works end to end.
import Foundation
import Salut

final class LineClient: NSObject, StreamDelegate {
    let input: InputStream
    let output: OutputStream
    let line: Data
    var sent = 0
    var received = Data()

    init(host: String, port: Int, line: String) {
        var readStream: Unmanaged<CFReadStream>?
        var writeStream: Unmanaged<CFWriteStream>?
        CFStreamCreatePairWithSocketToHost(
            kCFAllocatorDefault, host as CFString, UInt32(port), &readStream, &writeStream)
        input = readStream!.takeRetainedValue() as InputStream
        output = writeStream!.takeRetainedValue() as OutputStream
        self.line = Data((line + "\n").utf8)
        super.init()

        let level = CFStreamPropertyKey(rawValue: kCFStreamPropertySocketSecurityLevel)
        let settings: [NSString: Any] = [
            kCFStreamSSLPeerName: host as NSString,
            kCFStreamSSLValidatesCertificateChain: kCFBooleanTrue as Any,
        ]
        let sslSettings = CFStreamPropertyKey(rawValue: kCFStreamPropertySSLSettings)
        guard CFReadStreamSetProperty(input, level, kCFStreamSocketSecurityLevelNegotiatedSSL),
            CFWriteStreamSetProperty(output, level, kCFStreamSocketSecurityLevelNegotiatedSSL),
            CFReadStreamSetProperty(input, sslSettings, settings as CFDictionary)
        else {
            fail("TLS was refused")
        }
    }

    func start() {
        for stream in [input, output] as [Stream] {
            stream.delegate = self
            stream.schedule(in: .main, forMode: .default)
        }
        guard CFReadStreamOpen(input), CFWriteStreamOpen(output) else {
            fail(CFReadStreamCopyError(input)?.localizedDescription ?? "the streams did not open")
        }
    }

    func stream(_ stream: Stream, handle event: Stream.Event) {
        switch event {
        case .hasSpaceAvailable where stream === output && sent < line.count:
            let count = line.withUnsafeBytes { bytes in
                CFWriteStreamWrite(output, bytes.bindMemory(to: UInt8.self).baseAddress! + sent, line.count - sent)
            }
            if count > 0 { sent += count }
        case .hasBytesAvailable:
            var buffer = [UInt8](repeating: 0, count: 4096)
            let count = CFReadStreamRead(input, &buffer, buffer.count)
            guard count > 0 else { return }
            received.append(contentsOf: buffer[..<count])
            if let end = received.firstIndex(of: UInt8(ascii: "\n")) {
                print("sent: \(String(decoding: line.dropLast(), as: UTF8.self))")
                print("received: \(String(decoding: received[..<end], as: UTF8.self))")
                CFReadStreamClose(input)
                CFWriteStreamClose(output)
                exit(0)
            }
        case .errorOccurred:
            fail(stream.streamError.map { "\($0)" } ?? "unknown error")
        case .endEncountered:
            fail("the server closed the connection before answering")
        default:
            break
        }
    }

    func fail(_ reason: String) -> Never {
        FileHandle.standardError.write(Data("cfnetwork-client: \(reason)\n".utf8))
        exit(1)
    }
}

let arguments = CommandLine.arguments
guard arguments.count >= 3, let port = Int(arguments[2]), (1...65535).contains(port) else {
    FileHandle.standardError.write(Data("usage: cfnetwork-client HOST PORT [LINE]  (PORT 1-65535)\n".utf8))
    exit(2)
}
let client = LineClient(host: arguments[1], port: port, line: arguments.count > 3 ? arguments[3] : "hello")
client.start()
_ = Timer.scheduledTimer(withTimeInterval: 10, repeats: false) { _ in
    FileHandle.standardError.write(Data("cfnetwork-client: no answer within 10 s\n".utf8))
    exit(1)
}
RunLoop.main.run()
