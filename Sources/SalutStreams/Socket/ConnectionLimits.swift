import Foundation

/// Bounds on what a peer may make an accepted connection wait for, and how many connections a
/// listener sets up at once: a LAN peer that connects and then says nothing must not hold a
/// service's descriptors, memory or accept loop for as long as it likes.
///
/// ```swift
/// var limits = ConnectionLimits()
/// limits.idleTimeout = 300          // cut connections silent for 5 minutes
/// let listener = try StreamListener(port: 0, tls: tls, limits: limits)
/// ```
///
/// A connection cut by a limit fails with ``SocketStreamError/limitExceeded(_:)``; its streams
/// report that error (or, if they were never opened, the connection is simply closed).
/// Timeouts are in seconds; `nil` means no bound. A value that is not a usable bound (NaN, zero,
/// negative) takes the default instead, so a bad setting never turns a bound off; values above
/// a billion seconds count as a billion.
public struct ConnectionLimits: Sendable, Hashable {
    /// The default handshake and first-byte bound: 10 s.
    public static let defaultSetUpTimeout: TimeInterval = 10
    /// The default cap on connections setting up at once: 64.
    public static let defaultMaximumConnectionsSettingUp = 64

    /// Seconds an accepted TLS connection has, from the moment it is accepted, to finish its
    /// handshake (the trust decision that follows is not counted). Default 10.
    public var handshakeTimeout: TimeInterval?

    /// Seconds an accepted connection has, from the moment it is accepted, to carry its first
    /// byte: the peer's first byte (or the end of its data), or one written by this side. A
    /// server that speaks first is therefore never cut by it. Default 10; set `nil` for a
    /// protocol whose clients may stay silent while the server has nothing to say.
    public var firstByteTimeout: TimeInterval?

    /// Seconds a connection may go with no byte moving either way before it is cut, counted
    /// from the accept (after the handshake, with TLS) and from each byte after. Default `nil`
    /// (no bound).
    public var idleTimeout: TimeInterval?

    /// How many accepted connections may be setting up (the handshake and the first byte
    /// above) at once. When one more arrives, the oldest connection of the address with the
    /// most setting up is cut to make room: a flood of silent peers cannot keep a prompt one
    /// out, and one address flooding cuts its own. The listener keeps accepting meanwhile. Default 64; values below 1 count as 1.
    public var maximumConnectionsSettingUp: Int

    /// Limits with the given values; those left out keep their defaults (10 s for the
    /// handshake and the first byte, no idle bound, 64 connections setting up at once).
    public init(
        handshakeTimeout: TimeInterval? = defaultSetUpTimeout, firstByteTimeout: TimeInterval? = defaultSetUpTimeout,
        idleTimeout: TimeInterval? = nil, maximumConnectionsSettingUp: Int = defaultMaximumConnectionsSettingUp
    ) {
        self.handshakeTimeout = handshakeTimeout
        self.firstByteTimeout = firstByteTimeout
        self.idleTimeout = idleTimeout
        self.maximumConnectionsSettingUp = maximumConnectionsSettingUp
    }

    /// A timeout as a duration: nil for no bound; NaN, zero or negative give `fallback`.
    static func duration(_ seconds: TimeInterval?, default fallback: TimeInterval = defaultSetUpTimeout) -> Duration? {
        guard let seconds else { return nil }
        let usable = seconds.isNaN || seconds <= 0 ? fallback : min(seconds, 1e9)
        return .milliseconds(Int64(usable * 1000))
    }

    /// The deadlines of a connection starting now with these limits.
    func deadlines(secure: Bool, now: ContinuousClock.Instant) -> ConnectionDeadlines {
        ConnectionDeadlines(
            handshake: Self.duration(handshakeTimeout), firstByte: Self.duration(firstByteTimeout),
            idle: Self.duration(idleTimeout), secure: secure, now: now)
    }
}
