import Logging
import Synchronization

/// Where Salut's libraries log: what a user debugging a LAN wants to see, through swift-log.
///
/// Silent until an application sets ``logger``: a library must not write to a program's
/// terminal on its own. To see what Salut does, hand it a logger of your logging system:
///
/// ```swift
/// LoggingSystem.bootstrap(StreamLogHandler.standardError)
/// var logger = Logger(label: "salut")
/// logger.logLevel = .debug
/// SalutLogging.logger = logger
/// ```
///
/// Messages at `.warning` are things Salut accepts but that may not work everywhere (a service
/// type longer than RFC 6335 allows, taken on `.local` as mDNSResponder takes it).
public enum SalutLogging {
    private static let current = Mutex(Logger(label: "salut", factory: { _ in SwiftLogNoOpLogHandler() }))

    /// The logger every Salut module writes to; a no-op logger until set. Safe to set from any
    /// thread at any time (messages already under way go to the logger they started with).
    public static var logger: Logger {
        get { current.withLock { $0 } }
        set { current.withLock { $0 = newValue } }
    }
}
