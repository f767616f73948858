// libFuzzer target for the IDX reader (raw and gzip). Built only with -DNABLA_FUZZ=ON and clang;
// see docs/user-guide.md ("Fuzzing the safetensors reader"; the same steps apply with idx_fuzz).
#include <cstddef>
#include <cstdint>

#include "fuzz/idx_fuzz_body.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  nabla::fuzz::idx_fuzz_one(data, size);
  return 0;
}
