import ArgumentParser
import Foundation
import PeerTransferCore

/// `peerxfer identity`: this device's key, for a receiver to trust.
struct Identity: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Print this device's key fingerprint (made on first use), for `peerxfer trust` on a receiver."
    )

    @OptionGroup var config: ConfigOptions

    @Flag(help: "As a JSON object.")
    var json = false

    func run() async throws {
        let configuration = try config.load()
        if json {
            printJSON(["key": configuration.identity.publicKeySHA256, "device": configuration.deviceID,
                       "certificate": configuration.identity.certificateFile])
        } else {
            printLine("key \(configuration.identity.publicKeySHA256)")
            printLine("device \(configuration.deviceID)")
            printLine("(on a receiver that runs --accept known: peerxfer trust \(configuration.identity.publicKeySHA256))")
        }
    }
}
