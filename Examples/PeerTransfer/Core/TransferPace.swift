/// The slowest a receiver lets an accepted transfer go: it must be done within `grace` plus the
/// time its promised bytes take at `minimumRate`. A sender that trickles data to keep its slot
/// and the free space promised to it is cut with a ``PeerTransferError/limit(_:)``; silence
/// alone is cut earlier by the idle bound.
public struct TransferPace: Sendable {
    /// Bytes per second the transfer must average; 0: no bound.
    public var minimumRate: UInt64
    /// Time allowed on top (set-up, a slow start, disks that pause).
    public var grace: Duration

    /// 64 KiB/s after 120 s by default: far below any LAN, far above a trickle.
    public init(minimumRate: UInt64 = 64 * 1024, grace: Duration = .seconds(120)) {
        self.minimumRate = minimumRate
        self.grace = grace
    }

    /// When a transfer of `bytes` answered at `start` must be done, or nil without a bound.
    func deadline(for bytes: UInt64, from start: ContinuousClock.Instant) -> ContinuousClock.Instant? {
        guard minimumRate > 0 else { return nil }
        return start + grace + .seconds(Double(bytes) / Double(minimumRate))
    }

    /// What the sender is told when its transfer is cut.
    var refusal: String {
        "the transfer is too slow: this receiver needs at least \(minimumRate) bytes per second on average (after \(grace.components.seconds) s) to keep it"
    }
}
