/// When a connection has waited too long for its peer: the TLS handshake, the first byte, and
/// silence once it is set up. A value without I/O or clocks of its own: the pump's shell passes
/// the time in, arms one timer at ``nextCheck``, and asks ``expired(at:)`` when it fires.
///
/// A connection is *set up* once its handshake (if any) is done and one byte has moved either
/// way (or the peer ended its data). Until then the handshake and first-byte bounds apply, both
/// counted from the start; after it, the idle bound, counted from the last byte moved.
struct ConnectionDeadlines: Equatable {
    typealias Instant = ContinuousClock.Instant

    private let handshakeLimit: Duration?
    private let firstByteLimit: Duration?
    private let idleLimit: Duration?
    private(set) var handshakeDeadline: Instant?
    private(set) var firstByteDeadline: Instant?
    private(set) var lastActivity: Instant
    private(set) var handshaking: Bool
    private(set) var carriedAByte = false
    /// The bound of the handshake under way when it was given one of its own.
    private var upgradeLimit: Duration?

    /// Deadlines for a connection that starts at `now`; `secure` when it starts with a handshake.
    init(handshake: Duration?, firstByte: Duration?, idle: Duration?, secure: Bool, now: Instant) {
        handshakeLimit = handshake
        firstByteLimit = firstByte
        idleLimit = idle
        handshaking = secure
        handshakeDeadline = secure ? handshake.map { now + $0 } : nil
        firstByteDeadline = firstByte.map { now + $0 }
        lastActivity = now
    }

    /// True once the handshake is done and a byte has moved.
    var isSetUp: Bool { !handshaking && carriedAByte }

    /// The handshake finished. Returns true when this completes the set-up.
    mutating func handshakeFinished(at now: Instant) -> Bool {
        guard handshaking else { return false }
        handshaking = false
        handshakeDeadline = nil
        upgradeLimit = nil
        lastActivity = now
        return isSetUp
    }

    /// A handshake starts on a connection already carrying bytes (an upgrade to TLS): bounded
    /// by `limit` (or, when nil, the handshake limit) from `now`.
    mutating func handshakeStarted(at now: Instant, limit: Duration? = nil) {
        handshaking = true
        upgradeLimit = limit
        handshakeDeadline = (limit ?? handshakeLimit).map { now + $0 }
    }

    /// Bytes moved (either way) or the peer ended its data. Returns true when this completes
    /// the set-up.
    mutating func carried(at now: Instant) -> Bool {
        lastActivity = now
        guard !carriedAByte else { return false }
        carriedAByte = true
        firstByteDeadline = nil
        return isSetUp
    }

    /// The next instant at which a bound may have passed (nil: none can).
    var nextCheck: Instant? {
        let idleDeadline = handshaking ? nil : idleLimit.map { lastActivity + $0 }
        return [handshakeDeadline, firstByteDeadline, idleDeadline].lazy.compactMap { $0 }.min()
    }

    /// What has passed at `now`, if anything, as the error that cuts the connection.
    func expired(at now: Instant) -> SocketStreamError? {
        if let handshakeDeadline, now >= handshakeDeadline, let limit = upgradeLimit ?? handshakeLimit {
            return .limitExceeded("the TLS handshake did not finish within \(Self.seconds(limit))")
        }
        if let firstByteDeadline, now >= firstByteDeadline, let limit = firstByteLimit {
            return .limitExceeded("no data within \(Self.seconds(limit)) of connecting")
        }
        if !handshaking, let idleLimit, now >= lastActivity + idleLimit {
            return .limitExceeded("idle for \(Self.seconds(idleLimit))")
        }
        return nil
    }

    private static func seconds(_ duration: Duration) -> String {
        let (whole, atto) = duration.components
        if atto == 0 { return "\(whole) s" }
        return "\(Double(whole) + Double(atto) / 1e18) s"
    }
}
