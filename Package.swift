// swift-tools-version:6.0
import PackageDescription

let package = Package(
    name: "Salut",
    products: [
        .library(name: "Salut", targets: ["Salut"]),
        .library(name: "SalutStreams", targets: ["SalutStreams"]),
        .library(name: "SalutDiscovery", targets: ["SalutDiscovery"]),
        .library(name: "SalutSession", targets: ["SalutSession"]),
        .executable(name: "netsvc", targets: ["netsvc"]),
        .executable(name: "peerxfer", targets: ["peerxfer"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle", from: "2.13.0"),
        // peerxfer's local web page (`serve --web`).
        .package(url: "https://github.com/hummingbird-project/hummingbird", from: "2.28.1"),
        .package(url: "https://github.com/apple/swift-http-types", from: "1.8.0"),
        // Documentation only: `swift package generate-documentation` (Scripts/docs).
        .package(url: "https://github.com/swiftlang/swift-docc-plugin", from: "1.5.0"),
    ],
    targets: [
        // System-library shims: the only places that name C headers.
        .systemLibrary(
            // No pkgConfig here: avahi-client's .pc adds -D_REENTRANT, which SwiftPM refuses
            // with a warning. The headers are in /usr/include; the module map links the libraries.
            name: "CAvahi",
            providers: [.apt(["libavahi-client-dev", "libavahi-common-dev"])]
        ),
        .systemLibrary(
            name: "COpenSSL",
            pkgConfig: "openssl",
            providers: [.apt(["libssl-dev"])]
        ),
        // Linux headers Glibc's module lacks (epoll); no library to link.
        .systemLibrary(name: "CLinux"),
        .systemLibrary(name: "CFileSystems", path: "Examples/PeerTransfer/CFileSystems"),

        .target(name: "SalutStreams", dependencies: ["COpenSSL", "CLinux", .product(name: "Logging", package: "swift-log")]),
        .target(name: "SalutDiscovery", dependencies: ["CAvahi", "SalutStreams"]),
        .target(name: "SalutSession", dependencies: ["SalutStreams", "SalutDiscovery"]),
        .target(name: "Salut", dependencies: ["SalutStreams", "SalutDiscovery", "SalutSession"]),
        // What the tools (netsvc, peerxfer) and the tests share that is not Salut's API: the
        // process spawner, the cancellable async turn, mistyped command lines. Package-only; no product.
        .target(name: "SalutTools", dependencies: ["SalutStreams", "SalutDiscovery"]),

        .executableTarget(
            name: "netsvc",
            dependencies: [
                "Salut",
                "SalutTools",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ]
        ),
        // peerxfer: the peer-to-peer file-transfer tool. Its protocol, inbox and transfer logic
        // are a library (tested without the command line); the tool is a thin shell over it.
        .target(
            name: "PeerTransferCore",
            dependencies: [
                "Salut",
                "CFileSystems",
                .product(name: "Logging", package: "swift-log"),
            ],
            path: "Examples/PeerTransfer/Core"
        ),
        .executableTarget(
            name: "peerxfer",
            dependencies: [
                "PeerTransferCore",
                "Salut",
                "SalutTools",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
            ],
            path: "Examples/PeerTransfer/Tool"
        ),
        .executableTarget(
            name: "salut-demo",
            dependencies: ["Salut"],
            path: "Examples/DiscoveryDemo"
        ),

        .executableTarget(
            name: "resumable-upload",
            dependencies: ["Salut"],
            path: "Examples/ResumableUpload"
        ),
        .executableTarget(
            name: "apple-sample",
            dependencies: ["Salut"],
            path: "Examples/AppleSample"
        ),
        // A LAN chat on Salut's async API: TLS, keys in TXT, pinned connections (a test runs three).
        .executableTarget(
            name: "lan-chat",
            dependencies: ["Salut"],
            path: "Examples/LANChat"
        ),
        // CFNetwork's spelling of streams, end to end (tests run it against openssl s_server).
        .executableTarget(
            name: "cfnetwork-client",
            dependencies: ["Salut"],
            path: "Examples/CFNetworkClient"
        ),
        .executableTarget(
            name: "discovery-bench",
            dependencies: ["Salut"],
            path: "Benchmarks/DiscoveryBench"
        ),

        .executableTarget(
            name: "streams-bench",
            dependencies: ["SalutStreams"],
            path: "Benchmarks/StreamsBench"
        ),

        .executableTarget(
            name: "tls-bench",
            dependencies: ["SalutStreams", "COpenSSL"],
            path: "Benchmarks/TLSBench"
        ),

        .executableTarget(
            name: "session-bench",
            dependencies: ["SalutSession"],
            path: "Benchmarks/SessionBench"
        ),

        .executableTarget(
            name: "soak-bench",
            dependencies: ["SalutStreams"],
            path: "Benchmarks/SoakBench"
        ),

        .executableTarget(
            name: "wide-area-bench",
            dependencies: ["SalutDiscovery", "SalutStreams", "SalutTools"],
            path: "Benchmarks/WideAreaBench",
            exclude: ["lab-visible"]   // the across-the-lab figure, a script of its own
        ),

        .executableTarget(
            name: "connections-bench",
            dependencies: ["SalutStreams", "SalutDiscovery"],
            path: "Benchmarks/ConnectionsBench"
        ),

        // Fuzzing (Scripts/fuzz, libFuzzer): the property checks, shared by the fuzz targets and
        // the tests that replay the committed inputs; each target, built without the fuzzer, is a
        // replayer of input files.
        .systemLibrary(name: "CLibFuzzer", path: "Fuzz/CLibFuzzer"),
        .target(name: "FuzzChecks", dependencies: ["SalutDiscovery", "SalutStreams", "CAvahi", "CLibFuzzer"], path: "Fuzz/FuzzChecks"),
        .executableTarget(name: "FuzzTXTRecord", dependencies: ["FuzzChecks"], path: "Fuzz/FuzzTXTRecord"),
        .executableTarget(name: "FuzzServiceNames", dependencies: ["FuzzChecks"], path: "Fuzz/FuzzServiceNames"),
        .executableTarget(name: "FuzzBoundPair", dependencies: ["FuzzChecks"], path: "Fuzz/FuzzBoundPair"),
        .executableTarget(name: "FuzzPins", dependencies: ["FuzzChecks"], path: "Fuzz/FuzzPins"),

        // Child processes, deadlines and certificates shared by the test targets.
        .target(name: "SalutTestSupport", dependencies: ["SalutTools"], path: "Tests/SalutTestSupport"),
        .testTarget(name: "SalutDiscoveryTests", dependencies: ["SalutDiscovery", "CAvahi", "Salut", "SalutTestSupport", "SalutTools", "FuzzChecks",
                                                       .product(name: "Logging", package: "swift-log")]),
        .testTarget(name: "SalutStreamsTests", dependencies: ["SalutStreams", "SalutTestSupport", "SalutTools", "FuzzChecks"]),
        .testTarget(name: "SalutSessionTests", dependencies: ["SalutSession", "SalutTestSupport"]),
        .testTarget(
            name: "PeerTransferTests",
            dependencies: ["PeerTransferCore", "Salut", "SalutTestSupport", .product(name: "Logging", package: "swift-log")]),
        .testTarget(name: "LabTests", dependencies: ["Salut", "SalutTestSupport"]),
    ]
)
