import Foundation
@testable import PeerTransferCore
import SalutTestSupport
import XCTest

/// Daemons and senders of the real `peerxfer` binary, each with its own configuration folder
/// and inbox under one temporary folder, against the real avahi-daemon.
final class PeerXferLab: @unchecked Sendable {
    // @unchecked: used from the test's thread only; the Foreign processes are thread-safe.
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()
    static let binary = BuiltProduct.path("peerxfer")

    let directory: String
    private var daemons: [Foreign] = []

    init() throws {
        directory =
            FileManager.default.temporaryDirectory.appendingPathComponent("peerxfer-\(UUID().uuidString.prefix(8))")
            .path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    }

    /// Folders with a small file system mounted on them (see ``smallDisk(_:size:)``).
    private var mounts: [String] = []

    deinit {
        for daemon in daemons { daemon.stop() }
        // Once no daemon holds them open: a busy file system cannot be unmounted.
        for mount in mounts {
            if let unmounter = try? Foreign(["umount", mount]), unmounter.waitForExit(seconds: 10),
                unmounter.process.terminationStatus == 0
            {
                continue
            }
            XCTFail("cannot unmount the test's file system at \(mount)")
        }
        try? FileManager.default.removeItem(atPath: directory)
    }

    /// A folder of the lab with a tmpfs of `size` (as mount's `size=`: "2m") mounted on it,
    /// unmounted when the lab goes (after its daemons); skips the test where this machine
    /// cannot mount one.
    func smallDisk(_ relative: String, size: String) throws -> String {
        let folder = path(relative)
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        let mounter = try Foreign(["mount", "-t", "tmpfs", "-o", "size=\(size)", "tmpfs", folder])
        guard mounter.waitForExit(seconds: 10), mounter.process.terminationStatus == 0 else {
            throw XCTSkip("cannot mount a tmpfs here: \(mounter.output)")
        }
        mounts.append(folder)
        return folder
    }

    func path(_ relative: String) -> String { (directory as NSString).appendingPathComponent(relative) }

    /// A unique service name (mDNS caches outlive a test).
    static func uniqueName(_ base: String) -> String { "\(base) \(UUID().uuidString.prefix(6))" }

    /// Starts `peerxfer serve` and waits for its "serving" line.
    @discardableResult
    func serve(
        name: String, config: String, inbox: String, accept: String = "all", extra: [String] = []
    ) throws -> Foreign {
        let daemon = try Foreign(
            [
                Self.binary, "serve", "--name", name, "--config", path(config), "--inbox", inbox,
                "--accept", accept,
            ] + extra)
        daemons.append(daemon)
        guard daemon.waitForOutput(containing: "serving", seconds: 20) else {
            throw DeadlineExceeded(what: "peerxfer serve (output: \(daemon.output))", seconds: 20)
        }
        return daemon
    }

    /// Runs `peerxfer ARGS` to its end (at most `seconds`) and returns its status and output.
    func run(_ arguments: [String], seconds: Double = 60) throws -> (status: Int32, output: String) {
        let process = try Foreign([Self.binary] + arguments)
        let output = process.finish(seconds: seconds)
        return (process.process.terminationStatus, output)
    }

    /// `peerxfer send PATHS --to NAME --config CONFIG --json`.
    /// `peerxfer send` as a script runs it (JSON lines); `trusting` says what to trust of a
    /// receiver new to `config` (the transfer tests are not about pairing: by default the key
    /// that answers first, as `--accept-new-key`; the trust tests give their own).
    func send(
        _ paths: [String], to name: String, config: String, seconds: Double = 60,
        trusting: [String] = ["--accept-new-key"]
    ) throws -> (status: Int32, output: String) {
        try run(["send"] + paths + ["--to", name, "--config", path(config), "--json"] + trusting, seconds: seconds)
    }

    /// The key of the configuration `config` (made now if it has none), from `peerxfer identity`.
    /// `peerxfer status` of configuration `config`, once it shows `text` or 20 s have passed
    /// (the daemon writes its status file behind its log).
    func status(of config: String, once text: String) throws -> String {
        var shown = ""
        try eventually(timeout: 20, interval: 0.1) {
            shown = try run(["status", "--config", path(config)]).output
            return shown.contains(text)
        }
        return shown
    }

    func key(ofConfig config: String) throws -> String {
        let (status, output) = try run(["identity", "--config", path(config), "--json"])
        guard status == 0, let range = output.range(of: "\"key\":\"") else {
            throw NSError(
                domain: "PeerXferLab", code: 1, userInfo: [NSLocalizedDescriptionKey: "identity failed: \(output)"])
        }
        return String(output[range.upperBound...].prefix(64))
    }

    /// Where the sender of configuration `config` sends `file` (a path relative to the lab,
    /// in a receiver's inbox) while it arrives: its part file.
    func partPath(_ file: String, sentWith config: String) throws -> String {
        let url = URL(fileURLWithPath: path(file))
        return url.deletingLastPathComponent()
            .appendingPathComponent(TransferLimits.partName(of: url.lastPathComponent, from: try key(ofConfig: config)))
            .path
    }

    /// The key a daemon printed on its "serving" line.
    static func key(of daemon: Foreign) -> String {
        guard let range = daemon.output.range(of: "key ") else { return "" }
        return String(daemon.output[range.upperBound...].prefix(64))
    }

    /// Writes `count` pseudo-random bytes (seeded, so reruns write the same file).
    func makeFile(_ relative: String, size count: Int, seed: UInt64 = 1) throws {
        let url = URL(fileURLWithPath: path(relative))
        try FileManager.default.createDirectory(at: url.deletingLastPathComponent(), withIntermediateDirectories: true)
        var state = seed &* 0x9E37_79B9_7F4A_7C15 | 1
        var data = Data(count: count)
        data.withUnsafeMutableBytes { raw in
            let words = raw.bindMemory(to: UInt64.self)
            for i in 0..<words.count {
                state ^= state << 13; state ^= state >> 7; state ^= state << 17
                words[i] = state
            }
            for i in (words.count * 8)..<count { raw[i] = UInt8(truncatingIfNeeded: i) }
        }
        try data.write(to: url)
    }

    static func sameContents(_ a: String, _ b: String) -> Bool {
        guard let x = FileManager.default.contents(atPath: a), let y = FileManager.default.contents(atPath: b) else {
            return false
        }
        return x == y
    }

    /// Every path under `folder`, relative, sorted.
    static func listing(_ folder: String) -> [String] {
        ((FileManager.default.enumerator(atPath: folder)?.allObjects as? [String]) ?? []).sorted()
    }
}
