// libFuzzer target for the JPEG/PNG image path (decode + crop). Built only with -DNABLA_FUZZ=ON
// and clang; run it like safetensors_fuzz (docs/user-guide.md), e.g. with a few JPEGs from
// tools/make_jpeg_set.py as the seed corpus:
//   build-fuzz/tests/fuzz/jpeg_fuzz -max_len=65536 -timeout=10 corpus/
#include <cstddef>
#include <cstdint>

#include "fuzz/jpeg_fuzz_body.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  nabla::fuzz::jpeg_fuzz_one(data, size);
  return 0;
}
