// The body shared by the libFuzzer target (idx_fuzz.cpp) and the corpus test that runs in CI
// (tests/data/idx_fuzz_test.cpp): parse arbitrary bytes as an IDX file, raw or gzip. A
// nabla::Error (DataError) is the only acceptable failure; anything else is a bug.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "nabla/core/error.h"
#include "nabla/data/idx.h"

namespace nabla::fuzz {

// A payload cap far below the default, so the fuzzer cannot spend its time on huge claims that
// are legal (the reader still has to refuse them without allocating).
inline constexpr size_t kIdxFuzzMaxBytes = size_t{1} << 24;

// Returns true when the bytes parsed as a valid file.
inline bool idx_fuzz_one(const uint8_t* data, size_t size) {
  try {
    data::IdxArray array = data::parse_idx(std::span(data, size), "<fuzz input>", kIdxFuzzMaxBytes);
    size_t expected = 1;
    for (int64_t d : array.dims) expected *= static_cast<size_t>(d);
    if (array.data.size() != expected) __builtin_trap();  // the header and the payload must agree
    volatile uint8_t sink = 0;
    for (uint8_t b : array.data) sink = sink ^ b;
    return true;
  } catch (const nabla::Error&) {
    return false;
  }
}

}  // namespace nabla::fuzz
