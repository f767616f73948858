// libFuzzer target for the safetensors parser: see safetensors_fuzz_body.h, and docs/fuzzing.md
// for how to build and run it (the `fuzz` preset, scripts/fuzz/run.sh).
#include <cstddef>
#include <cstdint>

#include "fuzz/safetensors_fuzz_body.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  nabla::fuzz::safetensors_fuzz_one(data, size);
  return 0;
}
