import FuzzChecks
import XCTest

/// Replays every committed input of the discovery fuzz targets (the seeds in `Fuzz/Corpus/` and
/// the inputs fuzzing once failed on, in `Fuzz/Regressions/`) through the same property checks
/// the fuzzer runs, so that a bug fuzzing found stays fixed. `Scripts/fuzz` finds new ones.
final class FuzzRegressionTests: XCTestCase {
    func testTXTRecordInputs() {
        replay(.txtRecord)
    }

    func testServiceNameInputs() {
        replay(.serviceNames)
    }

    private func replay(_ target: FuzzTarget, file: StaticString = #filePath, line: UInt = #line) {
        let inputs = target.savedInputs
        XCTAssertFalse(inputs.isEmpty, "no inputs in \(target.corpusDirectory.path)", file: file, line: line)
        for failure in target.failures(replaying: inputs) {
            XCTFail(failure, file: file, line: line)
        }
    }
}
