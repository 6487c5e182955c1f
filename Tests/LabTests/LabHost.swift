import Foundation
import SalutTestSupport
import XCTest

/// A host of the lan-lab (`Scripts/lan-lab up N`), for tests that cross a (virtual) network.
///
/// Lab tests run only when `SALUT_LAB=1` (set by `Scripts/test` after it brings the lab up);
/// elsewhere they are skipped with that reason.
struct LabHost {
    let name: String

    static let packageRoot = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    static func requireLab() throws {
        guard ProcessInfo.processInfo.environment["SALUT_LAB"] == "1" else {
            throw XCTSkip("lan-lab tests run from Scripts/test, which brings the lab up (SALUT_LAB=1)")
        }
    }

    /// Starts `arguments` inside this host; stdout and stderr are collected in the returned
    /// process (started through `env --default-signal`, so that `stop()`'s SIGTERM reaches it).
    func start(_ arguments: [String]) throws -> Foreign {
        try Foreign([Self.packageRoot.appendingPathComponent("Scripts/lan-lab").path, "exec", name] + arguments)
    }

    /// Runs `arguments` inside this host to completion (killed after `timeout` seconds) and
    /// returns its standard output.
    func run(_ arguments: [String], timeout: TimeInterval = 20) throws -> String {
        let job = try start(arguments)
        guard job.waitForExit(seconds: timeout) else {
            job.stop()
            throw LabError.timedOut(arguments.joined(separator: " "))
        }
        return job.output
    }
}

extension LabHost {
    /// The key of the peerxfer configuration in `config` on this host, as `peerxfer identity
    /// --json` prints it (what a person reads on the receiver and gives the sender).
    /// - Throws: ``LabError/noKey(_:)`` with the output when it holds no 64-digit key.
    func peerxferKey(_ peerxfer: String, config: String) throws -> String {
        let identity = try run([peerxfer, "identity", "--config", config, "--json"], timeout: 30)
        let key = identity.components(separatedBy: "\"key\":\"").dropFirst().first.map { String($0.prefix(64)) } ?? ""
        guard key.count == 64 else { throw LabError.noKey(identity) }
        return key
    }
}

enum LabError: Error {
    case timedOut(String)
    case noKey(String)
}
