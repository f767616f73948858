// libFuzzer target for the IDX reader (raw and gzip): see idx_fuzz_body.h, and docs/fuzzing.md
// for how to build and run it (the `fuzz` preset, scripts/fuzz/run.sh).
#include <cstddef>
#include <cstdint>

#include "fuzz/idx_fuzz_body.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  nabla::fuzz::idx_fuzz_one(data, size);
  return 0;
}
