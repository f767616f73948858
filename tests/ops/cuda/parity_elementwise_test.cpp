// CUDA elementwise kernels against the CPU kernels: every UnaryOp and BinaryOp kind and where,
// for every dtype each supports, on inputs in six layouts (contiguous, permuted, sliced,
// channels_last, broadcast, unaligned), with broadcast operand shapes, NaN and infinity
// semantics, and sizes past a million elements (vectorized path with odd tails, and the same
// data one element off alignment). The kernels are called directly (ops/{cpu,cuda}/kernels.h)
// so that kinds no public op reaches in every dtype (Sub, the fused backward kinds) are covered
// too; parity_frontend_test.cpp covers the public ops.
#include <algorithm>
#include <limits>

#include "nabla/ops/cpu/kernels.h"
#include "nabla/ops/cuda/elementwise/kernels.h"
#include "parity_util.h"

namespace nabla {
namespace {

using namespace testing;  // NOLINT: test helpers
using ops::BinaryOp;
using ops::UnaryOp;
using ops::UnaryParams;

constexpr double kInf = std::numeric_limits<double>::infinity();

struct UnaryKind {
  UnaryOp op;
  const char* name;
  UnaryParams params = {};
  bool positive = false;  // domain needs x > 0
};

std::vector<UnaryKind> float_unary_kinds() {
  return {
      {UnaryOp::Neg, "neg"},
      {UnaryOp::Abs, "abs"},
      {UnaryOp::Sign, "sign"},
      {UnaryOp::Exp, "exp"},
      {UnaryOp::Expm1, "expm1"},
      {UnaryOp::Log, "log", {}, true},
      {UnaryOp::Log1p, "log1p", {}, true},
      {UnaryOp::Sqrt, "sqrt", {}, true},
      {UnaryOp::Rsqrt, "rsqrt", {}, true},
      {UnaryOp::Reciprocal, "reciprocal"},
      {UnaryOp::Relu, "relu"},
      {UnaryOp::Sigmoid, "sigmoid"},
      {UnaryOp::Tanh, "tanh"},
      {UnaryOp::Erf, "erf"},
      {UnaryOp::Sin, "sin"},
      {UnaryOp::Cos, "cos"},
      {UnaryOp::Gelu, "gelu"},
      {UnaryOp::GeluTanh, "gelu_tanh"},
      {UnaryOp::Silu, "silu"},
      {UnaryOp::LeakyRelu, "leaky_relu", {.a = 0.2}},
      {UnaryOp::Elu, "elu", {.a = 1.3}},
      {UnaryOp::Hardswish, "hardswish"},
      {UnaryOp::Hardsigmoid, "hardsigmoid"},
      {UnaryOp::Softplus, "softplus", {.a = 2.0, .b = 1.0}},
      {UnaryOp::Mish, "mish"},
      {UnaryOp::AddScalar, "add_scalar", {.a = 1.5}},
      {UnaryOp::MulScalar, "mul_scalar", {.a = -2.5}},
      {UnaryOp::RSubScalar, "rsub_scalar", {.a = 0.75}},
      {UnaryOp::RDivScalar, "rdiv_scalar", {.a = 1.25}},
      {UnaryOp::PowScalar, "pow_2", {.a = 2.0}},
      {UnaryOp::PowScalar, "pow_half", {.a = 0.5}, true},
      {UnaryOp::PowScalar, "pow_3", {.a = 3.0}},
      {UnaryOp::PowScalar, "pow_-1.5", {.a = -1.5}, true},
      {UnaryOp::Clamp, "clamp", {.a = -0.5, .b = 1.25}},
      {UnaryOp::Clamp, "clamp_max_only", {.a = -kInf, .b = 0.3}},
      {UnaryOp::Clamp, "clamp_min_only", {.a = -0.2, .b = kInf}},
  };
}

// Integer dtypes: the ops defined on them, with integral scalars (fractional ones make the
// front end compute in float32) that are non-negative where uint8 must represent them.
std::vector<UnaryKind> integer_unary_kinds(bool is_unsigned) {
  double neg = is_unsigned ? 1.0 : -1.0;
  return {
      {UnaryOp::Neg, "neg"},
      {UnaryOp::Abs, "abs"},
      {UnaryOp::Sign, "sign"},
      {UnaryOp::Relu, "relu"},
      {UnaryOp::AddScalar, "add_scalar", {.a = 3.0 * neg}},
      {UnaryOp::MulScalar, "mul_scalar", {.a = 3.0 * neg}},
      {UnaryOp::RSubScalar, "rsub_scalar", {.a = 7.0}},
      {UnaryOp::Clamp, "clamp", {.a = 2.5, .b = 9.75}},
      {UnaryOp::Clamp, "clamp_wide", {.a = -5.0, .b = 7.0}},
      {UnaryOp::Clamp, "clamp_max_only", {.a = -kInf, .b = 4.0}},
  };
}

std::vector<UnaryKind> comparison_kinds() {
  return {{UnaryOp::EqScalar, "eq", {.a = 1.0}},  {UnaryOp::NeScalar, "ne", {.a = 1.0}},
          {UnaryOp::LtScalar, "lt", {.a = 0.5}},  {UnaryOp::LeScalar, "le", {.a = 1.0}},
          {UnaryOp::GtScalar, "gt", {.a = -1.0}}, {UnaryOp::GeScalar, "ge", {.a = 2.0}}};
}

// Small whole values (including repeats of the comparison scalars), so == and != see hits.
Tensor grid_values(const Shape& sizes, uint64_t seed, DType dtype) {
  Generator gen(seed);
  bool is_unsigned = dtype == kUInt8 || dtype == kBool;
  Tensor v = randint(is_unsigned ? 0 : -3, 4, sizes, {.dtype = kInt64}, &gen);
  return dtype == kBool ? gt(v, 1.0) : v.to(dtype);
}

// Runs `kind` through both backends on one layout of fresh inputs and compares.
void check_unary(const UnaryKind& kind, DType dtype, const Layout& layout, uint64_t seed, bool grid = false) {
  Tensor base = grid ? grid_values(layout.storage, seed, dtype)
                     : random_values(layout.storage, seed, dtype, kind.positive);
  Tensor in_cpu = layout.view(base), in_cuda = layout.view(to_cuda(base));
  DType out_dtype = ops::is_comparison(kind.op) ? kBool : dtype;
  // Outputs take the input's layout where it has one, as the front end does.
  MemoryFormat format = in_cpu.suggest_memory_format();
  Tensor out_cpu = Tensor::empty(in_cpu.sizes(), {.dtype = out_dtype, .memory_format = format});
  Tensor out_cuda =
      Tensor::empty(in_cpu.sizes(), {.dtype = out_dtype, .device = Device::cuda(), .memory_format = format});
  ops::cpu::unary(kind.op, in_cpu, out_cpu, kind.params);
  ops::cuda::unary(kind.op, in_cuda, out_cuda, kind.params);
  EXPECT_TRUE(matches_cpu(out_cuda, out_cpu)) << context(kind.name, dtype, layout.name);
}

TEST(CudaParityElementwise, EveryUnaryOpMatchesTheCpuInEveryDtypeAndLayout) {
  SKIP_WITHOUT_GPU();
  uint64_t seed = test_seed();
  for (DType dtype : kNumericDTypes) {
    std::vector<UnaryKind> kinds =
        is_floating(dtype) ? float_unary_kinds() : integer_unary_kinds(dtype == kUInt8);
    for (const UnaryKind& kind : kinds) {
      for (const Layout& layout : layouts_2345()) check_unary(kind, dtype, layout, ++seed);
    }
  }
}

TEST(CudaParityElementwise, ScalarComparisonsMatchTheCpuInEveryDtypeAndLayout) {
  SKIP_WITHOUT_GPU();
  uint64_t seed = test_seed();
  for (DType dtype : kNumericDTypes) {
    for (const UnaryKind& kind : comparison_kinds()) {
      for (const Layout& layout : layouts_2345()) check_unary(kind, dtype, layout, ++seed, true);
    }
  }
}

struct BinaryKind {
  BinaryOp op;
  const char* name;
  double alpha = 1.0;
  bool positive = false;  // both operands > 0
};

std::vector<BinaryKind> binary_kinds(DType dtype) {
  if (dtype == kBool) {
    return {{BinaryOp::Add, "add"},         {BinaryOp::Mul, "mul"},
            {BinaryOp::Maximum, "maximum"}, {BinaryOp::Minimum, "minimum"},
            {BinaryOp::Eq, "eq"},           {BinaryOp::Ne, "ne"},
            {BinaryOp::Lt, "lt"},           {BinaryOp::Le, "le"},
            {BinaryOp::Gt, "gt"},           {BinaryOp::Ge, "ge"}};
  }
  std::vector<BinaryKind> kinds = {
      {BinaryOp::Add, "add"},         {BinaryOp::Sub, "sub"},         {BinaryOp::Mul, "mul"},
      {BinaryOp::Maximum, "maximum"}, {BinaryOp::Minimum, "minimum"}, {BinaryOp::Eq, "eq"},
      {BinaryOp::Ne, "ne"},           {BinaryOp::Lt, "lt"},           {BinaryOp::Le, "le"},
      {BinaryOp::Gt, "gt"},           {BinaryOp::Ge, "ge"},
  };
  if (is_floating(dtype)) {
    kinds.push_back({BinaryOp::Add, "add_alpha", -2.5});
    kinds.push_back({BinaryOp::Sub, "sub_alpha", 0.5});
    kinds.push_back({BinaryOp::Div, "div"});
    kinds.push_back({BinaryOp::Pow, "pow", 1.0, true});
    kinds.push_back({BinaryOp::ThresholdBackward, "threshold_backward"});
    kinds.push_back({BinaryOp::SigmoidBackward, "sigmoid_backward"});
    kinds.push_back({BinaryOp::TanhBackward, "tanh_backward"});
    kinds.push_back({BinaryOp::GeluBackward, "gelu_backward"});
    kinds.push_back({BinaryOp::GeluTanhBackward, "gelu_tanh_backward"});
    kinds.push_back({BinaryOp::SiluBackward, "silu_backward"});
    kinds.push_back({BinaryOp::LeakyReluBackward, "leaky_relu_backward", 0.2});
    kinds.push_back({BinaryOp::EluBackward, "elu_backward", 1.3});
    kinds.push_back({BinaryOp::HardswishBackward, "hardswish_backward"});
    kinds.push_back({BinaryOp::HardsigmoidBackward, "hardsigmoid_backward"});
    kinds.push_back({BinaryOp::MishBackward, "mish_backward"});
  } else {
    kinds.push_back({BinaryOp::Add, "add_alpha", dtype == kUInt8 ? 2.0 : -2.0});
  }
  return kinds;
}

// Operand shapes that broadcast to (2, 3, 4, 5) in the kernels.
// The case lists above are checked against the enums (no GPU needed): a kind added to UnaryOp or
// BinaryOp without a parity case here fails this test, in every dtype family the kind is
// defined for (op_kinds.h says which).
template <typename Op, typename Kind>
bool listed(Op op, const std::vector<Kind>& kinds) {
  return std::any_of(kinds.begin(), kinds.end(), [op](const Kind& k) { return k.op == op; });
}

TEST(CudaParityElementwise, EveryOpKindHasAParityCase) {
  std::vector<UnaryKind> floating = float_unary_kinds(), comparisons = comparison_kinds();
  std::vector<UnaryKind> integers = integer_unary_kinds(false);
  for (size_t i = 0; i < static_cast<size_t>(UnaryOp::Count); ++i) {
    auto op = static_cast<UnaryOp>(i);
    if (ops::is_comparison(op)) {
      EXPECT_TRUE(listed(op, comparisons))
          << "UnaryOp " << ops::name(op) << ": no case in comparison_kinds()";
      continue;
    }
    EXPECT_TRUE(listed(op, floating)) << "UnaryOp " << ops::name(op) << ": no case in float_unary_kinds()";
    if (!ops::is_float_only(op)) {
      EXPECT_TRUE(listed(op, integers))
          << "UnaryOp " << ops::name(op) << ": no case in integer_unary_kinds()";
    }
  }
  std::vector<BinaryKind> floating_binary = binary_kinds(kFloat32), integer_binary = binary_kinds(kInt32),
                          bool_binary = binary_kinds(kBool);
  for (size_t i = 0; i < static_cast<size_t>(BinaryOp::Count); ++i) {
    auto op = static_cast<BinaryOp>(i);
    EXPECT_TRUE(listed(op, floating_binary)) << "BinaryOp " << ops::name(op) << ": no float case";
    if (ops::is_integer_op(op)) EXPECT_TRUE(listed(op, integer_binary)) << "BinaryOp " << ops::name(op);
    if (ops::is_logical_op(op)) EXPECT_TRUE(listed(op, bool_binary)) << "BinaryOp " << ops::name(op);
  }
}

struct BroadcastCase {
  const char* name;
  Shape a, b;
};
const std::vector<BroadcastCase> kBroadcasts = {
    {"rows", {2, 3, 4, 5}, {3, 1, 5}},  {"last dim", {2, 3, 4, 5}, {5}},      {"scalar", {2, 3, 4, 5}, {}},
    {"scalar first", {}, {2, 3, 4, 5}}, {"both", {2, 1, 4, 1}, {1, 3, 1, 5}},
};

void check_binary(const BinaryKind& kind, DType dtype, const Tensor& a, const Tensor& b, const Tensor& a_cuda,
                  const Tensor& b_cuda, const std::string& where) {
  Shape sizes = broadcast_shapes(a.sizes(), b.sizes(), "test");
  DType out_dtype = ops::is_comparison(kind.op) ? kBool : dtype;
  MemoryFormat format = a.sizes() == sizes ? a.suggest_memory_format() : MemoryFormat::Contiguous;
  Tensor out_cpu = Tensor::empty(sizes, {.dtype = out_dtype, .memory_format = format});
  Tensor out_cuda =
      Tensor::empty(sizes, {.dtype = out_dtype, .device = Device::cuda(), .memory_format = format});
  ops::cpu::binary(kind.op, a, b, out_cpu, kind.alpha);
  ops::cuda::binary(kind.op, a_cuda, b_cuda, out_cuda, kind.alpha);
  EXPECT_TRUE(matches_cpu(out_cuda, out_cpu)) << context(kind.name, dtype, where.c_str());
}

Tensor binary_input(const BinaryKind& kind, const Shape& sizes, uint64_t seed, DType dtype) {
  return ops::is_comparison(kind.op) || kind.op == BinaryOp::Maximum || kind.op == BinaryOp::Minimum
             ? grid_values(sizes, seed, dtype)  // ties matter for these
             : random_values(sizes, seed, dtype, kind.positive);
}

TEST(CudaParityElementwise, EveryBinaryOpMatchesTheCpuInEveryDtypeAndLayout) {
  SKIP_WITHOUT_GPU();
  uint64_t seed = test_seed();
  for (DType dtype : kAllDTypes) {
    for (const BinaryKind& kind : binary_kinds(dtype)) {
      for (const Layout& layout : layouts_2345()) {
        Tensor a = binary_input(kind, layout.storage, ++seed, dtype);
        Tensor b = binary_input(kind, layout.storage, ++seed, dtype);
        check_binary(kind, dtype, layout.view(a), layout.view(b), layout.view(to_cuda(a)),
                     layout.view(to_cuda(b)), layout.name);
      }
    }
  }
}

TEST(CudaParityElementwise, BinaryOpsBroadcastLikeTheCpu) {
  SKIP_WITHOUT_GPU();
  uint64_t seed = test_seed();
  for (DType dtype : kAllDTypes) {
    for (const BinaryKind& kind : binary_kinds(dtype)) {
      for (const BroadcastCase& bc : kBroadcasts) {
        Tensor a = binary_input(kind, bc.a, ++seed, dtype);
        Tensor b = binary_input(kind, bc.b, ++seed, dtype);
        check_binary(kind, dtype, a, b, to_cuda(a), to_cuda(b), bc.name);
      }
    }
  }
}

TEST(CudaParityElementwise, Float32WithA16BitTensorNeedsNoCopyAndMatchesTheCpu) {
  // ops::is_mixed_float_pair: +, - and * read float32 and float16/bfloat16 as they are (a
  // transposed and a broadcast operand included); the CPU promotes with a copy first.
  SKIP_WITHOUT_GPU();
  uint64_t seed = test_seed();
  for (DType half : {kFloat16, kBFloat16}) {
    const Tensor wide = random_values({37, 64}, ++seed, kFloat32);
    const Tensor narrow = random_values({64, 37}, ++seed, half).t();  // (37, 64), transposed
    const Tensor row = random_values({64}, ++seed, half);
    for (int which = 0; which < 3; ++which) {
      const auto op = [&](const Tensor& a, const Tensor& b) {
        return which == 0 ? add(a, b, 0.5) : which == 1 ? sub(a, b) : mul(a, b);
      };
      for (const auto& [a, b] : {std::pair{wide, narrow}, std::pair{narrow, wide}, std::pair{wide, row}}) {
        const Tensor expected = op(a, b);
        const Tensor got = op(to_cuda(a), to_cuda(b));
        EXPECT_EQ(got.dtype(), kFloat32);
        EXPECT_TRUE(matches_cpu(got, expected, Tolerance{1e-6, 1e-6})) << dtype_name(half) << " op " << which;
      }
    }
  }
}

TEST(CudaParityElementwise, WhereMatchesTheCpuForEveryDtypeLayoutAndBroadcast) {
  SKIP_WITHOUT_GPU();
  uint64_t seed = test_seed();
  for (DType dtype : kAllDTypes) {
    for (const Layout& layout : layouts_2345()) {
      Tensor c = random_values(layout.storage, ++seed, kBool);
      Tensor a = random_values(layout.storage, ++seed, dtype),
             b = random_values(layout.storage, ++seed, dtype);
      Tensor out_cpu = Tensor::empty({2, 3, 4, 5}, {.dtype = dtype});
      Tensor out_cuda = Tensor::empty({2, 3, 4, 5}, {.dtype = dtype, .device = Device::cuda()});
      ops::cpu::where(layout.view(c), layout.view(a), layout.view(b), out_cpu);
      ops::cuda::where(layout.view(to_cuda(c)), layout.view(to_cuda(a)), layout.view(to_cuda(b)), out_cuda);
      EXPECT_TRUE(matches_cpu(out_cuda, out_cpu)) << context("where", dtype, layout.name);
    }
    // cond, a and b each broadcast from a different shape.
    Tensor c = random_values({2, 1, 4, 1}, ++seed, kBool);
    Tensor a = random_values({3, 1, 5}, ++seed, dtype), b = random_values({}, ++seed, dtype);
    Tensor out_cpu = Tensor::empty({2, 3, 4, 5}, {.dtype = dtype});
    Tensor out_cuda = Tensor::empty({2, 3, 4, 5}, {.dtype = dtype, .device = Device::cuda()});
    ops::cpu::where(c, a, b, out_cpu);
    ops::cuda::where(to_cuda(c), to_cuda(a), to_cuda(b), out_cuda);
    EXPECT_TRUE(matches_cpu(out_cuda, out_cpu)) << context("where", dtype, "broadcast");
  }
}

TEST(CudaParityElementwise, NanAndInfinityFollowTheCpuRules) {
  SKIP_WITHOUT_GPU();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  // clamp passes NaN through, maximum/minimum give NaN if either side is NaN, relu maps NaN to 0.
  std::vector<double> xs = {nan, kInf, -kInf, -0.0, 0.0, 1.5, -2.0, nan};
  std::vector<double> ys = {1.0, nan, 3.0, 0.0, -0.0, kInf, -kInf, nan};
  for (DType dtype : kFloatDTypes) {
    Tensor x = tensor<double>(xs).to(dtype), y = tensor<double>(ys).to(dtype);
    Tensor xd = to_cuda(x), yd = to_cuda(y);
    for (const UnaryKind& kind : float_unary_kinds()) {
      Tensor out_cpu = Tensor::empty(x.sizes(), {.dtype = dtype});
      Tensor out_cuda = Tensor::empty(x.sizes(), {.dtype = dtype, .device = Device::cuda()});
      ops::cpu::unary(kind.op, x, out_cpu, kind.params);
      ops::cuda::unary(kind.op, xd, out_cuda, kind.params);
      EXPECT_TRUE(matches_cpu(out_cuda, out_cpu)) << context(kind.name, dtype, "nan/inf");
    }
    for (const UnaryKind& kind : comparison_kinds()) {
      Tensor out_cpu = Tensor::empty(x.sizes(), {.dtype = kBool});
      Tensor out_cuda = Tensor::empty(x.sizes(), {.dtype = kBool, .device = Device::cuda()});
      ops::cpu::unary(kind.op, x, out_cpu, kind.params);
      ops::cuda::unary(kind.op, xd, out_cuda, kind.params);
      EXPECT_TRUE(matches_cpu(out_cuda, out_cpu)) << context(kind.name, dtype, "nan/inf");
    }
    for (const BinaryKind& kind : binary_kinds(dtype)) check_binary(kind, dtype, x, y, xd, yd, "nan/inf");
  }
  // Spot-check the rules themselves on CUDA (float32).
  Tensor x = to_cuda(tensor<double>(xs).to(kFloat32)), y = to_cuda(tensor<double>(ys).to(kFloat32));
  std::vector<float> mx = maximum(x, y).cpu().to_vector<float>();
  EXPECT_TRUE(std::isnan(mx[0]) && std::isnan(mx[1]) && std::isnan(mx[7]));
  EXPECT_EQ(mx[2], 3.0f);
  std::vector<float> cl = clamp(x, -1.0, 1.0).cpu().to_vector<float>();
  EXPECT_TRUE(std::isnan(cl[0]));
  EXPECT_EQ(cl[1], 1.0f);
  EXPECT_EQ(cl[2], -1.0f);
  EXPECT_EQ(relu(x).cpu().to_vector<float>()[0], 0.0f);
}

// > 1M elements: the vectorized grid-stride path with a tail that does not fill a vector, and the
// same data one element in (misaligned, so the strided path runs it).
TEST(CudaParityElementwise, LargeAndUnalignedTensorsMatchTheCpu) {
  SKIP_WITHOUT_GPU();
  uint64_t seed = test_seed();
  const int64_t big = (int64_t{1} << 20) + 3;
  const std::vector<UnaryKind> unary = {{UnaryOp::Relu, "relu"},
                                        {UnaryOp::MulScalar, "mul_scalar", {.a = 3.0}},
                                        {UnaryOp::Exp, "exp"},
                                        {UnaryOp::Gelu, "gelu"},
                                        {UnaryOp::GtScalar, "gt", {.a = 0.5}}};
  for (DType dtype : kNumericDTypes) {
    for (int64_t n : {int64_t{37}, big}) {  // a tail of 1 to 15 elements after the last vector
      Tensor x = random_values({n}, ++seed, dtype), y = random_values({n}, ++seed, dtype);
      Tensor c = random_values({n}, ++seed, kBool);
      for (int64_t start : {0, 1}) {
        std::string where = std::to_string(n - start) + (start == 0 ? "" : " unaligned");
        Tensor xs = x.narrow(0, start, n - start), ys = y.narrow(0, start, n - start),
               cs = c.narrow(0, start, n - start);
        Tensor xd = to_cuda(x).narrow(0, start, n - start), yd = to_cuda(y).narrow(0, start, n - start);
        for (const UnaryKind& kind : unary) {
          if (ops::is_float_only(kind.op) && !is_floating(dtype)) continue;
          DType out_dtype = ops::is_comparison(kind.op) ? kBool : dtype;
          Tensor out_cpu = Tensor::empty({n - start}, {.dtype = out_dtype});
          Tensor out_cuda = Tensor::empty({n - start}, {.dtype = out_dtype, .device = Device::cuda()});
          ops::cpu::unary(kind.op, xs, out_cpu, kind.params);
          ops::cuda::unary(kind.op, xd, out_cuda, kind.params);
          EXPECT_TRUE(matches_cpu(out_cuda, out_cpu)) << context(kind.name, dtype, where.c_str());
        }
        for (BinaryOp op : {BinaryOp::Add, BinaryOp::Mul, BinaryOp::Maximum, BinaryOp::Lt}) {
          check_binary({op, "large binary"}, dtype, xs, ys, xd, yd, where);
        }
        Tensor out_cpu = Tensor::empty({n - start}, {.dtype = dtype});
        Tensor out_cuda = Tensor::empty({n - start}, {.dtype = dtype, .device = Device::cuda()});
        ops::cpu::where(cs, xs, ys, out_cpu);
        ops::cuda::where(to_cuda(c).narrow(0, start, n - start), xd, yd, out_cuda);
        EXPECT_TRUE(matches_cpu(out_cuda, out_cpu)) << context("where", dtype, where.c_str());
      }
    }
  }
}

// Outputs that are views into bigger tensors: only the viewed elements change.
TEST(CudaParityElementwise, StridedOutputsWriteOnlyTheirElements) {
  SKIP_WITHOUT_GPU();
  uint64_t seed = test_seed();
  for (DType dtype : {kFloat32, kFloat16, kInt64}) {
    Tensor big = random_values({6, 7, 8}, ++seed, dtype);
    Tensor big_cuda = to_cuda(big);
    Tensor x = random_values({3, 8, 4}, ++seed, dtype);
    Tensor out_cpu = big.slice(0, 0, 6, 2).transpose(1, 2).narrow(2, 1, 4);  // (3, 8, 4), strided
    Tensor out_cuda = big_cuda.slice(0, 0, 6, 2).transpose(1, 2).narrow(2, 1, 4);
    ops::cpu::unary(UnaryOp::Neg, x, out_cpu, {});
    ops::cuda::unary(UnaryOp::Neg, to_cuda(x), out_cuda, {});
    EXPECT_TRUE(matches_cpu(big_cuda, big)) << dtype_name(dtype);
    ops::cpu::binary(BinaryOp::Mul, x, x, out_cpu, 1.0);
    ops::cuda::binary(BinaryOp::Mul, to_cuda(x), to_cuda(x), out_cuda, 1.0);
    EXPECT_TRUE(matches_cpu(big_cuda, big)) << dtype_name(dtype);
  }
}

TEST(CudaParityElementwise, BoolTensorsRejectArithmeticLikeTheCpu) {
  SKIP_WITHOUT_GPU();
  Tensor a = to_cuda(random_values({4}, test_seed(), kBool));
  Tensor out = Tensor::empty({4}, {.dtype = kBool, .device = Device::cuda()});
  EXPECT_NABLA_ERROR(ops::cuda::binary(BinaryOp::Div, a, a, out, 1.0), "bool");
  EXPECT_NABLA_ERROR(ops::cuda::unary(UnaryOp::EqScalar, a, out, {}), "bool");
}

}  // namespace
}  // namespace nabla
