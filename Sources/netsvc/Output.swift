import Foundation
import Glibc

/// netsvc's own lines on stdout and stderr, written with `write(2)` (Foundation's
/// `FileHandle.write` traps on an error, and netsvc ignores SIGPIPE, so a closed pipe would be
/// a crash).
enum Output {
    /// Writes `text` to stdout. When the reader has gone (`netsvc browse | head -1`), netsvc
    /// ends as a program killed by SIGPIPE does: quietly, with the status shells expect.
    static func standardOutput(_ text: String) {
        guard write(Data(text.utf8), to: 1) == EPIPE else { return }
        endAsBrokenPipe()
    }

    /// Ends netsvc as SIGPIPE would have (stdout's reader is gone; there is no one to tell).
    static func endAsBrokenPipe() -> Never {
        signal(SIGPIPE, SIG_DFL)
        raise(SIGPIPE)
        exit(128 + SIGPIPE)  // not reached
    }

    /// Writes `text` to stderr; a stderr that cannot be written to is ignored (there is
    /// nowhere left to say so).
    static func standardError(_ text: String) {
        _ = write(Data(text.utf8), to: 2)
    }

    /// Writes all of `data`; 0, or the errno that stopped it.
    private static func write(_ data: Data, to fd: Int32) -> Int32 {
        data.withUnsafeBytes { raw in
            var offset = 0
            while offset < raw.count {
                let n = Glibc.write(fd, raw.baseAddress! + offset, raw.count - offset)
                if n > 0 { offset += n; continue }
                if n < 0 && errno == EINTR { continue }
                return n < 0 ? errno : EIO
            }
            return 0
        }
    }
}
