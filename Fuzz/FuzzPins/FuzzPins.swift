import FuzzChecks

/// libFuzzer's entry point: checks one input, trapping on a violated property.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    FuzzTarget.pins.fuzz(data, size)
}

/// Built with `-sanitize=fuzzer -D FUZZING` (`Scripts/fuzz`): libFuzzer. Otherwise: replays the
/// inputs named on the command line, or the committed ones.
@main
enum Main {
    static func main() {
        FuzzTarget.pins.main(fuzzing: fuzzOneInput)
    }
}
