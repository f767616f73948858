// Token files (data/token_file.h): nanoGPT's raw uint16, llm.c's GPT-2 (uint16) and LLaMA 3 (uint32)
// formats read back to the tokens written, the malformed ones refused with a message naming the
// problem, and the fuzz target's body over seeded mutations of its seeds.
#include <gtest/gtest.h>

#include <random>

#include "fuzz/mutate.h"
#include "fuzz/tokens_fuzz_body.h"
#include "nabla/data/error.h"
#include "nabla/data/token_file.h"
#include "test_util.h"

namespace nabla::data {
namespace {

// Little-endian bytes of `values`, each `width` bytes, written value by value (not memcpy).
std::vector<uint8_t> le_bytes(const std::vector<uint64_t>& values, int width) {
  std::vector<uint8_t> out;
  for (uint64_t v : values) {
    for (int i = 0; i < width; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
  }
  return out;
}

std::vector<uint8_t> llmc_file(int32_t magic, int32_t version, int64_t count,
                               const std::vector<uint64_t>& tokens, int width) {
  std::vector<uint64_t> header(256, 0);
  header[0] = static_cast<uint32_t>(magic);
  header[1] = static_cast<uint32_t>(version);
  header[2] = static_cast<uint32_t>(count);
  auto out = le_bytes(header, 4);
  auto body = le_bytes(tokens, width);
  out.insert(out.end(), body.begin(), body.end());
  return out;
}

std::vector<uint64_t> random_tokens(size_t n, uint64_t bound, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint64_t> out(n);
  for (auto& t : out) t = 1 + rng() % (bound - 1);
  return out;
}

std::vector<uint32_t> as_u32(const std::vector<uint64_t>& v) {
  return {v.begin(), v.end()};
}

TEST(TokenFile, EachFormatReadsBackItsTokens) {
  const uint64_t seed = testing::test_seed();
  const auto gpt2 = random_tokens(301, 50257, seed);
  EXPECT_EQ(parse_token_file(le_bytes(gpt2, 2), "raw"), as_u32(gpt2));
  EXPECT_EQ(parse_token_file(llmc_file(kLlmcGpt2Magic, 1, 301, gpt2, 2), "llmc"), as_u32(gpt2));
  const auto llama = random_tokens(123, 128256, seed + 1);
  EXPECT_EQ(parse_token_file(llmc_file(kLlmcLlama3Magic, 7, 123, llama, 4), "llama3"), as_u32(llama));
  EXPECT_TRUE(parse_token_file({}, "empty").empty());
}

TEST(TokenFile, MalformedFilesNameTheProblem) {
  const auto tokens = random_tokens(10, 50257, testing::test_seed());
  auto expect = [](const std::vector<uint8_t>& bytes, const std::string& what) {
    try {
      (void)parse_token_file(bytes, "f.bin");
      ADD_FAILURE() << "accepted; expected: " << what;
    } catch (const DataError& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("f.bin"), std::string::npos) << e.what();
    }
  };
  auto odd = le_bytes(tokens, 2);
  odd.push_back(7);
  expect(odd, "not a whole number of uint16 tokens");
  expect(llmc_file(kLlmcGpt2Magic, 1, 11, tokens, 2),
         "header says 11 tokens of 2 bytes, but 20 bytes follow");
  expect(llmc_file(kLlmcGpt2Magic, 7, 10, tokens, 2), "with version 7; that magic goes with version 1");
  expect(llmc_file(kLlmcLlama3Magic, 7, 10, tokens, 2), "header says 10 tokens of 4 bytes, but 20 bytes");
  expect(llmc_file(kLlmcGpt2Magic, 1, -1, {}, 2), "negative token count -1");
  auto short_header = llmc_file(kLlmcGpt2Magic, 1, 0, {}, 2);
  short_header.resize(100);
  expect(short_header, "the header alone is 1024 bytes");
}

TEST(TokenFile, FuzzBodyReturnsOrThrowsOnMutatedSeeds) {
  std::mt19937_64 rng(testing::test_seed());
  auto run = [](const std::string& b) {
    return fuzz::tokens_fuzz_one(reinterpret_cast<const uint8_t*>(b.data()), b.size());
  };
  int parsed = 0, total = 0;
  for (const auto& [name, seed] : fuzz::tokens_fuzz_seeds()) {
    EXPECT_TRUE(run(seed)) << name;
    for (int i = 0; i < 600; ++i, ++total) parsed += run(fuzz::mutate(seed, i, rng)) ? 1 : 0;
  }
  EXPECT_LT(parsed, total);
}

}  // namespace
}  // namespace nabla::data
