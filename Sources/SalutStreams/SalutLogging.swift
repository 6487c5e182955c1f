import Logging

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
/// What each level adds:
/// - `.warning`: things Salut accepts but that may not work everywhere (a service type longer
///   than RFC 6335 allows, taken on `.local` as mDNSResponder takes it), an unreachable daemon.
/// - `.notice`: name collisions, TLS peers refused.
/// - `.info`: services published.
/// - `.debug`: the daemon's state, resolver results, failed connection attempts, TLS peers
///   trusted.
/// - `.trace`: each connection attempt (every address Happy Eyeballs tries).
///
/// Messages quote names from the network (service and host names): a handler that writes to a
/// terminal should escape control characters.
public enum SalutLogging {
    private static let current = Locked(Logger(label: "salut", factory: { _ in SwiftLogNoOpLogHandler() }))

    /// The logger every Salut module writes to; a no-op logger until set. Safe to set from any
    /// thread at any time (messages already under way go to the logger they started with).
    public static var logger: Logger {
        get { current.withLock { $0 } }
        set { current.withLock { $0 = newValue } }
    }
}
