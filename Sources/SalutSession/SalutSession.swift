// SalutSession: the URLSession-shaped task model over peer streams. See `PeerSession`.
@_exported import SalutDiscovery
@_exported import SalutStreams
