import Foundation

/// The executables this package builds, as built for the test run that asks: the folder that
/// holds the running test bundle holds them too (`.build/debug`, `.build-tsan/debug`, a
/// release build's folder…), so a sanitizer or release run never tests a stale debug binary
/// left in another build folder.
public enum BuiltProduct {
    /// The running test executable (on Linux, the `.xctest` file itself): what a test runs
    /// again, in another network namespace for example, to run one of its tests there.
    public static let testBundle: String =
        (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]

    /// The folder of this run's build products.
    public static let folder = URL(fileURLWithPath: testBundle).deletingLastPathComponent()

    /// The path of the product `name` (`peerxfer`, `netsvc`…) built for this run. A missing
    /// one is a test failure at its first use (the process cannot start), not a silent fallback
    /// to a binary from another build.
    public static func path(_ name: String) -> String {
        folder.appendingPathComponent(name).path
    }
}
