// sort, argsort, topk, cumsum, multinomial and pad on the CPU, against references computed
// another way (std::sort of pairs, running sums by loop, padding by index arithmetic), with
// gradchecks and the errors.
#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <vector>

#include "test_util.h"

namespace nabla {
namespace {

using namespace testing;  // NOLINT: test helpers

TEST(Sort, MatchesSortedPairsAlongEveryDimAndKeepsTiesInOrder) {
  // Few distinct values, so there are many ties.
  const Tensor x = (random_input({3, 4, 5}, test_seed()) * 2.0).to(kInt64).to(kFloat32);
  for (int64_t dim : {0, 1, 2}) {
    for (bool descending : {false, true}) {
      const auto [values, indices] = sort(x, {.dim = dim, .descending = descending});
      const Tensor moved = x.transpose(dim, -1).contiguous();
      const int64_t n = moved.size(-1);
      const auto v = moved.to_vector<float>();
      const auto got_v = values.transpose(dim, -1).contiguous().to_vector<float>();
      const auto got_i = indices.transpose(dim, -1).contiguous().to_vector<int64_t>();
      for (size_t r = 0; r * n < v.size(); ++r) {
        std::vector<std::pair<float, int64_t>> row;
        for (int64_t j = 0; j < n; ++j) row.emplace_back(descending ? -v[r * n + j] : v[r * n + j], j);
        std::sort(row.begin(), row.end());  // pairs: ties ordered by index, i.e. stable
        for (int64_t j = 0; j < n; ++j) {
          ASSERT_EQ(got_i[r * n + j], row[j].second) << dim << descending << " row " << r;
          ASSERT_EQ(got_v[r * n + j], descending ? -row[j].first : row[j].first);
        }
      }
    }
  }
}

TEST(Sort, NanSortsLastAndIntegersAndBoolSortToo) {
  const Tensor x = tensor<float>({3, NAN, -1, 2});
  const auto [v, i] = sort(x);
  EXPECT_EQ(i.to_vector<int64_t>(), (std::vector<int64_t>{2, 3, 0, 1}));
  EXPECT_TRUE(std::isnan(v.to_vector<float>()[3]));
  EXPECT_EQ(argsort(x, {.descending = true}).to_vector<int64_t>(), (std::vector<int64_t>{1, 0, 3, 2}));
  EXPECT_EQ(sort(tensor<int64_t>({5, -3, 9})).first.to_vector<int64_t>(), (std::vector<int64_t>{-3, 5, 9}));
  const Tensor b = tensor<uint8_t>({1, 0, 1, 0}).to(kBool);
  EXPECT_EQ(argsort(b).to_vector<int64_t>(), (std::vector<int64_t>{1, 3, 0, 2}));
}

TEST(Topk, LargestAndSmallestWithGradients) {
  const Tensor x = random_input({4, 9}, test_seed(), kFloat64, true);
  const auto [top, where] = topk(x, 3);
  const auto [low, where_low] = topk(x, 2, {.largest = false});
  const auto v = x.detach().to_vector<double>();
  for (int64_t r = 0; r < 4; ++r) {
    std::vector<double> row(v.begin() + r * 9, v.begin() + (r + 1) * 9);
    std::vector<double> sorted = row;
    std::sort(sorted.begin(), sorted.end());
    for (int64_t j = 0; j < 3; ++j) {
      EXPECT_EQ(top.select(0, r).select(0, j).item<double>(), sorted[8 - j]);
      EXPECT_EQ(row[where.select(0, r).select(0, j).item<int64_t>()], sorted[8 - j]);
    }
    EXPECT_EQ(low.select(0, r).select(0, 0).item<double>(), sorted[0]);
  }
  EXPECT_TRUE(gradcheck([](const TensorList& in) { return topk(in[0], 3).first; }, {x}));
  EXPECT_TRUE(gradcheck([](const TensorList& in) { return sort(in[0], {.dim = 0}).first; }, {x}));
  EXPECT_NABLA_ERROR(topk(x, 10), "topk", "k must be in [0, 9]");
}

TEST(Cumsum, MatchesRunningSumsAndPromotesIntegers) {
  const Tensor x = random_input({3, 4, 5}, test_seed());
  for (int64_t dim : {0, 1, -1}) {
    const int64_t d = dim < 0 ? dim + 3 : dim;
    const Tensor moved = x.transpose(d, -1).contiguous();
    auto v = moved.to_vector<double>();
    const int64_t n = moved.size(-1);
    for (size_t r = 0; r * n < v.size(); ++r)
      for (int64_t j = 1; j < n; ++j) v[r * n + j] += v[r * n + j - 1];
    EXPECT_TRUE(all_close(cumsum(x, dim), tensor<double>(v, moved.sizes()).transpose(d, -1), 1e-12, 1e-12))
        << dim;
  }
  const Tensor i = cumsum(tensor<int32_t>({1, 2, 3, 4}), 0);
  EXPECT_EQ(i.dtype(), kInt64);
  EXPECT_EQ(i.to_vector<int64_t>(), (std::vector<int64_t>{1, 3, 6, 10}));
  EXPECT_EQ(cumsum(tensor<uint8_t>({1, 0, 1}).to(kBool), 0).to_vector<int64_t>(),
            (std::vector<int64_t>{1, 1, 2}));
  const Tensor h = cumsum(x.to(kBFloat16), 2);
  EXPECT_EQ(h.dtype(), kBFloat16);
  EXPECT_TRUE(all_close(h, cumsum(x.to(kBFloat16).to(kFloat64), 2), 1e-2, 1e-2));
  EXPECT_TRUE(gradcheck([](const TensorList& in) { return cumsum(in[0], 1); },
                        {random_input({3, 6}, test_seed() + 1, kFloat64, true)}));
}

TEST(Multinomial, DrawsFollowTheProbabilitiesAndNeverPickZero) {
  Generator gen(test_seed());
  const Tensor p = tensor<float>({0.1f, 0.0f, 0.6f, 0.3f, 0.0f});  // unnormalized is fine too
  const int64_t draws = 20000;
  const Tensor rows = p.unsqueeze(0).expand({draws, 5}).contiguous();
  const auto got = multinomial(rows, 1, {.generator = &gen}).to_vector<int64_t>();
  std::map<int64_t, int64_t> count;
  for (int64_t c : got) ++count[c];
  EXPECT_EQ(count[1] + count[4], 0);
  for (auto [c, prob] : {std::pair<int64_t, double>{0, 0.1}, {2, 0.6}, {3, 0.3}}) {
    const double expect = prob * draws, sd = std::sqrt(draws * prob * (1 - prob));
    EXPECT_NEAR(static_cast<double>(count[c]), expect, 5 * sd) << c;
  }
  // Without replacement: distinct indices, all with mass.
  const auto three = multinomial(p * 2.0, 3, {.generator = &gen}).to_vector<int64_t>();
  std::vector<int64_t> sorted = three;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, (std::vector<int64_t>{0, 2, 3}));
  EXPECT_EQ(multinomial(p, 7, {.replacement = true, .generator = &gen}).sizes(), (Shape{7}));
  EXPECT_NABLA_ERROR(multinomial(p, 6), "multinomial", "num_samples must be in [1, 5]");
  EXPECT_NABLA_ERROR(multinomial(tensor<float>({0.5f, -0.1f}), 1), "multinomial",
                     "expected finite values >= 0");
  EXPECT_NABLA_ERROR(multinomial(zeros({2, 3}), 1), "multinomial", "no probability mass");
  EXPECT_NABLA_ERROR(multinomial(p, 4), "multinomial", "3 categories of non-zero probability", "4 samples");
}

// The padded tensor by index arithmetic: output position j of a padded dim reads input index
// map(j - before), for the mode's map; constant positions outside read `value`.
Tensor loop_pad(const Tensor& x, const std::vector<int64_t>& pads, PadMode mode, double value) {
  Tensor y = x.to(kFloat64);
  for (size_t i = 0; i < pads.size() / 2; ++i) {
    const int64_t d = y.dim() - 1 - static_cast<int64_t>(i), before = pads[2 * i], after = pads[2 * i + 1];
    const int64_t n = y.size(d), m = n + before + after;
    Shape out_shape = y.sizes();
    out_shape[d] = m;
    const Tensor yc = y.transpose(d, -1).contiguous();
    const auto v = yc.to_vector<double>();
    std::vector<double> o;
    for (size_t r = 0; r < v.size() / static_cast<size_t>(n); ++r) {
      for (int64_t j = 0; j < m; ++j) {
        int64_t s = j - before;
        bool fill = false;
        if (mode == PadMode::Constant) fill = s < 0 || s >= n;
        if (mode == PadMode::Reflect) s = s < 0 ? -s : s >= n ? 2 * (n - 1) - s : s;
        if (mode == PadMode::Replicate) s = std::clamp<int64_t>(s, 0, n - 1);
        if (mode == PadMode::Circular) s = ((s % n) + n) % n;
        o.push_back(fill ? value : v[r * n + s]);
      }
    }
    Shape moved = yc.sizes();
    moved.back() = m;
    y = tensor<double>(o, moved).transpose(d, -1).contiguous();
  }
  return y;
}

TEST(Pad, EveryModeMatchesIndexArithmetic) {
  const Tensor x = random_input({2, 3, 4, 5}, test_seed());
  const std::vector<std::pair<PadMode, std::vector<int64_t>>> cases = {{PadMode::Constant, {1, 2}},
                                                                       {PadMode::Constant, {2, 0, 1, 3}},
                                                                       {PadMode::Reflect, {3, 1, 2, 2}},
                                                                       {PadMode::Replicate, {2, 3, 1, 0}},
                                                                       {PadMode::Circular, {5, 2, 4, 1}}};
  for (const auto& c : cases) {
    const PadMode mode = c.first;
    const std::vector<int64_t>& pads = c.second;
    const Tensor y = pad(x, pads, {.mode = mode, .value = 0.5});
    EXPECT_TRUE(all_close(y, loop_pad(x, pads, mode, 0.5), 0, 0)) << static_cast<int>(mode);
    const Tensor xg = random_input({2, 4, 5}, test_seed() + 1, kFloat64, true);
    EXPECT_TRUE(gradcheck([&](const TensorList& in) { return pad(in[0], pads, {.mode = mode}); }, {xg}))
        << static_cast<int>(mode);
  }
  // Negative constant padding crops.
  EXPECT_TRUE(all_close(pad(x, {-1, -2}), x.narrow(3, 1, 2), 0, 0));
  EXPECT_NABLA_ERROR(pad(x, {5, 0}, {.mode = PadMode::Reflect}), "pad", "reflect padding", "at most 4");
  EXPECT_NABLA_ERROR(pad(x, {1, 2, 3}), "pad", "(before, after) pairs");
}

}  // namespace
}  // namespace nabla
