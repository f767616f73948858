// libFuzzer target for the JPEG/PNG image path (decode + crop): see jpeg_fuzz_body.h, and
// docs/fuzzing.md for how to build and run it (the `fuzz` preset, scripts/fuzz/run.sh; the seeds
// come from tests/fuzz/make_image_seeds.py).
#include <cstddef>
#include <cstdint>

#include "fuzz/jpeg_fuzz_body.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  nabla::fuzz::jpeg_fuzz_one(data, size);
  return 0;
}
