// swift-tools-version:6.0
// A package that uses Salut the way an application does: from outside, through its products.
// It depends on Salut by path (this repository): no release is tagged yet. Once one is, the
// repository's URL and a version replace the path, and nothing else changes (see README.md).
import PackageDescription

let package = Package(
    name: "HelloPeers",
    dependencies: [
        .package(name: "Salut", path: "../..")
    ],
    targets: [
        .target(
            name: "HelloPeersCore",
            dependencies: [.product(name: "Salut", package: "Salut")]
        ),
        .executableTarget(
            name: "HelloPeers",
            dependencies: ["HelloPeersCore"]
        ),
        .testTarget(
            name: "HelloPeersTests",
            dependencies: [
                "HelloPeersCore", .product(name: "Salut", package: "Salut"),
                .product(name: "SalutStreams", package: "Salut"),
            ]
        ),
    ]
)
