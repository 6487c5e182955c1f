// `import Salut` brings in discovery (NetService and the async browser/resolver/advertisement),
// streams (bound pairs, streams to hosts, listeners) and the session task model.
@_exported import SalutDiscovery
@_exported import SalutSession
@_exported import SalutStreams
