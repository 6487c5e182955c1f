import Foundation
import SalutStreams

extension Stream {
    /// Apple's `getStreamsToHost(withName:port:inputStream:outputStream:)`: unopened streams that
    /// connect to `hostname` (dotted IPv4, an IPv6 literal with optional `%interface` scope, a
    /// DNS name, or a `.local` name resolved through the avahi-daemon) when first opened.
    ///
    /// Addresses are tried the Happy Eyeballs way (IPv6 first, IPv4 250 ms later, first to connect
    /// wins). Failures arrive as `errorOccurred` with a `SocketStreamError` as `streamError`.
    public class func getStreamsToHost(
        withName hostname: String, port: Int,
        inputStream: UnsafeMutablePointer<InputStream?>?,
        outputStream: UnsafeMutablePointer<OutputStream?>?
    ) {
        let pair = SocketStreams.pair(toHost: hostname, port: port, resolver: discoveryResolver)
        inputStream?.pointee = pair.input
        outputStream?.pointee = pair.output
    }
}

/// CFNetwork's spelling of `Stream.getStreamsToHost(withName:port:inputStream:outputStream:)`:
/// an unopened pair of streams to `host` and `port`, returned retained, as CoreFoundation's
/// "Create" rule says (take them with `takeRetainedValue()`; each is an `InputStream` or
/// `OutputStream`). Set TLS on them with `CFReadStreamSetProperty` or `setProperty` before
/// opening; open them with `CFReadStreamOpen` and `CFWriteStreamOpen` or `open()`. A nil host
/// gives no streams.
public func CFStreamCreatePairWithSocketToHost(
    _ alloc: CFAllocator?,
    _ host: CFString?,
    _ port: UInt32,
    _ readStream: UnsafeMutablePointer<Unmanaged<CFReadStream>?>?,
    _ writeStream: UnsafeMutablePointer<Unmanaged<CFWriteStream>?>?
) {
    guard let host else {
        storeCreatedPair(input: nil, output: nil, in: readStream, writeStream)
        return
    }
    var input: InputStream?
    var output: OutputStream?
    Stream.getStreamsToHost(
        withName: String(describing: host), port: Int(port), inputStream: &input, outputStream: &output)
    storeCreatedPair(input: input, output: output, in: readStream, writeStream)
}

/// `getaddrinfo` for everything but `.local` names, which go to Avahi (the system resolver
/// often has no mDNS).
let discoveryResolver: AddressResolver = DiscoveryContext.shared.addressResolver

extension DiscoveryContext {
    /// Resolves host names for socket streams: `.local` names through this context's
    /// avahi-daemon, everything else with `getaddrinfo`.
    package var addressResolver: AddressResolver {
        { [self] host, port in
            let bare = host.hasSuffix(".") ? String(host.dropLast()) : host
            guard bare.lowercased().hasSuffix(".local") else {
                return try await SocketStreams.systemResolver(host, port)
            }
            do {
                return try await addresses(ofHost: bare, timeout: 5).map { address in
                    address.isIPv6
                        ? SocketAddress(ipv6: address.rawBytes, port: port, scopeID: address.scopeID)
                        : SocketAddress(ipv4: address.rawBytes, port: port)
                }
            } catch {
                throw SocketStreamError.nameNotFound(host, detail: "\(error)")
            }
        }
    }
}
