// SalutSession: the URLSession-shaped task model over peer streams.
//
// This module is filled in by the session issue: `PeerSession`, its configuration, stream tasks,
// metrics and resumable transfers. It already builds, so that the `Salut` umbrella and the
// module graph in docs/architecture.md are real from the start.
@_exported import SalutDiscovery
@_exported import SalutStreams
