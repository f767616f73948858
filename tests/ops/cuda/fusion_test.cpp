// The step compiler on CUDA (ops/cuda/fusion): NVRTC compiles what the code generator writes
// (no GPU needed), and on a GPU every fused group's kernel writes exactly the bits the eager
// kernels write for the same ops, on fresh random inputs.
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <sstream>
#include <tuple>

#include "fusion_test_util.h"
#include "nabla/core/cuda/memory.h"
#include "nabla/ops/cuda/fusion/executor.h"
#include "nabla/ops/cuda/fusion/kernels.h"
#include "nabla/ops/cuda/fusion/nvrtc.h"
#include "nabla/ops/fusion.h"
#include "nabla/ops/fusion/codegen.h"
#include "parity_util.h"
#include "test_paths.h"

namespace nabla {
namespace {

using namespace ops::fusion;  // NOLINT: the module under test
using ops::BinaryOp;
using ops::UnaryOp;
using testing::eager_and_fused;
using testing::random_cuda;
using testing::same_bytes;

TEST(FusionNvrtc, TheGoldenKernelsCompileForHopper) {
  SKIP_WITHOUT_NVRTC();
  int files = 0;
  for (const auto& entry :
       std::filesystem::directory_iterator(testing::source_file("tests/ops/golden/fusion"))) {
    std::ifstream in(entry.path());
    std::stringstream text;
    text << in.rdbuf();
    std::string cubin;
    ASSERT_NO_THROW(cubin = ops::cuda::fusion::compile_to_cubin(text.str(), 90)) << entry.path();
    EXPECT_GT(cubin.size(), 256u) << entry.path();
    ++files;
  }
  EXPECT_GE(files, 3);
}

TEST(FusionNvrtc, ASourceThatDoesNotCompileGivesNvrtcsLog) {
  SKIP_WITHOUT_NVRTC();
  try {
    ops::cuda::fusion::compile_to_cubin("extern \"C\" __global__ void k() { undeclared_name(); }", 90);
    FAIL() << "compiled a kernel calling an undeclared function";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("could not compile"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("undeclared_name"), std::string::npos) << e.what();
  }
}

// A region and the tensors of its inputs, made on the GPU from fresh random values.
struct Case {
  const char* name;
  std::function<void(Region&, std::vector<Tensor>& inputs, uint64_t seed)> build;
  int kernels = 0;     // the generated kernels the region takes, where a case checks it
  int reductions = 1;  // the fused reductions among them (reduction_cases)
};

int input_of(Region& r, std::vector<Tensor>& inputs, Tensor t) {
  const int v = r.input(t.dtype(), t.sizes(), t.strides());
  inputs.resize(static_cast<size_t>(v) + 1);
  inputs[static_cast<size_t>(v)] = std::move(t);
  return v;
}

std::vector<Case> cases() {
  return {
      {"bias_gelu_bf16",
       [](Region& r, std::vector<Tensor>& in, uint64_t seed) {
         const int x = input_of(r, in, random_cuda({96, 384}, kBFloat16, seed));
         const int b = input_of(r, in, random_cuda({384}, kBFloat16, seed + 1));
         const int s = r.binary(BinaryOp::Add, x, b);
         r.mark_live_out(s);
         r.mark_live_out(r.unary(UnaryOp::Gelu, s));
       }},
      {"mul_add_f32_no_fma",  // eager rounds x * w before adding b: the fused kernel must too
       [](Region& r, std::vector<Tensor>& in, uint64_t seed) {
         const int x = input_of(r, in, random_cuda({1000, 33}, kFloat32, seed));
         const int w = input_of(r, in, random_cuda({33}, kFloat32, seed + 1));
         const int b = input_of(r, in, random_cuda({1000, 33}, kFloat32, seed + 2));
         const int m = r.binary(BinaryOp::Mul, x, w);
         r.mark_live_out(r.unary(UnaryOp::Tanh, r.binary(BinaryOp::Add, m, b)));
       }},
      {"channels_last_add_relu_f16",
       [](Region& r, std::vector<Tensor>& in, uint64_t seed) {
         const Shape sizes{4, 24, 7, 9};
         const int x = input_of(r, in, random_cuda(sizes, kFloat16, seed, MemoryFormat::ChannelsLast));
         const int y = input_of(r, in, random_cuda(sizes, kFloat16, seed + 1, MemoryFormat::ChannelsLast));
         const ops::fusion::Op add{.kind = OpKind::Binary, .binary = BinaryOp::Add, .args = {x, y}};
         const int s = r.add(add, kFloat16, sizes, channels_last_strides(sizes));
         const ops::fusion::Op relu{.kind = OpKind::Unary, .unary = UnaryOp::Relu, .args = {s}};
         r.mark_live_out(r.add(relu, kFloat16, sizes, channels_last_strides(sizes)));
       }},
      {"swiglu_bf16",
       [](Region& r, std::vector<Tensor>& in, uint64_t seed) {
         const int a = input_of(r, in, random_cuda({64, 512}, kBFloat16, seed));
         const int b = input_of(r, in, random_cuda({64, 512}, kBFloat16, seed + 1));
         r.mark_live_out(r.binary(BinaryOp::Mul, r.unary(UnaryOp::Silu, a), b));
       }},
      {"rms_epilogue_mixed_f32_bf16",  // float32 statistics scaling a bfloat16 stream
       [](Region& r, std::vector<Tensor>& in, uint64_t seed) {
         const int x = input_of(r, in, random_cuda({128, 256}, kFloat32, seed));
         const int rstd = input_of(r, in, random_cuda({128, 1}, kFloat32, seed + 1));
         const int w = input_of(r, in, random_cuda({256}, kBFloat16, seed + 2));
         const int n = r.binary(BinaryOp::Mul, x, rstd);
         r.mark_live_out(r.cast(r.binary(BinaryOp::Mul, n, w), kBFloat16));
       }},
      {"mask_where_cast_f64",
       [](Region& r, std::vector<Tensor>& in, uint64_t seed) {
         const int x = input_of(r, in, random_cuda({333}, kFloat64, seed));
         const int zero = input_of(r, in, zeros({}, {.dtype = kFloat64, .device = Device::cuda()}));
         const int mask = r.unary(UnaryOp::GtScalar, x, {.a = 0.3});
         const int kept = r.where(mask, x, zero);
         r.mark_live_out(mask);
         r.mark_live_out(r.cast(r.unary(UnaryOp::Clamp, kept, {.a = -1, .b = 1.5}), kFloat32));
       }},
  };
}

// Every value's tensor: the inputs as given, each result laid out as the region says.
std::vector<Tensor> tensors_for(const Region& r, const std::vector<Tensor>& inputs) {
  std::vector<Tensor> t(r.values().size());
  for (size_t v = 0; v < t.size(); ++v) {
    const Value& value = r.values()[v];
    if (value.producer < 0) {
      t[v] = inputs.at(v);
    } else {
      t[v] = Tensor::empty({numel_of(value.sizes)}, {.dtype = value.dtype, .device = Device::cuda()})
                 .as_strided(value.sizes, value.strides);
    }
  }
  return t;
}

TEST(FusionCuda, FusedGroupsWriteTheEagerKernelsBits) {
  SKIP_WITHOUT_GPU();
  SKIP_WITHOUT_NVRTC();
  const uint64_t seed = std::random_device{}();
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    Region region;
    std::vector<Tensor> inputs;
    c.build(region, inputs, seed);
    const Plan fused = plan_groups(region);
    Plan eager = fused;
    for (Group& g : eager.groups) g.fused = false;

    std::vector<Tensor> a = tensors_for(region, inputs), b = tensors_for(region, inputs);
    const auto eager_counts = ops::cuda::fusion::run_region(region, eager, a, Device::cuda());
    const auto fused_counts = ops::cuda::fusion::run_region(region, fused, b, Device::cuda());
    EXPECT_EQ(fused_counts.fallbacks, 0);
    EXPECT_EQ(fused_counts.fused_kernels, 1) << dump(fused);
    EXPECT_EQ(eager_counts.fused_kernels, 0);
    for (size_t v = 0; v < a.size(); ++v) {
      if (region.values()[v].live_out) {
        EXPECT_TRUE(same_bytes(a[v], b[v])) << "value %" << v << " differs, seed " << seed << "\n"
                                            << region.dump();
      }
    }
  }
}

// A norm's backward, shortened: g * w feeds the statistic's sum over `dim` and, after it, dx.
// Over rows (dim 1) it is one kernel (Note [One-pass rows]); over columns, two.
std::function<void(Region&, std::vector<Tensor>&, uint64_t)> norm_backward_summed_over(int64_t dim) {
  return [dim](Region& r, std::vector<Tensor>& in, uint64_t seed) {
    const int g = input_of(r, in, random_cuda({64, 512}, kFloat32, seed));
    const int w = input_of(r, in, random_cuda({512}, kFloat32, seed + 1));
    const int x = input_of(r, in, random_cuda({64, 512}, kFloat32, seed + 2));
    const int gw = r.binary(BinaryOp::Mul, g, w);
    const int s = r.reduce(r.binary(BinaryOp::Mul, gw, x), {dim}, true, false);
    const int ds = r.unary(UnaryOp::MulScalar, s, {.a = -0.5});
    r.mark_live_out(r.binary(BinaryOp::Add, gw, r.binary(BinaryOp::Mul, x, ds)));
  };
}

// Regions with reductions (Note [Fused reductions]): every kind of launch the eager kernel makes
// (warp rows, block rows split over blocks, rows with two reduced runs, columns with and without
// splits), 16-bit inputs whose rows start off a 16-byte boundary, a broadcast operand, and row
// reductions with ops after the fold (Note [One-pass rows]) for warps, sub-warps and blocks.
std::vector<Case> reduction_cases() {
  return {
      {"rms_statistic_bf16",
       [](Region& r, std::vector<Tensor>& in, uint64_t seed) {
         const int x = input_of(r, in, random_cuda({256, 768}, kBFloat16, seed));
         const int w = input_of(r, in, random_cuda({768}, kBFloat16, seed + 1));
         const int xf = r.cast(x, kFloat32);
         const int ms = r.reduce(r.binary(BinaryOp::Mul, xf, xf), {1}, true, true);
         const int rstd = r.unary(UnaryOp::Rsqrt, r.unary(UnaryOp::AddScalar, ms, {.a = 1e-6}));
         r.mark_live_out(rstd);
         r.mark_live_out(r.binary(BinaryOp::Mul, r.cast(r.binary(BinaryOp::Mul, xf, rstd), kBFloat16), w));
       },
       1},  // Note [One-pass rows]: the statistic, rstd and the normalized rows in one kernel
      {"long_rows_split_f32",
       [](Region& r, std::vector<Tensor>& in, uint64_t seed) {
         const int x = input_of(r, in, random_cuda({4, 100003}, kFloat32, seed));
         r.mark_live_out(
             r.reduce(r.unary(UnaryOp::Exp, r.unary(UnaryOp::MulScalar, x, {.a = 0.1})), {1}, false, false));
       }},
      {"odd_rows_f16_broadcast",
       [](Region& r, std::vector<Tensor>& in, uint64_t seed) {
         const int x = input_of(r, in, random_cuda({33, 70}, kFloat16, seed));
         const int w = input_of(r, in, random_cuda({70}, kFloat16, seed + 1));
         const int p = r.binary(BinaryOp::Mul, x, w);
         r.mark_live_out(p);  // written on the way
         r.mark_live_out(r.reduce(r.unary(UnaryOp::Tanh, p), {1}, true, false));
       }},
      {"weight_grad_columns_bf16",
       [](Region& r, std::vector<Tensor>& in, uint64_t seed) {
         const int g = input_of(r, in, random_cuda({16, 64, 96}, kBFloat16, seed));
         const int xhat = input_of(r, in, random_cuda({16, 64, 96}, kBFloat16, seed + 1));
         const int prod = r.binary(BinaryOp::Mul, r.cast(g, kFloat32), r.cast(xhat, kFloat32));
         r.mark_live_out(r.reduce(prod, {0, 1}, true, false));
       }},
      {"repeat_grad_middle_dim_f32",
       [](Region& r, std::vector<Tensor>& in, uint64_t seed) {
         const int x = input_of(r, in, random_cuda({4, 3, 5, 200}, kFloat32, seed));
         r.mark_live_out(r.reduce(r.unary(UnaryOp::MulScalar, x, {.a = 2}), {1}, true, false));
       }},
      {"rms_backward_in_one_pass_f32", norm_backward_summed_over(1), 1},
      // Note [Recomputed values]: the sum with g * w; after the eager scale, dx computing g * w again
      {"column_sum_then_recomputes_g_times_w_f32", norm_backward_summed_over(0), 2},
      {"one_pass_block_rows_four_wide_f32",  // a block per row of 2048, the walk four at a time
       [](Region& r, std::vector<Tensor>& in, uint64_t seed) {
         const int x = input_of(r, in, random_cuda({4096, 2048}, kFloat32, seed));
         const int w = input_of(r, in, random_cuda({2048}, kFloat32, seed + 1));
         const int ms = r.reduce(r.binary(BinaryOp::Mul, x, x), {1}, true, true);
         const int rstd = r.unary(UnaryOp::Rsqrt, r.unary(UnaryOp::AddScalar, ms, {.a = 1e-6}));
         r.mark_live_out(r.binary(BinaryOp::Mul, r.binary(BinaryOp::Mul, x, rstd), w));
       },
       1},
      {"rms_backward_weight_sum_and_one_pass_rows_bf16",  // as FusionPlan.ANormsBackward... plans it
       [](Region& r, std::vector<Tensor>& in, uint64_t seed) {
         const Shape sizes{8, 64, 256};
         const int g = input_of(r, in, random_cuda(sizes, kBFloat16, seed));
         const int w = input_of(r, in, random_cuda({256}, kBFloat16, seed + 1));
         const int x = input_of(r, in, random_cuda(sizes, kBFloat16, seed + 2));
         const int rstd = input_of(r, in, random_cuda({8, 64, 1}, kFloat32, seed + 3));
         const int nb = input_of(r, in, random_cuda(sizes, kBFloat16, seed + 4));
         const int dn = r.cast(r.binary(BinaryOp::Mul, g, w), kFloat32);
         r.mark_live_out(r.reduce(r.binary(BinaryOp::Mul, g, nb), {0, 1}, true, false));
         const int xf = r.cast(x, kFloat32);
         const int dxf1 = r.binary(BinaryOp::Mul, dn, rstd);
         const int dr = r.reduce(r.binary(BinaryOp::Mul, dn, xf), {2}, true, false);
         const int t = r.binary(BinaryOp::Mul, r.binary(BinaryOp::Mul, dr, rstd), rstd);
         const int dms =
             r.unary(UnaryOp::MulScalar, r.unary(UnaryOp::MulScalar, t, {.a = -0.5}), {.a = 1.0 / 256});
         const ops::fusion::Op copy{.kind = OpKind::Cast, .args = {dms}};
         const int a = r.binary(BinaryOp::Mul, r.add(copy, kFloat32, sizes, {64, 1, 0}), xf);
         r.mark_live_out(r.cast(r.binary(BinaryOp::Add, dxf1, r.binary(BinaryOp::Add, a, a)), kBFloat16));
       },
       2, 2},
      {"one_pass_block_rows_f32",  // a block per row of 1102 (not a multiple of 4), one split
       [](Region& r, std::vector<Tensor>& in, uint64_t seed) {
         const int x = input_of(r, in, random_cuda({4096, 1102}, kFloat32, seed));
         const int m = r.reduce(r.unary(UnaryOp::MulScalar, x, {.a = 0.5}), {1}, true, true);
         const int twice = r.unary(UnaryOp::MulScalar, m, {.a = 2});
         r.mark_live_out(m);
         r.mark_live_out(r.unary(UnaryOp::Exp, r.binary(BinaryOp::Sub, x, twice)));
       },
       1},
      {"one_pass_sub_warp_rows_f16",  // 10 elements a row: two lanes each, a row output
       [](Region& r, std::vector<Tensor>& in, uint64_t seed) {
         const int x = input_of(r, in, random_cuda({300, 10}, kFloat16, seed));
         const int b = input_of(r, in, random_cuda({300, 1}, kFloat16, seed + 1));
         const int s = r.reduce(r.unary(UnaryOp::Tanh, x), {1}, true, false);
         const int scaled = r.unary(UnaryOp::Reciprocal, r.unary(UnaryOp::AddScalar, s, {.a = 20}));
         r.mark_live_out(scaled);
         r.mark_live_out(r.binary(BinaryOp::Add, r.binary(BinaryOp::Mul, x, scaled), b));
       },
       1},
      {"two_reduced_runs_f64",
       [](Region& r, std::vector<Tensor>& in, uint64_t seed) {
         const int x = input_of(r, in, random_cuda({6, 7, 50}, kFloat64, seed));
         const int y = r.unary(UnaryOp::AddScalar, r.binary(BinaryOp::Mul, x, x), {.a = 1});
         r.mark_live_out(r.reduce(y, {0, 2}, false, true));
       }},
  };
}

TEST(FusionCuda, FusedReductionsWriteTheEagerKernelsBits) {
  SKIP_WITHOUT_GPU();
  SKIP_WITHOUT_NVRTC();
  const uint64_t seed = std::random_device{}();
  for (const Case& c : reduction_cases()) {
    SCOPED_TRACE(c.name);
    Region region;
    std::vector<Tensor> inputs;
    c.build(region, inputs, seed);
    const Plan fused = plan_groups(region);
    Plan eager = fused;
    for (Group& g : eager.groups) g.fused = false;

    std::vector<Tensor> a = tensors_for(region, inputs), b = tensors_for(region, inputs);
    const auto eager_counts = ops::cuda::fusion::run_region(region, eager, a, Device::cuda());
    const auto fused_counts = ops::cuda::fusion::run_region(region, fused, b, Device::cuda());
    EXPECT_EQ(fused_counts.fallbacks, 0);
    EXPECT_EQ(fused_counts.fused_reductions, c.reductions) << dump(fused);
    if (c.kernels > 0) {
      EXPECT_EQ(fused_counts.fused_kernels, c.kernels) << dump(fused);
    }
    EXPECT_EQ(eager_counts.fused_kernels, 0);
    for (size_t v = 0; v < a.size(); ++v) {
      if (region.values()[v].live_out) {
        EXPECT_TRUE(same_bytes(a[v], b[v])) << "value %" << v << " differs, seed " << seed << "\n"
                                            << region.dump();
      }
    }
  }
}

TEST(FusionCuda, ASecondLoadOfAKernelCompilesNothing) {
  SKIP_WITHOUT_GPU();
  SKIP_WITHOUT_NVRTC();
  Region r;
  const int x = r.input(kFloat32, {77});
  // A scalar no other test uses, so this program is new to the process.
  const double scale = 1.0 + static_cast<double>(std::random_device{}() % 100000) / 1e6;
  r.mark_live_out(r.unary(UnaryOp::Exp, r.unary(UnaryOp::MulScalar, x, {.a = scale})));
  const KernelSource source = generate_kernel(r, plan_groups(r).groups.at(0));
  const auto before = ops::cuda::fusion::load_stats();
  const auto first = ops::cuda::fusion::load_kernel(source, 0);
  const auto middle = ops::cuda::fusion::load_stats();
  EXPECT_EQ(middle.compiled + middle.from_disk, before.compiled + before.from_disk + 1);
  const auto second = ops::cuda::fusion::load_kernel(source, 0);
  EXPECT_EQ(first.handle, second.handle);
  EXPECT_EQ(ops::cuda::fusion::load_stats().compiled, middle.compiled);
}

// ---- The recorder: FusionScope over public ops -------------------------------------------------

namespace recorded {

TEST(FusionScopeCuda, ForwardAndBackwardChainsGiveTheEagerBits) {
  SKIP_WITHOUT_GPU();
  SKIP_WITHOUT_NVRTC();
  const uint64_t seed = std::random_device{}();
  const Tensor x0 = random_cuda({64, 96}, kFloat32, seed);
  const Tensor w = random_cuda({96}, kFloat32, seed + 1);
  const Tensor b = random_cuda({96}, kFloat32, seed + 2);
  auto [eager, fused, stats] = eager_and_fused([&] {
    Tensor x = x0.detach().requires_grad_(true);
    Tensor y = gelu(x * w + b) * 0.5 + x;
    Tensor loss = (y * y).sum();
    loss.backward();
    return TensorList{y.detach(), loss.detach(), x.grad()};
  });
  EXPECT_GE(stats.fused_kernels, 2) << "forward and backward chains";
  EXPECT_EQ(stats.fallbacks, 0);
  for (size_t i = 0; i < eager.size(); ++i) EXPECT_TRUE(same_bytes(eager[i], fused[i])) << "result " << i;
}

TEST(FusionScopeCuda, AnRmsNormsStatisticsAndGradientSumsRunFusedWithTheEagerBits) {
  SKIP_WITHOUT_GPU();
  SKIP_WITHOUT_NVRTC();
  const uint64_t seed = std::random_device{}();
  const Tensor x0 = random_cuda({8, 32, 256}, kBFloat16, seed);
  const Tensor w0 = random_cuda({256}, kBFloat16, seed + 1);
  const Tensor g0 = random_cuda({8, 32, 256}, kBFloat16, seed + 2);
  auto [eager, fused, stats] = eager_and_fused([&] {
    Tensor x = x0.detach().requires_grad_(true), w = w0.detach().requires_grad_(true);
    // As bfloat16 autocast runs it: the mean of the bfloat16 squares in float32.
    Tensor y = x * rsqrt(mean((x * x).to(kFloat32), {-1}, true) + 1e-6) * w;
    y.backward(g0.to(kFloat32));
    return TensorList{y.detach(), x.grad(), w.grad()};
  });
  EXPECT_EQ(stats.fallbacks, 0);
  // The mean forward; backward, the broadcast operands' sums (the statistic's, the weight's).
  EXPECT_GE(stats.fused_reductions, 3);
  for (size_t i = 0; i < eager.size(); ++i) EXPECT_TRUE(same_bytes(eager[i], fused[i])) << "result " << i;
}

TEST(FusionScopeCuda, HeldResultsReadThroughViewsOrByTheHostAreWrittenFirst) {
  SKIP_WITHOUT_GPU();
  SKIP_WITHOUT_NVRTC();
  const uint64_t seed = std::random_device{}();
  const Tensor x = random_cuda({24, 40}, kBFloat16, seed);
  auto [eager, fused, stats] = eager_and_fused([&] {
    Tensor a = x * 2.0 + 1.0;
    Tensor t = a.transpose(0, 1);  // a held result read through another view
    Tensor y = sigmoid(t) * 3.0;
    Tensor host = (y - 1.0).cpu();           // read by the host while held
    Tensor z = (a * a).to(kFloat32) + 0.25;  // a cast in the chain
    return TensorList{y, host, z, a};
  });
  EXPECT_EQ(stats.fallbacks, 0);
  EXPECT_GE(stats.fused_kernels, 1);
  for (size_t i = 0; i < eager.size(); ++i) EXPECT_TRUE(same_bytes(eager[i], fused[i])) << "result " << i;
}

// Note [Concatenation in place]: rotary embedding written with halves and cat, as users write it.
// The rotated halves are held results, so their groups store them straight into the cat's output;
// the result, its cast (recorded piecewise), a read of the output after it and the backward give
// the eager bits. A cat with a piece that is no held result (an input) takes the copies.
TEST(FusionScopeCuda, CatOfHeldResultsIsComputedInPlace) {
  SKIP_WITHOUT_GPU();
  SKIP_WITHOUT_NVRTC();
  const uint64_t seed = std::random_device{}();
  const Tensor x0 = random_cuda({4, 3, 64, 32}, kBFloat16, seed);
  const Tensor c = random_cuda({64, 16}, kFloat32, seed + 1), s = random_cuda({64, 16}, kFloat32, seed + 2);
  const Tensor g = random_cuda({4, 3, 64, 32}, kBFloat16, seed + 3);
  const Tensor other = random_cuda({4, 3, 64, 8}, kFloat32, seed + 4);
  auto [eager, fused, stats] = eager_and_fused([&] {
    Tensor x = x0.detach().requires_grad_(true);
    const Tensor a = x.narrow(-1, 0, 16), b = x.narrow(-1, 16, 16);
    Tensor rotated = cat({a * c - b * s, b * c + a * s}, -1);  // float32: the tables' dtype
    Tensor y = rotated.to(kBFloat16);
    Tensor mixed = cat({exp(rotated.narrow(-1, 0, 8)), other}, -1) * 2.0;  // a held piece and an input
    // As nabla-bench llama writes it: the float32 cat a temporary, cast to bfloat16 piecewise.
    Tensor y2 = cat({b * c - a * s, a * c + b * s}, -1).to(kBFloat16);
    (y.to(kFloat32) * g.to(kFloat32) + y2 * 0.5).sum().backward();
    return TensorList{y.detach(), rotated.detach(), mixed, y2.detach(), x.grad()};
  });
  EXPECT_EQ(stats.fallbacks, 0);
  EXPECT_GE(stats.fused_kernels, 2);
  for (size_t i = 0; i < eager.size(); ++i) EXPECT_TRUE(same_bytes(eager[i], fused[i])) << "result " << i;
}

// The recorder takes a cat of held pieces and a cast of its output (two copies each, no flush);
// a cat with a piece that is itself a cat output is taken too but is cast by the normal path
// (its record would name only one of that piece's values). The values equal eager ones.
TEST(FusionScopeCuda, CatsAndTheirCastsAreRecordedNotLaunched) {
  SKIP_WITHOUT_GPU();
  SKIP_WITHOUT_NVRTC();
  const Tensor x = random_cuda({6, 40}, kFloat32, std::random_device{}());
  Tensor y16, nested;
  {
    FusionScope scope(true);
    const Tensor a = x * 2.0, b = x + 1.0;
    const FusionStats before = scope.stats();
    const Tensor y = cat({a, b}, -1);
    EXPECT_EQ(scope.stats().recorded_ops, before.recorded_ops + 2);
    y16 = y.to(kBFloat16);
    EXPECT_EQ(scope.stats().recorded_ops, before.recorded_ops + 4);
    EXPECT_EQ(scope.stats().flushes, before.flushes) << "nothing ran yet";
    nested = cat({y16, (b * 3.0).to(kBFloat16)}, -1).to(kFloat32);
  }
  const Tensor a = x * 2.0, b = x + 1.0;
  EXPECT_TRUE(same_bytes(y16, cat({a, b}, -1).to(kBFloat16)));
  EXPECT_TRUE(
      same_bytes(nested, cat({cat({a, b}, -1).to(kBFloat16), (b * 3.0).to(kBFloat16)}, -1).to(kFloat32)));
}

TEST(FusionScopeCuda, InPlaceOpsSeeTheHeldOpsBeforeThemAndNotAfter) {
  SKIP_WITHOUT_GPU();
  SKIP_WITHOUT_NVRTC();
  const uint64_t seed = std::random_device{}();
  const Tensor x0 = random_cuda({1000}, kFloat32, seed);
  auto [eager, fused, stats] = eager_and_fused([&] {
    Tensor x = x0.clone();
    Tensor y = exp(x) * 2.0;  // held, reading x
    x.mul_(3.0);              // in place: y must have read the old x
    Tensor z = y + x;
    return TensorList{y, z, x};
  });
  for (size_t i = 0; i < eager.size(); ++i) EXPECT_TRUE(same_bytes(eager[i], fused[i])) << "result " << i;
}

TEST(FusionScopeCuda, ACompiledChainPeaksNoHigherThanEager) {
  SKIP_WITHOUT_GPU();
  SKIP_WITHOUT_NVRTC();
  const Tensor x = random_cuda({2048, 4096}, kFloat32, std::random_device{}());  // 32 MiB
  const auto chain = [&] {
    Tensor a = x * 0.5;
    Tensor b = exp(a + 1.0);
    a = Tensor();  // dropped before the chain ends: the compiled step never writes it
    Tensor c = b * 2.0 - x;
    b = Tensor();
    return sigmoid(c);
  };
  const auto peak_of = [&](bool fuse) {
    cuda::synchronize();
    cuda::reset_peak_memory_stats();
    const size_t base = cuda::memory_allocated();
    Tensor y;
    {
      FusionScope scope(fuse);
      y = chain();
    }
    cuda::synchronize();
    return cuda::max_memory_allocated() - base;
  };
  const size_t eager = peak_of(false), fused = peak_of(true);
  EXPECT_LE(fused, eager);
}

}  // namespace recorded

}  // namespace
}  // namespace nabla
