// The body shared by the libFuzzer target (safetensors_fuzz.cpp) and the corpus test that runs
// in CI (tests/core/safetensors_fuzz_test.cpp): parse arbitrary bytes; a nabla::Error is the
// only acceptable failure. Anything else (another exception, a crash, an ASan report) is a bug.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>

#include "nabla/core/error.h"
#include "nabla/core/generator.h"
#include "nabla/core/io/safetensors.h"
#include "nabla/ops/factory.h"

namespace nabla::fuzz {

// Returns true when the bytes parsed as a valid file.
inline bool safetensors_fuzz_one(const uint8_t* data, size_t size) {
  try {
    auto file = parse_safetensors(std::as_bytes(std::span(data, size)), "<fuzz input>");
    // Touch every byte of every tensor, so the sanitizer sees any out-of-bounds storage.
    volatile uint8_t sink = 0;
    for (const auto& [name, t] : file.tensors) {
      const auto* p = static_cast<const uint8_t*>(t.data_ptr());
      for (size_t i = 0; i < t.nbytes(); ++i) sink = sink ^ p[i];
    }
    return true;
  } catch (const nabla::Error&) {
    return false;
  }
}

// A valid file of several dtypes and ranks (an empty tensor and a scalar among them) with
// metadata: the seed.
inline std::string safetensors_fuzz_seed(uint64_t seed) {
  Generator gen(seed);
  std::map<std::string, Tensor> tensors{
      {"w", randn({3, 4}, {.dtype = kFloat32}, &gen)},
      {"b", randn({4}, {.dtype = kFloat64}, &gen).to(kFloat16)},
      {"steps", randint(0, 10, {2}, {.dtype = kInt64}, &gen)},
      {"scalar", randn({}, {.dtype = kFloat64}, &gen)},
      {"empty", Tensor::empty({0}, {.dtype = kUInt8})},
  };
  return serialize_safetensors(tensors, {{"format", "pt"}, {"epoch", "3"}});
}

}  // namespace nabla::fuzz
