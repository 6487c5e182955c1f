// swift-tools-version:6.0
// A package that uses Salut the way an application does: from outside, through its products.
// Here it depends on Salut by path (this repository); a real application names Salut's
// repository URL and a version instead, and nothing else changes.
import PackageDescription

let package = Package(
    name: "HelloPeers",
    dependencies: [
        .package(name: "Salut", path: "../.."),
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
            dependencies: ["HelloPeersCore", .product(name: "Salut", package: "Salut"), .product(name: "SalutStreams", package: "Salut")]
        ),
    ]
)
