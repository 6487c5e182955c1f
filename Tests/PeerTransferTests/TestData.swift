import Foundation

/// Bytes for file tests: `count` bytes from a seeded generator (a 64-bit linear congruential
/// one, high bits kept), the same for the same seed on every run.
func seededData(_ count: Int, seed: UInt64) -> Data {
    var state = seed
    return Data(
        (0..<count).map { _ in
            state = state &* 6364136223846793005 &+ 1442695040888963407
            return UInt8(truncatingIfNeeded: state >> 33)
        })
}
