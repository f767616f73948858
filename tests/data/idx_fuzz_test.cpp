// The IDX fuzz target's body (tests/fuzz/idx_fuzz_body.h) over 3000 seeded mutations of valid
// raw and gzip files: byte flips, truncations, header edits. The reader must return or throw
// nabla::Error, never crash or allocate what the header merely claims. Runs in CI; the
// libFuzzer target (-DNABLA_FUZZ=ON) explores further.

#include <random>

#include "fuzz/idx_fuzz_body.h"
#include "test_util.h"

namespace nabla {
namespace {

bool run(const std::vector<uint8_t>& bytes) {
  return fuzz::idx_fuzz_one(bytes.data(), bytes.size());
}

TEST(IdxFuzz, ValidRawAndGzipFilesParse) {
  auto raw = fuzz::idx_fuzz_seed(testing::test_seed());
  EXPECT_TRUE(run(raw));
  EXPECT_TRUE(run(fuzz::gzip_bytes(raw)));
}

TEST(IdxFuzz, MutatedFilesReturnOrThrowNablaError) {
  const uint64_t seed = testing::test_seed();
  std::mt19937_64 rng(seed);
  auto below = [&](size_t n) { return n == 0 ? size_t{0} : static_cast<size_t>(rng() % n); };
  const auto raw = fuzz::idx_fuzz_seed(seed);
  const auto compressed = fuzz::gzip_bytes(raw);
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
