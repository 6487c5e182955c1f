import SalutStreams
import Glibc

/// A pipe whose read end a thread blocked in `poll(2)` watches, so that a cancelled task can
/// wake it: the thread cannot see task cancellation, a readable descriptor it can.
final class CancelPipe: Sendable {
    private let ends: Locked<(read: Int32, write: Int32)?>

    /// A new pipe, or nil when the system has no descriptor left.
    init?() {
        var fds: [Int32] = [-1, -1]
        guard pipe(&fds) == 0 else { return nil }
        ends = Locked((fds[0], fds[1]))
    }

    /// The end to poll for reading (-1 once closed: `poll` ignores it).
    var readEnd: Int32 { ends.withLock { $0?.read ?? -1 } }

    /// Makes the read end readable; nothing once closed.
    func wake() {
        ends.withLock { ends in
            guard let ends else { return }
            var byte: UInt8 = 1
            _ = write(ends.write, &byte, 1)
        }
    }

    /// Closes both ends; call it once nothing polls the read end any more.
    func close() {
        ends.withLock { ends in
            guard let open = ends else { return }
            Glibc.close(open.read)
            Glibc.close(open.write)
            ends = nil
        }
    }
}
