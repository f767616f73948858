// The body shared by the libFuzzer target (safetensors_fuzz.cpp) and the corpus test that runs
// in CI (tests/core/safetensors_fuzz_test.cpp): parse arbitrary bytes; a nabla::Error is the
// only acceptable failure. Anything else (another exception, a crash, an ASan report) is a bug.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "nabla/core/error.h"
#include "nabla/core/io/safetensors.h"

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

}  // namespace nabla::fuzz
