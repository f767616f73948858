// The IDX fuzz target's body (tests/fuzz/idx_fuzz_body.h) over 3000 seeded mutations of valid
// raw and gzip files: byte flips, truncations, header edits. The reader must return or throw
// nabla::Error, never crash or allocate what the header merely claims. Runs in CI; the
// libFuzzer target (-DNABLA_FUZZ=ON) explores further.
#include <zlib.h>

#include <random>

#include "fuzz/idx_fuzz_body.h"
#include "test_util.h"

namespace nabla {
namespace {

std::vector<uint8_t> valid_idx(uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> out = {0, 0, 8, 3, 0, 0, 0, 4, 0, 0, 0, 5, 0, 0, 0, 6};
  for (int i = 0; i < 4 * 5 * 6; ++i) out.push_back(static_cast<uint8_t>(rng()));
  return out;
}

std::vector<uint8_t> gzip(const std::vector<uint8_t>& raw) {
  z_stream z{};
  EXPECT_EQ(deflateInit2(&z, 6, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY), Z_OK);
  std::vector<uint8_t> out(deflateBound(&z, raw.size()) + 32);
  z.next_in = const_cast<Bytef*>(raw.data());
  z.avail_in = static_cast<uInt>(raw.size());
  z.next_out = out.data();
  z.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&z, Z_FINISH), Z_STREAM_END);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

bool run(const std::vector<uint8_t>& bytes) {
  return fuzz::idx_fuzz_one(bytes.data(), bytes.size());
}

TEST(IdxFuzz, ValidRawAndGzipFilesParse) {
  auto raw = valid_idx(testing::test_seed());
  EXPECT_TRUE(run(raw));
  EXPECT_TRUE(run(gzip(raw)));
}

TEST(IdxFuzz, MutatedFilesReturnOrThrowNablaError) {
  const uint64_t seed = testing::test_seed();
  std::mt19937_64 rng(seed);
  auto below = [&](size_t n) { return n == 0 ? size_t{0} : static_cast<size_t>(rng() % n); };
  const auto raw = valid_idx(seed);
  const auto compressed = gzip(raw);
  int parsed = 0;
  for (int i = 0; i < 3000; ++i) {
    std::vector<uint8_t> bytes = (i % 2 == 0) ? raw : compressed;
    switch (i / 2 % 4) {
      case 0:  // byte flips anywhere
        for (size_t k = 0, n = 1 + below(6); k < n; ++k)
          bytes[below(bytes.size())] = static_cast<uint8_t>(rng());
        break;
      case 1:  // truncation
        bytes.resize(below(bytes.size()));
        break;
      case 2:  // flips in the first 16 bytes, where the header (or gzip header) lives
        bytes[below(16)] = static_cast<uint8_t>(rng());
        break;
      case 3:  // appended garbage
        for (size_t k = 0, n = 1 + below(20); k < n; ++k) bytes.push_back(static_cast<uint8_t>(rng()));
        break;
    }
    parsed += run(bytes);
  }
  EXPECT_LT(parsed, 3000) << "some mutations must be rejected";
}

}  // namespace
}  // namespace nabla
