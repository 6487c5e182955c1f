/// The slowest a receiver lets an accepted transfer go: once `grace` has passed since the
/// answer, the file bytes it has received (or found already there) must average `minimumRate`
/// over the time past the grace. A sender that trickles data, or sends frames without file
/// bytes, to keep its slot and the free space promised to it is cut with a
/// ``PeerTransferError/limit(_:)``; silence alone is cut earlier by the idle bound.
public struct TransferPace: Sendable {
    /// Bytes per second the transfer must average; 0: no bound.
    public var minimumRate: UInt64
    /// Time allowed on top (set-up, a slow start, disks that pause).
    public var grace: Duration
    /// How long a sender may make no progress at all before its connection is dropped.
    public var idleBound: Duration

    /// 64 KiB/s after 120 s by default: far below any LAN, far above a trickle; 60 s of
    /// silence at most.
    public init(minimumRate: UInt64 = 64 * 1024, grace: Duration = .seconds(120), idleBound: Duration = .seconds(60)) {
        self.minimumRate = minimumRate
        self.grace = grace
        self.idleBound = idleBound
    }

    /// True when a transfer answered at `start` that has moved `bytes` of file data by `now`
    /// goes too slowly to keep.
    func isTooSlow(bytes: UInt64, since start: ContinuousClock.Instant, now: ContinuousClock.Instant) -> Bool {
        guard minimumRate > 0 else { return false }
        let past = now - start - grace
        guard past > .zero else { return false }
        let seconds = Double(past.components.seconds) + Double(past.components.attoseconds) / 1e18
        return Double(bytes) < Double(minimumRate) * seconds
    }

    /// What the sender is told when its transfer is cut.
    var refusal: String {
        "the transfer is too slow: this receiver needs at least \(minimumRate) bytes per second on average (after \(grace.components.seconds) s) to keep it"
    }
}
