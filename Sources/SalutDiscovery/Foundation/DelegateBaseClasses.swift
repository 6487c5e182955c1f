import Foundation

// Why these classes exist. On Apple's systems the delegate methods are optional Objective-C
// methods, found by name at run time, so a subclass can add one its superclass never declared
// and still be called. Swift on Linux has no Objective-C runtime: a class that conforms to
// `NetServiceDelegate` fixes, once, which method answers each requirement, and a requirement it
// left to the protocol's empty default stays with that default in every subclass. A subclass
// method of the same name is then never called, silently.
//
// A delegate class that derives from one of these instead of `NSObject` declares every method
// as an `open` class method, so subclasses override them (the compiler asks for `override`,
// which also tells a porting user exactly where the change is needed) and the override is what
// the service or browser calls. The one-line port: `NSObject, NetServiceDelegate` becomes
// `NetServiceDelegateObject` in the class that subclasses build on.

/// A base class for `NetService` delegates whose subclasses add or override delegate methods:
/// every method is an empty `open` method, so the most derived override is the one called.
/// Classes that are not subclassed can simply conform to ``NetServiceDelegate``.
open class NetServiceDelegateObject: NSObject, NetServiceDelegate {
    /// Makes a delegate with every method empty.
    public override init() { super.init() }
    /// Publishing has started.
    open func netServiceWillPublish(_ sender: NetService) {}
    /// The service is published.
    open func netServiceDidPublish(_ sender: NetService) {}
    /// Publishing failed.
    open func netService(_ sender: NetService, didNotPublish errorDict: [String: NSNumber]) {}
    /// Resolving has started.
    open func netServiceWillResolve(_ sender: NetService) {}
    /// An address was found.
    open func netServiceDidResolveAddress(_ sender: NetService) {}
    /// Resolving failed.
    open func netService(_ sender: NetService, didNotResolve errorDict: [String: NSNumber]) {}
    /// A publish or resolve was stopped.
    open func netServiceDidStop(_ sender: NetService) {}
    /// The TXT record changed while monitoring.
    open func netService(_ sender: NetService, didUpdateTXTRecord data: Data) {}
    /// A client connected to a service published with `.listenForConnections`.
    open func netService(
        _ sender: NetService, didAcceptConnectionWith inputStream: InputStream, outputStream: OutputStream
    ) {}
}

/// A base class for `NetServiceBrowser` delegates whose subclasses add or override delegate
/// methods (see ``NetServiceDelegateObject``).
open class NetServiceBrowserDelegateObject: NSObject, NetServiceBrowserDelegate {
    /// Makes a delegate with every method empty.
    public override init() { super.init() }
    /// A search has started.
    open func netServiceBrowserWillSearch(_ browser: NetServiceBrowser) {}
    /// The search was stopped.
    open func netServiceBrowserDidStopSearch(_ browser: NetServiceBrowser) {}
    /// The search could not start or failed.
    open func netServiceBrowser(_ browser: NetServiceBrowser, didNotSearch errorDict: [String: NSNumber]) {}
    /// A domain was found.
    open func netServiceBrowser(_ browser: NetServiceBrowser, didFindDomain domainString: String, moreComing: Bool) {}
    /// A service was found.
    open func netServiceBrowser(_ browser: NetServiceBrowser, didFind service: NetService, moreComing: Bool) {}
    /// A domain disappeared.
    open func netServiceBrowser(_ browser: NetServiceBrowser, didRemoveDomain domainString: String, moreComing: Bool) {}
    /// A service disappeared.
    open func netServiceBrowser(_ browser: NetServiceBrowser, didRemove service: NetService, moreComing: Bool) {}
}
