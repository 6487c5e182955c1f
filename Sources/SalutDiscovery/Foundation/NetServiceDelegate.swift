import Foundation

/// Apple's `NetServiceDelegate`: the calls a `NetService` makes as it publishes, resolves,
/// monitors and accepts connections. Every method has an empty default, so implement only what
/// you need (on Apple platforms these are optional Objective-C methods).
///
/// Calls arrive on the run loop the service is scheduled in (the main run loop by default).
public protocol NetServiceDelegate: NSObjectProtocol {
    /// Publishing has started.
    func netServiceWillPublish(_ sender: NetService)
    /// The service is published; `sender.name` is the final name (after any automatic rename).
    func netServiceDidPublish(_ sender: NetService)
    /// Publishing failed; `errorDict[NetService.errorCode]` holds a `NetService.ErrorCode` value.
    func netService(_ sender: NetService, didNotPublish errorDict: [String: NSNumber])
    /// Resolving has started.
    func netServiceWillResolve(_ sender: NetService)
    /// An address was found (called again as more addresses arrive).
    func netServiceDidResolveAddress(_ sender: NetService)
    /// Resolving failed, for example with `timeoutError`.
    func netService(_ sender: NetService, didNotResolve errorDict: [String: NSNumber])
    /// A publish or resolve was stopped.
    func netServiceDidStop(_ sender: NetService)
    /// The TXT record changed while monitoring.
    func netService(_ sender: NetService, didUpdateTXTRecord data: Data)
    /// A client connected to a service published with `.listenForConnections`; the streams are
    /// not yet open.
    func netService(_ sender: NetService, didAcceptConnectionWith inputStream: InputStream, outputStream: OutputStream)
}

extension NetServiceDelegate {
    public func netServiceWillPublish(_ sender: NetService) {}
    public func netServiceDidPublish(_ sender: NetService) {}
    public func netService(_ sender: NetService, didNotPublish errorDict: [String: NSNumber]) {}
    public func netServiceWillResolve(_ sender: NetService) {}
    public func netServiceDidResolveAddress(_ sender: NetService) {}
    public func netService(_ sender: NetService, didNotResolve errorDict: [String: NSNumber]) {}
    public func netServiceDidStop(_ sender: NetService) {}
    public func netService(_ sender: NetService, didUpdateTXTRecord data: Data) {}
    public func netService(
        _ sender: NetService, didAcceptConnectionWith inputStream: InputStream, outputStream: OutputStream
    ) {}
}

/// Apple's `NetServiceBrowserDelegate`: the calls a `NetServiceBrowser` makes as it searches.
/// Every method has an empty default.
///
/// `moreComing` is true while more results of the same batch follow at once (Avahi is still
/// delivering its cache); act on the list when it is false.
public protocol NetServiceBrowserDelegate: NSObjectProtocol {
    /// A search has started.
    func netServiceBrowserWillSearch(_ browser: NetServiceBrowser)
    /// The search was stopped.
    func netServiceBrowserDidStopSearch(_ browser: NetServiceBrowser)
    /// The search could not start or failed.
    func netServiceBrowser(_ browser: NetServiceBrowser, didNotSearch errorDict: [String: NSNumber])
    /// A domain was found.
    func netServiceBrowser(_ browser: NetServiceBrowser, didFindDomain domainString: String, moreComing: Bool)
    /// A service was found.
    func netServiceBrowser(_ browser: NetServiceBrowser, didFind service: NetService, moreComing: Bool)
    /// A domain disappeared.
    func netServiceBrowser(_ browser: NetServiceBrowser, didRemoveDomain domainString: String, moreComing: Bool)
    /// A service disappeared (the same object `didFind` reported).
    func netServiceBrowser(_ browser: NetServiceBrowser, didRemove service: NetService, moreComing: Bool)
}

extension NetServiceBrowserDelegate {
    public func netServiceBrowserWillSearch(_ browser: NetServiceBrowser) {}
    public func netServiceBrowserDidStopSearch(_ browser: NetServiceBrowser) {}
    public func netServiceBrowser(_ browser: NetServiceBrowser, didNotSearch errorDict: [String: NSNumber]) {}
    public func netServiceBrowser(_ browser: NetServiceBrowser, didFindDomain domainString: String, moreComing: Bool) {}
    public func netServiceBrowser(_ browser: NetServiceBrowser, didFind service: NetService, moreComing: Bool) {}
    public func netServiceBrowser(_ browser: NetServiceBrowser, didRemoveDomain domainString: String, moreComing: Bool)
    {}
    public func netServiceBrowser(_ browser: NetServiceBrowser, didRemove service: NetService, moreComing: Bool) {}
}
