// libFuzzer target for the safetensors parser. Built only with -DNABLA_FUZZ=ON and clang; see
// docs/user-guide.md ("Fuzzing the safetensors reader") for how to run it.
#include <cstddef>
#include <cstdint>

#include "fuzz/safetensors_fuzz_body.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  nabla::fuzz::safetensors_fuzz_one(data, size);
  return 0;
}
