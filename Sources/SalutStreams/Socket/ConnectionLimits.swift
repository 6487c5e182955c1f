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
/// Timeouts are in seconds; `nil`, zero, a negative value or NaN means no bound, and values
/// above a billion seconds count as a billion.
public struct ConnectionLimits: Sendable, Hashable {
    /// Seconds an accepted TLS connection has, from the moment it is accepted, to finish its
    /// handshake (and the trust decision). Default 10.
    public var handshakeTimeout: TimeInterval? = 10

    /// Seconds an accepted connection has, from the moment it is accepted, to carry its first
    /// byte: the peer's first byte (or the end of its data), or one written by this side. A
    /// server that speaks first is therefore never cut by it. Default 10; set `nil` for a
    /// protocol whose clients may stay silent while the server has nothing to say.
    public var firstByteTimeout: TimeInterval? = 10

    /// Seconds a connection may go with no byte moving either way before it is cut; counted
    /// once the connection is set up. Default `nil` (no bound).
    public var idleTimeout: TimeInterval?

    /// How many accepted connections may be in their set-up (the handshake and the first byte
    /// above) at once. When one more arrives, the connection that has been setting up longest
    /// is cut to make room: a flood of silent peers cannot keep a prompt one out. The listener
    /// keeps accepting meanwhile. Default 64; values below 1 count as 1.
    public var maximumConnectionsSettingUp: Int = 64

    /// The defaults: 10 s for the handshake and the first byte, no idle bound, 64 connections
    /// setting up at once.
    public init() {}

    /// Limits with the given values; the ones left out keep their defaults.
    public init(handshakeTimeout: TimeInterval? = 10, firstByteTimeout: TimeInterval? = 10, idleTimeout: TimeInterval? = nil,
                maximumConnectionsSettingUp: Int = 64) {
        self.handshakeTimeout = handshakeTimeout
        self.firstByteTimeout = firstByteTimeout
        self.idleTimeout = idleTimeout
        self.maximumConnectionsSettingUp = maximumConnectionsSettingUp
    }

    /// A timeout as a duration, or nil for no bound (nil, NaN, zero or negative).
    static func duration(_ seconds: TimeInterval?) -> Duration? {
        guard let seconds, !seconds.isNaN, seconds > 0 else { return nil }
        return .milliseconds(Int64(min(seconds, 1e9) * 1000))
    }
}
