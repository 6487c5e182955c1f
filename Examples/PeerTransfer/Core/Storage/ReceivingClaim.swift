import Foundation

/// A small file's claim on its path for its sender (see ``Inbox/claim(_:for:)``), given back
/// when the last copy of the file that holds it goes: once its batch is published, or when its
/// transfer ends without publishing it.
final class ReceivingClaim: Sendable {
    private let inbox: Inbox
    private let key: [UInt8]

    init(inbox: Inbox, key: [UInt8]) {
        self.inbox = inbox
        self.key = key
    }

    deinit { inbox.release(key) }
}
