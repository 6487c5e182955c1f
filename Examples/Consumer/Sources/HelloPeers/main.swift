import Foundation
import HelloPeersCore

// Usage: HelloPeers [NAME]. Exit status 0 when the greeting came back unchanged, 1 otherwise.
let name = CommandLine.arguments.dropFirst().first ?? "Hello from \(ProcessInfo.processInfo.processIdentifier)"
do {
    let (reply, port) = try await Greeting.roundTrip(name: name)
    guard reply == Greeting.message else {
        FileHandle.standardError.write(Data("HelloPeers: the reply differs (\(reply.count) bytes)\n".utf8))
        exit(1)
    }
    print(
        "HelloPeers: \"\(name)\" published on port \(port), found, and greeted: \(String(decoding: reply, as: UTF8.self))",
        terminator: "")
} catch {
    FileHandle.standardError.write(Data("HelloPeers: \(error)\n".utf8))
    exit(1)
}
