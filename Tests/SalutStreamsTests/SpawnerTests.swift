import Foundation
import Glibc
import SalutTestSupport
import SalutTools
import XCTest

/// The tools' one process spawner (`netsvc publish --exec`, `peerxfer serve --hook`, the tests'
/// children): what a started program gets, and what it does not.
final class SpawnerTests: XCTestCase {
    /// Runs `script` under `/bin/sh` with `options` (its output through a pipe); returns what it
    /// printed and its pid.
    private func run(_ script: String, _ tweak: (inout Spawner.Options) -> Void = { _ in }) throws -> (String, pid_t) {
        let output = try Spawner.pipe()
        var options = Spawner.Options()
        options.standardOutput = output.write
        tweak(&options)
        let pid: pid_t
        do {
            pid = try Spawner.spawn(["/bin/sh", "-c", script], options)
        } catch {
            close(output.read); close(output.write)
            throw error
        }
        close(output.write)
        var printed = Data()
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let n = read(output.read, &buffer, buffer.count)
            if n > 0 { printed.append(contentsOf: buffer[0..<n]); continue }
            if n < 0 && errno == EINTR { continue }
            break
        }
        close(output.read)
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        return (String(decoding: printed, as: UTF8.self), pid)
    }

    func testTheChildGetsNoDescriptorOfOursBeyondItsThree() throws {
        // A descriptor without close-on-exec, as a library might leave one.
        let kept = dup(2)
        XCTAssertGreaterThan(kept, 2)
        let leaky = fcntl(kept, F_DUPFD, 40)
        close(kept)
        XCTAssertGreaterThanOrEqual(leaky, 40)
        defer { close(leaky) }
        XCTAssertEqual(fcntl(leaky, F_GETFD) & FD_CLOEXEC, 0)
        let (printed, _) = try run(
            "test -e /proc/$$/fd/\(leaky) && echo leaked || echo closed; test -e /proc/$$/fd/1 && echo out")
        XCTAssertEqual(printed, "closed\nout\n")
    }

    func testTheChildHasNoBlockedOrIgnoredSignalAndMayLeadItsGroup() throws {
        // Shell builtins only: while the shell waits for a child of its own it may block signals
        // itself (dash does), and a child reading the shell's status would see that.
        let script = [
            "while read -r field value rest; do",
            "case $field in SigBlk:|SigIgn:) printf '%s\\t%s\\n' \"$field\" \"$value\";; esac",
            "done < /proc/$$/status",
            "read -r stat < /proc/$$/stat; set -- $stat; printf 'pgid %s\\n' \"$5\"",
        ].joined(separator: "\n")
        let (printed, pid) = try run(script) {
            $0.leadsProcessGroup = true
        }
        // The standard signals, 1 to 31 (glibc keeps its two internal real-time signals, 32 and
        // 33, out of reach of posix_spawn).
        func mask(_ field: String) -> UInt64? {
            printed.split(separator: "\n").first { $0.hasPrefix(field + ":") }
                .flatMap { UInt64($0.split(separator: "\t").last ?? "", radix: 16) }
        }
        XCTAssertEqual(mask("SigBlk").map { $0 & 0x7fff_ffff }, 0, printed)
        XCTAssertEqual(mask("SigIgn").map { $0 & 0x7fff_ffff }, 0, printed)
        XCTAssertTrue(printed.contains("pgid \(pid)\n"), "it leads a group of its own: \(printed)")
    }

    func testTheEnvironmentIsTheOneGivenAndAMissingProgramIsNamed() throws {
        let (printed, _) = try run("echo \"[$SALUT_SPAWN_TEST][${HOME-unset}]\"") {
            $0.environment = ["SALUT_SPAWN_TEST": "given"]
        }
        XCTAssertEqual(printed, "[given][unset]\n", "only what it was given")
        XCTAssertThrowsError(try Spawner.spawn(["/nonexistent/program"], Spawner.Options())) { error in
            XCTAssertTrue("\(error)".contains("cannot start /nonexistent/program"), "\(error)")
        }
    }
}
