// libFuzzer target: see hf_config_fuzz_body.h.
#include <cstddef>
#include <cstdint>

#include "fuzz/hf_config_fuzz_body.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  nabla::fuzz::hf_config_fuzz_one(data, size);
  return 0;
}
