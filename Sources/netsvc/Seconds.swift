import ArgumentParser

/// A time limit given on the command line, in seconds: a finite number from 0.001 to 3,600.
/// Anything else (`nan`, `inf`, `-1`, `1e20`, a word) is a usage error (exit 2) that says the
/// range, before the daemon is contacted.
struct Seconds: ExpressibleByArgument, ExpressibleByIntegerLiteral, CustomStringConvertible {
    /// The accepted range.
    static let range: ClosedRange<Double> = 0.001...3600

    /// The number of seconds.
    let value: Double

    init?(argument: String) {
        guard let number = Double(argument), number.isFinite, Self.range.contains(number) else { return nil }
        value = number
    }

    init(integerLiteral seconds: Int) {
        value = Double(seconds)
    }

    var description: String { value == value.rounded() ? String(Int(value)) : String(value) }

    /// Shown in `--help` as the default.
    var defaultValueDescription: String { description }

    /// Nanoseconds, for `Task.sleep`.
    var nanoseconds: UInt64 { UInt64(value * 1e9) }
}
