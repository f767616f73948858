// The body shared by the libFuzzer target (idx_fuzz.cpp) and the corpus test that runs in CI
// (tests/data/idx_fuzz_test.cpp): parse arbitrary bytes as an IDX file, raw or gzip. A
// nabla::Error (DataError) is the only acceptable failure; anything else is a bug.
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include <zlib.h>

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

// A valid (4, 5, 6) uint8 file of random bytes, and the same gzip-compressed: the seeds.
inline std::vector<uint8_t> idx_fuzz_seed(uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> out = {0, 0, 8, 3, 0, 0, 0, 4, 0, 0, 0, 5, 0, 0, 0, 6};
  for (int i = 0; i < 4 * 5 * 6; ++i) out.push_back(static_cast<uint8_t>(rng()));
  return out;
}

inline std::vector<uint8_t> gzip_bytes(const std::vector<uint8_t>& raw) {
  z_stream z{};
  if (deflateInit2(&z, 6, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) != Z_OK) __builtin_trap();
  std::vector<uint8_t> out(deflateBound(&z, raw.size()) + 32);
  z.next_in = const_cast<Bytef*>(raw.data());
  z.avail_in = static_cast<uInt>(raw.size());
  z.next_out = out.data();
  z.avail_out = static_cast<uInt>(out.size());
  if (deflate(&z, Z_FINISH) != Z_STREAM_END) __builtin_trap();
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

}  // namespace nabla::fuzz
