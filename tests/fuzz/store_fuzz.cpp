// libFuzzer target for the TCP store's protocol: what a rank, or a stranger, sends to the store port.
#include <cstddef>
#include <cstdint>

#include "fuzz/store_fuzz_body.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  nabla::fuzz::store_fuzz_one(data, size);
  return 0;
}
