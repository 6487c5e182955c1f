import Glibc

/// A signal that ends a foreground send: it says how to resume, then exits with 128 + its number.
enum StopSignal: CaseIterable, Sendable {
    /// Ctrl-C.
    case interrupt
    /// `kill`, systemd, a supervisor stopping the job.
    case terminate
    /// The terminal went away.
    case hangUp

    /// The signal's number.
    var number: Int32 {
        switch self {
        case .interrupt: SIGINT
        case .terminate: SIGTERM
        case .hangUp: SIGHUP
        }
    }

    /// The signal's name, as `kill -l` spells it with its prefix.
    var name: String {
        switch self {
        case .interrupt: "SIGINT"
        case .terminate: "SIGTERM"
        case .hangUp: "SIGHUP"
        }
    }
}
