import FuzzChecks
import SalutTestSupport
import XCTest

/// Replays every committed input of the bound-pair fuzz target (the seeds in `Fuzz/Corpus/` and
/// the inputs fuzzing once failed on, in `Fuzz/Regressions/`) through the same property checks
/// the fuzzer runs, so that a bug fuzzing found stays fixed. `Scripts/fuzz` finds new ones.
/// (Under the sanitizer runs of `Scripts/test` the same inputs meet ThreadSanitizer and
/// AddressSanitizer too.)
final class FuzzRegressionTests: SalutTestCase {
    func testBoundPairInputs() {
        let target = FuzzTarget.boundPair
        let inputs = target.savedInputs
        XCTAssertFalse(inputs.isEmpty, "no inputs in \(target.corpusDirectory.path)")
        for failure in target.failures(replaying: inputs) {
            XCTFail(failure)
        }
    }

    func testPinInputs() {
        let target = FuzzTarget.pins
        let inputs = target.savedInputs
        XCTAssertFalse(inputs.isEmpty, "no inputs in \(target.corpusDirectory.path)")
        for failure in target.failures(replaying: inputs) {
            XCTFail(failure)
        }
    }
}
