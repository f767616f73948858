// Public elementwise ops on CUDA against the same ops on the CPU: type promotion, scalar
// operands, clamp and pow, comparisons, where with mixed dtypes, output layouts, in-place ops
// (fast path and fallback, version counters, relu_) and gradients of a composite through
// autograd on CUDA.
#include <limits>

#include "parity_util.h"

namespace nabla {
namespace {

using namespace testing;  // NOLINT: test helpers

struct OpCase {
  const char* name;
  std::function<Tensor(const Tensor&, const Tensor&)> op;
  bool positive = false;
};

std::vector<OpCase> public_ops() {
  return {
      {"a + b", [](const Tensor& a, const Tensor& b) { return a + b; }},
      {"add alpha", [](const Tensor& a, const Tensor& b) { return add(a, b, 0.25); }},
      {"a - b", [](const Tensor& a, const Tensor& b) { return a - b; }},
      {"a * b", [](const Tensor& a, const Tensor& b) { return a * b; }},
      {"a / b", [](const Tensor& a, const Tensor& b) { return a / b; }},
      {"pow(a, b)", [](const Tensor& a, const Tensor& b) { return pow(a, b); }, true},
      {"maximum", [](const Tensor& a, const Tensor& b) { return maximum(a, b); }},
      {"minimum", [](const Tensor& a, const Tensor& b) { return minimum(a, b); }},
      {"lt", [](const Tensor& a, const Tensor& b) { return lt(a, b); }},
      {"ge", [](const Tensor& a, const Tensor& b) { return ge(a, b); }},
      {"a + 2", [](const Tensor& a, const Tensor&) { return a + 2.0; }},
      {"3 - a", [](const Tensor& a, const Tensor&) { return 3.0 - a; }},
      {"a * 0.5", [](const Tensor& a, const Tensor&) { return a * 0.5; }},
      {"a / 4", [](const Tensor& a, const Tensor&) { return a / 4.0; }},
      {"2 / a", [](const Tensor& a, const Tensor&) { return 2.0 / a; }},
      {"pow(a, 2)", [](const Tensor& a, const Tensor&) { return pow(a, 2.0); }},
      {"pow(a, 1.5)", [](const Tensor& a, const Tensor&) { return pow(a, 1.5); }, true},
      {"clamp", [](const Tensor& a, const Tensor&) { return clamp(a, -0.5, 1.5); }},
      {"clamp min", [](const Tensor& a, const Tensor&) { return clamp(a, 0.25, std::nullopt); }},
      {"clamp max", [](const Tensor& a, const Tensor&) { return clamp(a, std::nullopt, 0.75); }},
      {"gt 0.5", [](const Tensor& a, const Tensor&) { return gt(a, 0.5); }},
      {"ne 1", [](const Tensor& a, const Tensor&) { return ne(a, 1.0); }},
      {"exp", [](const Tensor& a, const Tensor&) { return exp(a); }},
      {"log", [](const Tensor& a, const Tensor&) { return log(a); }, true},
      {"expm1", [](const Tensor& a, const Tensor&) { return expm1(a); }},
      {"log1p", [](const Tensor& a, const Tensor&) { return log1p(a); }, true},
      {"erf", [](const Tensor& a, const Tensor&) { return erf(a); }},
      {"sin", [](const Tensor& a, const Tensor&) { return sin(a); }},
      {"cos", [](const Tensor& a, const Tensor&) { return cos(a); }},
      {"sqrt", [](const Tensor& a, const Tensor&) { return sqrt(a); }, true},
      {"rsqrt", [](const Tensor& a, const Tensor&) { return rsqrt(a); }, true},
      {"reciprocal", [](const Tensor& a, const Tensor&) { return reciprocal(a); }},
      {"sigmoid", [](const Tensor& a, const Tensor&) { return sigmoid(a); }},
      {"tanh", [](const Tensor& a, const Tensor&) { return tanh(a); }},
      {"gelu", [](const Tensor& a, const Tensor&) { return gelu(a); }},
      {"gelu tanh", [](const Tensor& a, const Tensor&) { return gelu(a, {.tanh_approximation = true}); }},
      {"silu", [](const Tensor& a, const Tensor&) { return silu(a); }},
      {"relu", [](const Tensor& a, const Tensor&) { return relu(a); }},
      {"neg abs sign", [](const Tensor& a, const Tensor&) { return -abs(a) * sign(a); }},
      {"threshold_backward", [](const Tensor& a, const Tensor& b) { return threshold_backward(a, b); }},
  };
}

// Every public op in every numeric dtype (integers exercise promotion to float32 where the op
// needs floats) on channels_last and permuted inputs.
TEST(CudaParityFrontend, PublicOpsMatchTheCpuInEveryDtype) {
  SKIP_WITHOUT_GPU();
  uint64_t seed = test_seed();
  for (DType dtype : kNumericDTypes) {
    for (const OpCase& c : public_ops()) {
      if (!is_floating(dtype) && std::string(c.name) == "threshold_backward") continue;
      Tensor a =
          random_values({2, 4, 5, 3}, ++seed, dtype, c.positive).permute({0, 3, 1, 2});  // channels_last
      Tensor b = random_values({3, 4, 5, 2}, ++seed, dtype, c.positive).permute({3, 0, 1, 2});  // permuted
      Tensor expected = c.op(a, b);
      Tensor actual = c.op(to_cuda(a), to_cuda(b));
      EXPECT_TRUE(matches_cpu(actual, expected)) << context(c.name, dtype);
      EXPECT_EQ(actual.strides(), expected.strides()) << context(c.name, dtype, "output layout");
    }
  }
}

TEST(CudaParityFrontend, MixedDtypesPromoteLikeTheCpu) {
  SKIP_WITHOUT_GPU();
  uint64_t seed = test_seed();
  const std::vector<std::pair<DType, DType>> pairs = {
      {kFloat16, kFloat32}, {kBFloat16, kFloat16}, {kInt32, kFloat16}, {kUInt8, kInt64},
      {kBool, kFloat32},    {kInt64, kFloat64},    {kUInt8, kInt32},   {kBool, kInt32}};
  for (auto [da, db] : pairs) {
    Tensor a = random_values({3, 1, 5}, ++seed, da), b = random_values({4, 5}, ++seed, db);
    for (const OpCase& c : public_ops()) {
      if (std::string(c.name) == "threshold_backward") continue;
      if (c.positive && (da == kBool || db == kBool)) continue;
      Tensor ap = c.positive ? abs(a) : a, bp = c.positive ? abs(b) : b;
      Tensor expected, actual;
      try {
        expected = c.op(ap, bp);
      } catch (const Error&) {
        EXPECT_THROW(c.op(to_cuda(ap), to_cuda(bp)), Error) << c.name;  // same rejection on CUDA
        continue;
      }
      actual = c.op(to_cuda(ap), to_cuda(bp));
      EXPECT_TRUE(matches_cpu(actual, expected)) << c.name << " " << dtype_name(da) << "," << dtype_name(db);
    }
  }
}

TEST(CudaParityFrontend, WhereWithMixedDtypesAndBroadcastMatchesTheCpu) {
  SKIP_WITHOUT_GPU();
  uint64_t seed = test_seed();
  for (DType dtype : kAllDTypes) {
    Tensor cond = random_values({4, 1, 3}, ++seed, kBool);
    Tensor a = random_values({5, 3}, ++seed, dtype), b = random_values({4, 5, 1}, ++seed, kInt32);
    Tensor expected = where(cond, a, b);
    EXPECT_TRUE(matches_cpu(where(to_cuda(cond), to_cuda(a), to_cuda(b)), expected)) << dtype_name(dtype);
  }
}

// In-place ops: the fast path writes into self (also a strided self), the fallback (a result
// dtype that differs from self's) goes through a copy; both bump the version.
TEST(CudaParityFrontend, InPlaceOpsMatchTheCpu) {
  SKIP_WITHOUT_GPU();
  uint64_t seed = test_seed();
  using InPlace = std::function<void(Tensor&, const Tensor&)>;
  const std::vector<std::pair<const char*, InPlace>> cases = {
      {"add_", [](Tensor& s, const Tensor& o) { s.add_(o, 0.5); }},
      {"sub_", [](Tensor& s, const Tensor& o) { sub_(s, o, 2.0); }},
      {"mul_", [](Tensor& s, const Tensor& o) { s.mul_(o); }},
      {"div_", [](Tensor& s, const Tensor& o) { s.div_(o); }},
      {"+= scalar", [](Tensor& s, const Tensor&) { s += 1.25; }},
      {"*= scalar", [](Tensor& s, const Tensor&) { s *= -3.0; }},
      {"/= scalar", [](Tensor& s, const Tensor&) { s /= 4.0; }},
      {"neg_", [](Tensor& s, const Tensor&) { neg_(s); }},
      {"exp_", [](Tensor& s, const Tensor&) { exp_(s); }},
      {"sigmoid_", [](Tensor& s, const Tensor&) { sigmoid_(s); }},
      {"tanh_", [](Tensor& s, const Tensor&) { tanh_(s); }},
      {"relu_", [](Tensor& s, const Tensor&) { s.relu_(); }},
      {"clamp_", [](Tensor& s, const Tensor&) { s.clamp_(-0.5, 0.75); }},
      {"fill_", [](Tensor& s, const Tensor&) { s.fill_(2.5); }},
      {"zero_", [](Tensor& s, const Tensor&) { s.zero_(); }},
      {"copy_", [](Tensor& s, const Tensor& o) { s.copy_(o); }},
  };
  for (DType dtype : {kFloat32, kFloat16, kBFloat16, kFloat64}) {
    for (const auto& [name, fn] : cases) {
      for (bool strided : {false, true}) {
        Tensor self = random_values({4, 6}, ++seed, dtype);
        Tensor other = random_values({6}, ++seed, kFloat32);  // broadcast, and a second dtype
        Tensor self_cpu = strided ? self.t() : self.clone();
        Tensor self_cuda = strided ? to_cuda(self).t() : to_cuda(self);
        uint32_t version = self_cuda.version();
        Tensor other_cpu = strided ? other.narrow(0, 0, 4) : other;
        fn(self_cpu, other_cpu);
        fn(self_cuda, to_cuda(other_cpu));
        EXPECT_TRUE(matches_cpu(self_cuda, self_cpu)) << context(name, dtype, strided ? "strided" : "");
        EXPECT_GT(self_cuda.version(), version) << name;
        EXPECT_TRUE(self_cuda.is_cuda());
      }
    }
  }
  // Integer self: in-place float results are rejected on both devices alike.
  Tensor ints = to_cuda(random_values({5}, ++seed, kInt64));
  EXPECT_NABLA_ERROR(ints.mul_(0.5), "mul_", "in place");
  ints.add_(3.0);  // whole numbers stay integers
  EXPECT_EQ(ints.dtype(), kInt64);
}

// Gradients of a composite built from the elementwise ops (no broadcasting, so no reductions
// are needed in backward), on CUDA against the same graph on the CPU.
TEST(CudaParityFrontend, CompositeGradientsMatchTheCpu) {
  SKIP_WITHOUT_GPU();
  uint64_t seed = test_seed();
  for (DType dtype : {kFloat32, kFloat64}) {
    Tensor x0 = random_values({3, 4, 5}, ++seed, dtype), w0 = random_values({3, 4, 5}, ++seed, dtype);
    Tensor g = random_values({3, 4, 5}, ++seed, dtype);
    auto run = [&](Device device) {
      Tensor x = x0.to(device).detach().requires_grad_(true);
      Tensor w = w0.to(device).detach().requires_grad_(true);
      Tensor h = gelu(x * w + 0.5) - sigmoid(w) / (abs(x) + 1.0);
      Tensor k = where(gt(x, 0.0), tanh(h), silu(h)) * exp(clamp(w, -1.0, 1.0));
      Tensor y =
          maximum(k, pow(x, 2.0) * 0.1) + relu(-x) * sqrt(abs(w)) + gelu(h, {.tanh_approximation = true});
      y.backward(g.to(device));
      return std::pair{x.grad(), w.grad()};
    };
    auto [gx_cpu, gw_cpu] = run(Device::cpu());
    auto [gx_cuda, gw_cuda] = run(Device::cuda());
    Tolerance tol = dtype == kFloat32 ? Tolerance{1e-5, 1e-5} : tolerance_for(dtype);
    EXPECT_TRUE(matches_cpu(gx_cuda, gx_cpu, tol)) << dtype_name(dtype);
    EXPECT_TRUE(matches_cpu(gw_cuda, gw_cpu, tol)) << dtype_name(dtype);
  }
}

TEST(CudaParityFrontend, InPlaceReluKeepsItsGradientOnCuda) {
  SKIP_WITHOUT_GPU();
  Tensor x0 = random_values({64}, test_seed(), kFloat32);
  auto run = [&](Device device) {
    Tensor x = x0.to(device).detach().requires_grad_(true);
    Tensor h = x * 2.0;
    h.relu_();
    (h * h).backward(ones({64}, {.device = device}));
    return x.grad();
  };
  EXPECT_TRUE(matches_cpu(run(Device::cuda()), run(Device::cpu())));
}

}  // namespace
}  // namespace nabla
