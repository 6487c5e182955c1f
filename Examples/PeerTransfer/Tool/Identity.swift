import ArgumentParser
import Foundation
import PeerTransferCore

/// `peerxfer identity`: this device's key, for a receiver to trust.
struct Identity: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Print this device's key fingerprint (made on first use), to pair with other devices.",
        discussion:
            "Senders pair with this device by its key: `peerxfer trust --pin NAME KEY` or `peerxfer send --expect-key KEY`; a receiver that runs --accept known trusts this device as a sender with `peerxfer trust KEY`. Read the key here and type or paste it there: a key learned from the network could be anyone's."
    )

    @Option(
        help: ArgumentHelp(
            "Set this device's name (what senders see of it, and receivers of what it sends), kept for later commands; default: the host name.",
            valueName: "name"))
    var name: String?

    @OptionGroup var config: ConfigOptions

    @Flag(help: "As a JSON object.")
    var json = false

    func validate() throws {
        if let name { try PeerNameRule.check(name, option: "--name") }
    }

    func run() async throws {
        var configuration = try config.load()
        if let name { try configuration.keepName(name) }
        if json {
            printJSON([
                "key": configuration.identity.publicKeySHA256, "device": configuration.deviceID,
                "name": configuration.deviceName,
                "certificate": configuration.identity.certificateFile,
            ])
        } else {
            printLine(
                "name \"\(Terminal.escape(configuration.deviceName).replacingOccurrences(of: "\"", with: "\\\""))\" (change it with: peerxfer identity --name NAME)"
            )
            printLine("key \(configuration.identity.publicKeySHA256)")
            printLine("device \(configuration.deviceID)")
            printLine(
                "(a sender pairs with this device by: peerxfer trust --pin NAME \(configuration.identity.publicKeySHA256))"
            )
            printLine(
                "(a receiver that runs --accept known trusts it as a sender by: peerxfer trust \(configuration.identity.publicKeySHA256))"
            )
        }
    }
}
