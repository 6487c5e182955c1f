import SalutStreams

// What AdvertisedPeers tells its caller of the peers it refuses.

extension AdvertisedPeers {
    /// Why ``AdvertisedPeers/connect(to:tls:bufferSize:resolveTimeout:context:)`` refused a service for its
    /// key. Compare ``code``; new codes may be added in minor releases.
    public struct Refusal: Error, Sendable, CustomStringConvertible {
        /// The kind of a ``Refusal``.
        public struct Code: Hashable, Sendable, CustomStringConvertible {
            private let name: String
            private init(_ name: String) { self.name = name }
            public var description: String { name }
            /// The service's key is another than the one the book trusts for its name.
            public static let keyChanged = Code("keyChanged")
            /// The service's key is this end's own.
            public static let ownKey = Code("ownKey")
            /// The service's key is one the book trusts under another name (``Refusal/otherName``).
            public static let anotherNamesKey = Code("anotherNamesKey")
            /// The service's key, trusted for no name yet, is advertised by another listed
            /// service too (``Refusal/otherName``): neither is trusted, whichever is real.
            public static let sharedKey = Code("sharedKey")
        }
        /// What was refused.
        public let code: Code
        /// The service refused.
        public let service: DiscoveredService
        /// The key the service advertised or proved (64 lower-case hex digits).
        public let key: String
        /// For ``Code/keyChanged``: the key the book trusts for the service's name.
        public let trustedKey: String?
        /// For ``Code/anotherNamesKey``: the name the book trusts the key under; for
        /// ``Code/sharedKey``: the other name advertising it.
        public let otherName: String?
        /// For ``Code/keyChanged``: the book's file, from which the old key can be removed.
        public let bookPath: String?

        /// What is wrong with the service (to follow its name), and for a changed key what to do,
        /// escaped for a terminal.
        public var description: String {
            if code == .keyChanged {
                return
                    "it now advertises TLS key \(key), not the one trusted for its name (\(trustedKey ?? "none")); once its owner confirms the new key, remove \"\(TerminalText.escaped(service.name))\" from \(TerminalText.escaped(bookPath ?? "the book"))"
            }
            if code == .ownKey { return "its key is this end's own" }
            if code == .anotherNamesKey {
                return "its key is the one trusted for \(TerminalText.escaped(otherName ?? "another name"))"
            }
            if code == .sharedKey {
                return
                    "its key is advertised by \(TerminalText.escaped(otherName ?? "another name")) too: neither is trusted while both claim it"
            }
            return "its key \(key) is refused (\(code))"
        }
    }

    /// A report of clients ``AdvertisedPeers/clientEvaluator(waitingUpTo:reportingAtMostEvery:refused:)`` refused: one client's key,
    /// and how many others were refused since the last report (reports come at most once per
    /// the evaluator's interval, a second by default).
    public struct RefusedClients: Sendable, CustomStringConvertible {
        /// The key of the client refused (SHA-256, 64 lower-case hex digits).
        public let key: String
        /// How many other clients were refused since the last report, not reported one by one.
        public let othersSinceLastReport: Int

        /// One line for a person.
        public var description: String {
            let others =
                othersSinceLastReport == 0 ? "" : " (and \(othersSinceLastReport) other clients since the last report)"
            return
                "refused a client with key \(key): no peer is trusted with it, and no new peer advertises it (a known peer whose key changed is refused until its old entry is removed from the book)\(others)"
        }
    }
}
