import Foundation

/// A TCP socket bound to a free port on 127.0.0.1 and not listening: close it and the port
/// refuses connections (a service whose app is not there); call `listen` on it and the kernel
/// accepts connections nobody serves (a peer that never speaks).
/// - Returns: the descriptor (the caller closes it) and the port; nil when either call failed.
public func boundLoopbackSocket() -> (fd: Int32, port: Int)? {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard fd >= 0 else { return nil }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    let bound = withUnsafeMutablePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
            bind(fd, $0, length) == 0 && getsockname(fd, $0, &length) == 0
        }
    }
    guard bound else {
        close(fd)
        return nil
    }
    return (fd, Int(UInt16(bigEndian: address.sin_port)))
}
