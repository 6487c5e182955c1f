// libFuzzer's driver, for a fuzz target that has a `main` of its own (SwiftPM gives every
// executable one). Linked only by `-sanitize=fuzzer`; declared here for builds with FUZZING.
#ifndef SALUT_CLIBFUZZER_SHIM_H
#define SALUT_CLIBFUZZER_SHIM_H
#include <stddef.h>
#include <stdint.h>
int LLVMFuzzerRunDriver(int *argc, char ***argv, int (*callback)(const uint8_t *data, size_t size));
#endif
