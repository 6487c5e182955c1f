import Foundation
import SalutStreams

/// Reads frames from a connection's input (owned by one task).
///
/// `@unchecked Sendable`: a reader is used by one task at a time, and handed whole (a value)
/// from one to the next: the receiving task lends it to the task that watches the connection
/// while an offer is decided, and takes it back, with what it read, once that task ended. Its
/// stream is safe to read from one thread at a time. Its copies share its scratch space, which
/// its decoder may still be taking frames from (see ``FrameDecoder/lend(_:)``): once a copy has
/// read, only that copy may be used.
struct FrameReader: @unchecked Sendable {
    /// Bytes taken from the connection at a time.
    static let readSize = 256 * 1024
    /// Bytes of a chunk's payload waited for before the reader wakes (fewer at the payload's
    /// end, or when the stream ends): below the connection's buffer size, so the socket can
    /// fill the next block while this one is taken.
    static let wakeSize = 256 * 1024

    private var decoder = FrameDecoder()
    private let input: InputStream
    private let scratch = Scratch()

    init(_ input: InputStream) {
        self.input = input
    }

    /// The next frame; nil when the peer ended the stream cleanly between frames. `admit`
    /// judges each frame from its header (kind and payload length), before its payload is read.
    /// - Throws: the connection's error (a TLS stream cut without close_notify among them),
    ///   ``PeerTransferError/protocolViolation(_:)`` for a stream ending inside a frame or a
    ///   bad frame, ``PeerTransferError/limit(_:)`` for an oversized one; what `admit` throws.
    mutating func next(admitting admit: (Frame.Kind, Int) throws -> Void = { _, _ in }) async throws -> Frame? {
        while true {
            if let frame = try decoder.next(admitting: admit) { return frame }
            // A chunk's payload is read straight into its own memory; anything else into
            // scratch space and taken from there in place (no zero-filled Data per read).
            // A chunk's payload is awaited in blocks of `wakeSize` (or what is left of it),
            // not taken a TLS record at a time: each wake-up of this task costs a thread switch.
            let direct = decoder.directSpace
            let count = try await input.read(into: direct ?? scratch.bytes, atLeast: direct == nil ? 1 : Self.wakeSize)
            guard count > 0 else {
                if decoder.bufferedCount > 0 {
                    throw PeerTransferError.protocolViolation("the connection ended inside a message")
                }
                return nil
            }
            if direct != nil {
                decoder.directlyFilled(count)
            } else {
                // Taken in place: the next read into scratch follows `next` returning nil.
                decoder.lend(UnsafeRawBufferPointer(rebasing: scratch.bytes[0..<count]))
            }
        }
    }

    /// True when bytes of a frame not yet whole were read (a read cancelled now loses them).
    var holdsPartOfAFrame: Bool { decoder.bufferedCount > 0 }

    /// The reader's scratch space, allocated once (a fresh 256 KiB per read cost an mmap and
    /// its page faults).
    ///
    /// `@unchecked Sendable`: used only by the task that owns the reader, one read at a time.
    private final class Scratch: @unchecked Sendable {
        let bytes = UnsafeMutableRawBufferPointer.allocate(byteCount: FrameReader.readSize, alignment: 16)
        deinit { bytes.deallocate() }
    }
}

/// The last moment a connection made progress, and a watchdog that resets it when it stops
/// moving for longer than its bound: every wait on a peer is bounded, the reads and writes in
/// the middle of a transfer included.
final class ProgressWatchdog: Sendable {
    private struct State {
        var lastProgress: ContinuousClock.Instant
        var bound: Duration
        var expired: String?
    }
    private let state: Locked<State>

    init(bound: Duration) {
        state = Locked(State(lastProgress: .now, bound: bound))
    }

    /// Records progress.
    func touch() { state.withLock { $0.lastProgress = .now } }

    /// Records progress and sets a new bound from now on (a longer one while a person decides).
    func touch(bound: Duration) { state.withLock { $0 = State(lastProgress: .now, bound: bound, expired: $0.expired) } }

    /// Why the watchdog reset the connection ("no progress from the sender for 60.0 seconds"),
    /// once it has: the streams then fail only with "not open", which would hide the cause.
    var expired: String? { state.withLock { $0.expired } }

    /// Watches `pair` until the calling task is cancelled; resets the connection after `bound`
    /// without progress (a read or write waiting on its streams then fails, often only as "not
    /// open": ``expired`` keeps the reason).
    func watch(_ pair: BoundStreamPair, what: String) async {
        while !Task.isCancelled {
            let (deadline, bound) = state.withLock { ($0.lastProgress + $0.bound, $0.bound) }
            if deadline <= .now {
                let reason = "no progress \(what) for \(bound)"
                state.withLock { $0.expired = reason }
                pair.reset(.limitExceeded(reason))
                return
            }
            // At most a second at a time: a bound made shorter meanwhile counts at once.
            try? await Task.sleep(until: min(deadline, .now + .seconds(1)), clock: .continuous)
        }
    }
}
