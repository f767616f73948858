// libFuzzer target: see config_fuzz_body.h.
#include <cstddef>
#include <cstdint>

#include "fuzz/config_fuzz_body.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  nabla::fuzz::config_fuzz_one(data, size);
  return 0;
}
