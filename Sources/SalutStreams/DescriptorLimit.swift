import Glibc

/// The process's limit on open descriptors, for servers (`netsvc publish --listen`,
/// `peerxfer serve`): each connection holds a socket and more (pipes, part files), and the usual
/// soft limit of 1,024 would stop a server well before its own bounds do.
public enum DescriptorLimit {
    /// Raises the soft limit on open descriptors to the hard limit.
    /// - Returns: nil when it is raised (or already there), else why it could not be.
    public static func raiseToHardLimit() -> String? {
        var limit = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 else {
            return "cannot read the descriptor limit: \(String(cString: strerror(errno)))"
        }
        guard limit.rlim_cur < limit.rlim_max else { return nil }
        limit.rlim_cur = limit.rlim_max
        guard setrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 else {
            return "cannot raise the descriptor limit: \(String(cString: strerror(errno)))"
        }
        return nil
    }
}
