// The fuzz target's body (tests/fuzz/safetensors_fuzz_body.h) over 2000 seeded mutations of a
// valid file: random byte flips, truncations, insertions, and edits of the header length. The
// parser must return or throw nabla::Error, never crash. Runs in CI with the regular compiler;
// the libFuzzer target (-DNABLA_FUZZ=ON) explores further.
#include <random>

#include "fuzz/safetensors_fuzz_body.h"
#include "test_util.h"

namespace nabla {
namespace {

bool run(const std::string& bytes) {
  return fuzz::safetensors_fuzz_one(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
}

TEST(SafetensorsFuzz, ValidFileParses) {
  EXPECT_TRUE(run(fuzz::safetensors_fuzz_seed(testing::test_seed())));
}

TEST(SafetensorsFuzz, MutatedFilesReturnOrThrowNablaError) {
  const uint64_t seed = testing::test_seed();
  const std::string valid = fuzz::safetensors_fuzz_seed(seed);
  std::mt19937_64 rng(seed);
  auto below = [&](size_t n) { return n == 0 ? size_t{0} : static_cast<size_t>(rng() % n); };
  int parsed = 0;
  for (int i = 0; i < 2000; ++i) {
    std::string bytes = valid;
    switch (i % 5) {
      case 0:  // byte flips anywhere
      case 1:
        for (size_t k = 0, n = 1 + below(8); k < n; ++k)
          bytes[below(bytes.size())] = static_cast<char>(rng());
        break;
      case 2:  // truncation
        bytes.resize(below(bytes.size()));
        break;
      case 3:  // flips inside the JSON header, where structure matters most
        for (size_t k = 0, n = 1 + below(4); k < n; ++k) {
          const char alphabet[] = "{}[],:\"0123456789-.eE \x00\xff";
          bytes[8 + below(bytes.size() - 8)] = alphabet[below(sizeof(alphabet) - 1)];
        }
        break;
      case 4:  // a different header length, or inserted bytes
        if (rng() % 2) {
          bytes[below(8)] = static_cast<char>(rng());
        } else {
          bytes.insert(below(bytes.size()), std::string(1 + below(16), static_cast<char>(rng())));
        }
        break;
    }
    SCOPED_TRACE(::testing::Message() << "mutation " << i);
    parsed += run(bytes) ? 1 : 0;
  }
  EXPECT_LT(parsed, 2000);  // the mutations did reach the checks
}

}  // namespace
}  // namespace nabla
