// The checkpoint fuzz target's body (tests/fuzz/checkpoint_fuzz_body.h) over seeded mutations of a
// valid training checkpoint (model, two optimizers, a warmed-up schedule, loss scaler, EMA), and
// malformed entries written on purpose: each must load and train a step, or throw nabla::Error
// while loading; never crash, and never fail in the step after an accepted load.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "fuzz/checkpoint_fuzz_body.h"
#include "fuzz/mutate.h"
#include "test_util.h"

namespace nabla {
namespace {

bool run(const std::string& bytes) {
  return fuzz::checkpoint_fuzz_one(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
}

TEST(CheckpointFuzz, SeedLoadsTrainsAndRoundTrips) {
  const std::string seed = fuzz::checkpoint_fuzz_seed();
  EXPECT_TRUE(run(seed));
  // Loaded into fresh parts, the state equals what was saved.
  fuzz::TrainingParts parts;
  parts.load(parse_safetensors(std::as_bytes(std::span(seed.data(), seed.size()))).tensors);
  fuzz::TrainingParts saved;
  saved.step();
  saved.step();
  const auto a = parts.state(), b = saved.state();
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [key, value] : b) {
    ASSERT_TRUE(a.count(key)) << key;
    EXPECT_TRUE(testing::all_close(a.at(key), value, 0, 0)) << key;
  }
}

TEST(CheckpointFuzz, MalformedEntriesAreRefusedWhileLoading) {
  const std::string seed = fuzz::checkpoint_fuzz_seed();
  auto file = parse_safetensors(std::as_bytes(std::span(seed.data(), seed.size()))).tensors;
  auto refused = [&](const std::string& what, auto edit) {
    auto edited = file;
    edit(edited);
    EXPECT_FALSE(run(serialize_safetensors(edited, {}))) << what;
  };
  refused("a momentum buffer of the wrong shape", [](auto& f) {
    for (auto& [key, value] : f) {
      if (key.rfind("sgd.state.", 0) == 0 && key.find("momentum") != std::string::npos) value = zeros({7});
    }
  });
  refused("a step that is not a number",
          [](auto& f) { f["optimizer.step"] = full({}, std::nan(""), {.dtype = kFloat64}); });
  refused("an optimizer state index out of range",
          [](auto& f) { f["optimizer.state.0.99.exp_avg"] = zeros({3}); });
  refused("a state key that is not numbered", [](auto& f) { f["optimizer.state.x.y.exp_avg"] = zeros({3}); });
  refused("a scheduler step of two values",
          [](auto& f) { f["scheduler.last_step"] = zeros({2}, {.dtype = kInt64}); });
  refused("a missing EMA shadow", [](auto& f) { f.erase("ema.shadow.0"); });
}

TEST(CheckpointFuzz, FuzzBodyReturnsOrThrowsOnMutatedSeeds) {
  const std::string seed = fuzz::checkpoint_fuzz_seed();
  std::mt19937_64 rng(testing::test_seed());
  int loaded = 0;
  for (int i = 0; i < 1000; ++i) {
    SCOPED_TRACE(::testing::Message() << "mutation " << i);
    loaded += run(fuzz::mutate(seed, i, rng)) ? 1 : 0;
  }
  EXPECT_LT(loaded, 1000);
}

}  // namespace
}  // namespace nabla
