// Rotary embeddings (ops/rotary.h) on the CPU: rotary_embedding and RotaryCache against a float64
// loop over every pair for both pairings, offsets and strided inputs; q and k rotated in one call;
// the dot-product property rotary embeddings exist for; float64 gradcheck and the backward as the
// inverse rotation; Llama 3's frequency bands; the errors. (The CUDA kernel is checked against
// this path in tests/ops/cuda/parity_rotary_test.cpp; Llama 3 scaling end to end against PyTorch
// in tests/interop/llama_torch_test.cpp.)
#include <cmath>
#include <numbers>

#include "test_util.h"

namespace nabla {
namespace {

using namespace testing;  // NOLINT: test helpers

// Rotates pairs (i, i + D/2), or (2i, 2i + 1) when interleaved, by (offset + t) * base^(-2i/D).
Tensor loop_rotary(const Tensor& x, double base, int64_t offset, bool interleaved) {
  const int64_t T = x.size(-2), D = x.size(-1), half = D / 2;
  auto v = x.to(kFloat64).contiguous().to_vector<double>();
  for (size_t row = 0; row < v.size() / static_cast<size_t>(D); ++row) {
    const double t = static_cast<double>(offset + static_cast<int64_t>(row) % T);
    for (int64_t i = 0; i < half; ++i) {
      const double angle = t * std::pow(base, -2.0 * static_cast<double>(i) / static_cast<double>(D));
      const size_t ia = row * D + (interleaved ? 2 * i : i),
                   ib = row * D + (interleaved ? 2 * i + 1 : i + half);
      const double a = v[ia], b = v[ib];
      v[ia] = a * std::cos(angle) - b * std::sin(angle);
      v[ib] = b * std::cos(angle) + a * std::sin(angle);
    }
  }
  return tensor<double>(v, x.sizes());
}

TEST(Rotary, MatchesLoopsForBothPairings) {
  const Tensor x = random_input({2, 3, 7, 8}, test_seed());
  for (bool interleaved : {false, true}) {
    EXPECT_TRUE(all_close(rotary_embedding(x, {.interleaved = interleaved}),
                          loop_rotary(x, 10000, 0, interleaved), 1e-12, 1e-12))
        << interleaved;
    EXPECT_TRUE(all_close(rotary_embedding(x, {.base = 500, .offset = 11, .interleaved = interleaved}),
                          loop_rotary(x, 500, 11, interleaved), 1e-12, 1e-12))
        << interleaved;
  }
  const Tensor y = rotary_embedding(x.to(kBFloat16));
  EXPECT_EQ(y.dtype(), kBFloat16);
  EXPECT_TRUE(all_close(y, loop_rotary(x, 10000, 0, false), 2e-2, 2e-2));
}

TEST(Rotary, KeepsDotProductsRelative) {
  // What rotary embeddings are for: q_m . k_n depends on m - n only.
  const Tensor q = random_input({1, 8}, test_seed()), k = random_input({1, 8}, test_seed() + 1);
  auto dot = [&](int64_t m, int64_t n) {
    return (rotary_embedding(q, {.offset = m}) * rotary_embedding(k, {.offset = n})).sum().item<double>();
  };
  EXPECT_NEAR(dot(5, 2), dot(13, 10), 1e-10);
  EXPECT_NEAR(dot(0, 7), dot(20, 27), 1e-10);
}

TEST(Rotary, GradientsAndErrors) {
  const Tensor x = random_input({2, 5, 6}, test_seed(), kFloat64, true);
  for (bool interleaved : {false, true}) {
    EXPECT_TRUE(gradcheck(
        [interleaved](const TensorList& in) {
          return rotary_embedding(in[0], {.offset = 3, .interleaved = interleaved});
        },
        {x}));
  }
  EXPECT_NABLA_ERROR(rotary_embedding(random_input({2, 5}, 1)), "rotary_embedding", "D even");
  EXPECT_NABLA_ERROR(rotary_embedding(x, {.offset = -1}), "rotary_embedding", "offset >= 0");
}

// ---- RotaryCache -------------------------------------------------------------------------------

TEST(RotaryCache, MatchesLoopsForBothPairingsAndOffsets) {
  for (bool interleaved : {false, true}) {
    const RotaryCache rope(8, 40, {.base = 500, .interleaved = interleaved});
    const Tensor x = random_input({2, 3, 6, 8}, test_seed() + interleaved, kFloat64);
    EXPECT_TRUE(all_close(rope(x), loop_rotary(x, 500, 0, interleaved), 1e-12, 1e-12)) << interleaved;
    EXPECT_TRUE(all_close(rope(x, 34), loop_rotary(x, 500, 34, interleaved), 1e-12, 1e-12)) << interleaved;
    // float32 reads the float32 table; the rotation in float32.
    EXPECT_TRUE(all_close(rope(x.to(kFloat32), 5), loop_rotary(x, 500, 5, interleaved), 1e-5, 1e-5));
  }
}

TEST(RotaryCache, RotatesQAndKTogetherAtAnyStrides) {
  // q and k as a transformer hands them over: (B, T, H, D) projections viewed as (B, H, T, D),
  // k with fewer (grouped) heads. The outputs keep that layout, so their transposes are contiguous.
  const RotaryCache rope(16, 32);
  const Tensor q = random_input({2, 7, 4, 16}, test_seed(), kFloat64).transpose(1, 2);
  const Tensor k = random_input({2, 7, 2, 16}, test_seed() + 1, kFloat64).transpose(1, 2);
  const auto [qr, kr] = rope(q, k, 3);
  EXPECT_TRUE(all_close(qr, loop_rotary(q, 10000, 3, false), 1e-12, 1e-12));
  EXPECT_TRUE(all_close(kr, loop_rotary(k, 10000, 3, false), 1e-12, 1e-12));
  EXPECT_TRUE(qr.transpose(1, 2).is_contiguous());
  // A view that is not dense (every other head) still works, into a contiguous result.
  const Tensor every_other = q.narrow(1, 0, 4).as_strided({2, 2, 7, 16}, {448, 32, 64, 1});
  EXPECT_TRUE(all_close(rope(every_other), loop_rotary(every_other, 10000, 0, false), 1e-12, 1e-12));
}

TEST(RotaryCache, BackwardIsTheInverseRotation) {
  const RotaryCache rope(6, 12, {.interleaved = true});
  const Tensor x = random_input({2, 5, 6}, test_seed(), kFloat64, true);
  EXPECT_TRUE(gradcheck([&](const TensorList& in) { return rope(in[0], 4); }, {x}));
  // A rotation's inverse is its transpose: the gradient of sum(g * rope(x)) is rope^-1(g), and
  // rotating it forward again gives g back.
  const Tensor g = random_input({2, 5, 6}, test_seed() + 1, kFloat64);
  (rope(x, 4) * g).sum().backward();
  EXPECT_TRUE(all_close(rope(x.grad(), 4), g, 1e-12, 1e-12));
}

// Positions held in a tensor give the rows at those positions: a run of them equals the offset
// form, and any list (repeats, out of order) rotates each row as its own offset would; the
// gradient flows as for the offset form.
TEST(RotaryCache, PositionsFromATensorRotateEachRowAtItsPosition) {
  for (bool interleaved : {false, true}) {
    const RotaryCache rope(8, 30, {.base = 300, .interleaved = interleaved});
    const Tensor x = random_input({2, 3, 4, 8}, test_seed() + interleaved, kFloat64);
    const Tensor k = random_input({2, 1, 4, 8}, test_seed() + 7, kFloat64);
    const auto [qr, kr] = rope.at(x, k, tensor<int64_t>({11, 12, 13, 14}));
    EXPECT_TRUE(all_close(qr, rope(x, 11), 0, 0)) << interleaved;
    EXPECT_TRUE(all_close(kr, rope(k, 11), 0, 0)) << interleaved;
    const std::vector<int64_t> at = {29, 0, 5, 5};
    const Tensor scattered = rope.at(x.to(kFloat32), tensor<int64_t>(at));
    for (int64_t row = 0; row < 4; ++row) {
      const Tensor one = x.narrow(2, row, 1);
      EXPECT_TRUE(
          all_close(scattered.narrow(2, row, 1), loop_rotary(one, 300, at[row], interleaved), 1e-5, 1e-5))
          << interleaved << " row " << row;
    }
  }
  const RotaryCache rope(6, 12);
  const Tensor x = random_input({2, 3, 6}, test_seed(), kFloat64, true);
  EXPECT_TRUE(gradcheck(
      [&](const TensorList& in) {
        return rope.at(in[0], tensor<int64_t>({9, 2, 4}));
      },
      {x}));
  EXPECT_NABLA_ERROR(rope.at(random_input({1, 3, 6}, 1), tensor<int64_t>({0, 1})), "positions of shape (3)");
  EXPECT_NABLA_ERROR(rope.at(random_input({1, 2, 6}, 1), tensor<int64_t>({0, 12})), "position 12",
                     "max_positions 12");
}

TEST(RotaryCache, Llama3ScalingKeepsSlowsAndBlendsByWavelength) {
  // Head size 16, base 10000: wavelengths 2 pi 10000^(2i/16) run from 6.3 to about 19,000.
  const RotaryScaling scaling{
      .factor = 8, .low_freq_factor = 1, .high_freq_factor = 4, .original_max_positions = 1024};
  const std::vector<double> plain = rotary_frequencies(16, 10000),
                            scaled = rotary_frequencies(16, 10000, scaling);
  ASSERT_EQ(scaled.size(), 8u);
  int kept = 0, slowed = 0, blended = 0;
  for (size_t i = 0; i < plain.size(); ++i) {
    EXPECT_DOUBLE_EQ(plain[i], std::pow(10000.0, -2.0 * static_cast<double>(i) / 16));
    const double wavelength = 2 * std::numbers::pi / plain[i];
    if (wavelength < 1024.0 / 4) {
      EXPECT_EQ(scaled[i], plain[i]) << i;
      ++kept;
    } else if (wavelength > 1024.0) {
      EXPECT_DOUBLE_EQ(scaled[i], plain[i] / 8) << i;
      ++slowed;
    } else {  // strictly between the two: a blend, monotone in the wavelength
      EXPECT_LT(scaled[i], plain[i]) << i;
      EXPECT_GT(scaled[i], plain[i] / 8) << i;
      ++blended;
    }
  }
  EXPECT_TRUE(kept > 0 && slowed > 0 && blended > 0) << kept << " " << slowed << " " << blended;
  // The tables hold cos and sin of t * f_i for the rescaled f_i.
  const RotaryCache rope(16, 9, {.scaling = scaling});
  EXPECT_NEAR(rope.cos().select(0, 8).select(0, 7).item<double>(), std::cos(8 * scaled[7]), 1e-7);
  EXPECT_NEAR(rope.sin().select(0, 8).select(0, 7).item<double>(), std::sin(8 * scaled[7]), 1e-7);
}

TEST(RotaryCache, ErrorsNameTheProblem) {
  const RotaryCache rope(8, 10);
  EXPECT_NABLA_ERROR(rope(random_input({1, 11, 8}, 1)), "positions 0 .. 10", "max_positions 10");
  EXPECT_NABLA_ERROR(rope(random_input({1, 4, 8}, 1), 7), "positions 7 .. 10");
  EXPECT_NABLA_ERROR(rope(random_input({1, 4, 6}, 1)), "D = 8");
  EXPECT_NABLA_ERROR(RotaryCache(7, 10), "even");
  EXPECT_NABLA_ERROR(RotaryCache(8, 0), "max_positions must be > 0");
  EXPECT_NABLA_ERROR(RotaryCache(8, 10, {.base = -1}), "base must be finite and > 0");
  EXPECT_NABLA_ERROR(
      RotaryCache(8, 10, {.scaling = RotaryScaling{.low_freq_factor = 4, .high_freq_factor = 1}}),
      "low_freq_factor < high_freq_factor");
  EXPECT_NABLA_ERROR(RotaryCache()(random_input({1, 4, 8}, 1)), "empty");
}

}  // namespace
}  // namespace nabla
