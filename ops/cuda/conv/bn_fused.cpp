// Convolutions fused with batch-norm work, on cuDNN's backend graph API (cudnn/graph.h).
//
// Note [Convolution + batch norm fusion]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// In a ResNet, a training batch norm costs full memory passes over activations that the
// convolutions beside it have just written or are about to read: its statistics read y, its
// apply step reads y and writes relu(bn(y)), and the next convolution reads that again. cuDNN's
// runtime-fusion engines move that work into the convolutions:
//  - forward: the convolution's epilogue also sums y and y^2 per channel (GEN_STATS), and the
//    next convolution applies the batch norm, folded into a per-channel scale and bias, and the
//    ReLU while loading its input (the "prologue"), so relu(bn(y)) is never written;
//  - weight gradient: the same prologue recomputes relu(bn(y)) in the load;
//  - data gradient: the epilogue masks the gradient with the ReLU (recomputing bn(y) > 0 from y)
//    and can sum it, and its product with y, per channel (the batch norm's backward reductions).
// Each pattern is one operation graph; cuDNN's heuristics say whether an engine takes it. Plans
// are cached per thread and problem (pattern, device, dtypes, shapes, strides, convolution
// parameters, determinism, benchmark mode), refusals too. In benchmark mode (and not
// deterministic) the first six candidate plans are timed once on the real buffers (a host sync,
// once per problem, never inside a CUDA-graph capture) and the fastest is kept; otherwise the
// heuristics' first choice runs. With determinism asked for, engines cuDNN notes as
// nondeterministic are left out. A new problem met inside a capture is refused (building plans
// may allocate), so the caller's unfused path runs; warm-up steps before a capture prevent that.
//
// The batch norm's scale and shift reach the forward prologue in float16 (what cuDNN's fused
// engines take), while the data-gradient graph recomputes the ReLU's input as
// (x - mean) * invstd * weight + bias in float32, the form cuDNN's dgrad + dReLU + batch-norm
// pattern is built from: elements whose normalized value is within rounding of zero may be masked
// differently, as any two float16 paths may. The variance is E[y^2] - E[y]^2 from float32 sums
// (batch_norm/from_sums.cu), fine while a channel's mean is within a few standard deviations of
// zero, as batch-normalized networks keep it.
#include "nabla/ops/cuda/conv/bn_kernels.h"

#include <cudnn.h>

#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "nabla/core/cuda/device_guard.h"
#include "nabla/core/cuda/graph.h"
#include "nabla/core/cuda/handles.h"
#include "nabla/core/cuda/stream.h"
#include "nabla/core/error.h"
#include "nabla/ops/cuda/cudnn/graph.h"

namespace nabla::ops::cuda {

namespace {

using cudnn_graph::dims_of;
using cudnn_graph::Graph;
using cudnn_graph::io_type;
using cudnn_graph::Plan;
using cudnn_graph::strides_of;

enum Uid : int64_t {
  kX = 1,
  kW,
  kY,
  kScale,
  kBias,
  kSum,
  kSqSum,
  kDy,
  kDx,
  kDw,
  kMean,
  kInvStd,
  kDScale,
  kDBias,
  kEqDy,
  kEqX,
  kEqBias,
  kResidual
};

enum class Pattern : int64_t {
  ForwardStats,
  WeightGradAffineRelu,
  DataGradReluMask,
  DataGradBatchNormRelu,
  ForwardBiasRelu,
  GraphForward,
  GraphDataGrad,
  GraphWeightGrad
};

thread_local std::string last_engine;

Graph::Conv conv_of(const ConvParams& p) {
  return {.stride = {p.stride[0], p.stride[1]},
          .padding = {p.padding[0], p.padding[1]},
          .dilation = {p.dilation[0], p.dilation[1]}};
}

// (C) -> a (1, C, 1, 1) tensor.
void channel_tensor(Graph& g, int64_t uid, int64_t channels, cudnnDataType_t dtype = CUDNN_DATA_FLOAT) {
  g.tensor(uid, dtype, {1, channels, 1, 1}, {channels, 1, 1, 1});
}

cudnnDataType_t param_type(const AffineRelu& prologue) {
  return prologue.scale.dtype() == kFloat32 ? CUDNN_DATA_FLOAT : io_type(prologue.scale);
}

bool is_nhwc_16bit(const Tensor& t) {
  return t.dim() == 4 && (t.dtype() == kFloat16 || t.dtype() == kBFloat16) &&
         t.is_contiguous(MemoryFormat::ChannelsLast) && reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0;
}

// Why cuDNN's fusion engines cannot take these tensors at all ("" when they might).
std::string layout_problem(std::initializer_list<const Tensor*> data, const AffineRelu& prologue,
                           const ConvParams& p) {
  if (cudnnGetVersion() < 90000) return "convolution fusion needs cuDNN 9";
  if (p.groups != 1) return "grouped convolutions are not fused";
  for (const Tensor* t : data) {
    if (!is_nhwc_16bit(*t)) return "fusion takes 16-byte-aligned channels_last float16/bfloat16 tensors";
    if (t->dtype() != (*data.begin())->dtype()) return "fusion takes one dtype";
    if (t->size(1) % 8 != 0) return "fusion takes channel counts that are multiples of 8";
    if (t->numel() >= (int64_t{1} << 31)) return "fusion takes tensors of fewer than 2^31 elements";
  }
  if (prologue.defined()) {
    const Tensor& x = **data.begin();
    for (const Tensor* t : {&prologue.scale, &prologue.bias}) {
      if (t->numel() != x.size(1) || t->device() != x.device() ||
          reinterpret_cast<uintptr_t>(t->data_ptr()) % 16 != 0)
        return "the prologue's scale and bias must be 16-byte-aligned (C) tensors on x's device";
      if ((t->dtype() != kFloat32 && t->dtype() != (*data.begin())->dtype()) || !t->is_contiguous() ||
          t->dim() != 1 || t->dtype() != prologue.scale.dtype())
        return "the prologue's scale and bias must be contiguous (C) tensors, both float32 or both of x's "
               "dtype";
    }
  }
  return "";
}

// x * scale + bias, then ReLU, as virtual tensors; returns the ReLU's output (x's dtype).
int64_t affine_relu(Graph& g, const Tensor& x, const AffineRelu& prologue) {
  const std::vector<int64_t> dims = dims_of(x), strides = strides_of(x);
  channel_tensor(g, kScale, x.size(1), param_type(prologue));
  channel_tensor(g, kBias, x.size(1), param_type(prologue));
  const int64_t scaled = g.virtual_tensor(dims, CUDNN_DATA_FLOAT, strides);
  const int64_t shifted = g.virtual_tensor(dims, CUDNN_DATA_FLOAT, strides);
  const int64_t out = g.virtual_tensor(dims, io_type(x), strides);
  g.pointwise({.mode = CUDNN_POINTWISE_MUL, .x = kX, .b = kScale, .y = scaled});
  g.pointwise({.mode = CUDNN_POINTWISE_ADD, .x = scaled, .b = kBias, .y = shifted});
  g.pointwise({.mode = CUDNN_POINTWISE_RELU_FWD, .x = shifted, .y = out});
  return out;
}

struct Entry {
  std::vector<Plan> plans;  // the candidates until timed, then the chosen one
  bool timed = false;
  std::string why;
};

void append(std::vector<int64_t>& key, const Tensor& t) {
  key.insert(key.end(), t.sizes().begin(), t.sizes().end());
  key.insert(key.end(), t.strides().begin(), t.strides().end());
  key.push_back(static_cast<int64_t>(t.dtype()));
}

std::vector<int64_t> key_of(Pattern pattern, const ConvParams& p, const AffineRelu* prologue,
                            const Routes& routes, std::initializer_list<const Tensor*> tensors) {
  std::vector<int64_t> key = {static_cast<int64_t>(pattern),
                              static_cast<int64_t>(prologue ? prologue->scale.dtype() : kFloat32),
                              (*tensors.begin())->device().index,
                              prologue != nullptr,
                              routes.cudnn_deterministic,
                              routes.cudnn_benchmark,
                              p.stride[0],
                              p.stride[1],
                              p.padding[0],
                              p.padding[1],
                              p.dilation[0],
                              p.dilation[1]};
  for (const Tensor* t : tensors) append(key, *t);
  return key;
}

bool timing_wanted(const Routes& routes) {
  return routes.cudnn_benchmark && !routes.cudnn_deterministic;
}

// The cached plans of a problem, or nullptr when the problem is new and a CUDA graph is being
// captured: building plans may allocate or load modules, which a capture must not see (the
// caller then refuses; the eager warm-up steps before a capture fill the cache).
Entry* cached(const Routes& routes, std::vector<int64_t> key, const auto& build) {
  thread_local std::map<std::vector<int64_t>, std::unique_ptr<Entry>> cache;
  auto it = cache.find(key);
  if (it != cache.end()) return it->second.get();
  if (nabla::cuda::is_capturing()) return nullptr;
  auto entry = std::make_unique<Entry>();
  try {
    Graph g;
    build(g);
    // A few candidates only where they will be timed: each may be a runtime compilation.
    const int limit = timing_wanted(routes) ? 6 : 1;
    entry->plans = g.plans(nabla::cuda::cudnn_handle(), limit, &entry->why, routes.cudnn_deterministic);
  } catch (const Error& e) {  // a descriptor cuDNN rejects: a refusal like any other
    entry->plans.clear();
    entry->why = e.what();
  }
  entry->timed = entry->plans.size() <= 1;
  return cache.emplace(std::move(key), std::move(entry)).first->second.get();
}

bool refuse(std::string* why, std::string reason) {
  if (why) *why = std::move(reason);
  return false;
}

// Why the entry cannot run ("" when it can).
std::string unusable(const Entry* entry) {
  if (!entry) return "a new problem inside a CUDA-graph capture (run it eagerly first)";
  return entry->plans.empty() ? entry->why : "";
}

// Runs the entry's plan on the given pointers. With several candidates (benchmark mode) it first
// times each once, outside any capture, keeps the fastest and drops the rest; a candidate that
// fails there (its workspace does not fit, say) is dropped too.
void run(Entry& entry, const Device& device, const std::vector<int64_t>& uids,
         const std::vector<void*>& ptrs) {
  cudnnHandle_t handle = nabla::cuda::cudnn_handle();
  const auto execute = [&](const Plan& plan) {
    const Tensor workspace =
        Tensor::empty({std::max<int64_t>(plan.workspace_bytes(), 1)}, {.dtype = kUInt8, .device = device});
    plan.execute(handle, uids, ptrs, workspace.data_ptr());
  };
  if (!entry.timed && !nabla::cuda::is_capturing()) {
    const nabla::cuda::Stream stream = nabla::cuda::current_stream(device.index);
    float best = -1;
    size_t chosen = 0;
    for (size_t i = 0; i < entry.plans.size(); ++i) {
      try {
        execute(entry.plans[i]);  // warm-up (and any lazy compilation)
        nabla::cuda::Event start(true), stop(true);
        start.record(stream);
        for (int r = 0; r < 3; ++r) execute(entry.plans[i]);
        stop.record(stream);
        stop.synchronize();
        const float ms = start.elapsed_ms(stop);
        if (best < 0 || ms < best) best = ms, chosen = i;
      } catch (const Error&) {
        continue;
      }
    }
    NABLA_CHECK(best >= 0, "cuDNN fusion: every candidate plan failed ({} candidates)", entry.plans.size());
    Plan keep = std::move(entry.plans[chosen]);
    entry.plans.clear();
    entry.plans.push_back(std::move(keep));
    entry.timed = true;
  }
  const Plan& plan = entry.plans.front();
  last_engine = plan.engine();
  execute(plan);
}

}  // namespace

bool conv2d_forward_stats(const Tensor& x, const AffineRelu& prologue, const Tensor& w, const Tensor& y,
                          const Tensor& sum, const Tensor& sqsum, const ConvParams& p, const Routes& routes,
                          std::string* why) {
  if (std::string problem = layout_problem({&x, &w, &y}, prologue, p); !problem.empty())
    return refuse(why, problem);
  for (const Tensor* t : {&sum, &sqsum}) {
    NABLA_ASSERT(t->dtype() == kFloat32 && t->is_contiguous() && t->numel() == y.size(1) &&
                     reinterpret_cast<uintptr_t>(t->data_ptr()) % 16 == 0,
                 "conv2d_forward_stats: sums must be 16-byte-aligned contiguous (C) float32, got {}",
                 describe(*t));
  }
  nabla::cuda::DeviceGuard device(x.device().index);
  Entry* entry =
      cached(routes,
             key_of(Pattern::ForwardStats, p, prologue.defined() ? &prologue : nullptr, routes, {&x, &w, &y}),
             [&](Graph& g) {
               g.tensor(kX, io_type(x), dims_of(x), strides_of(x));
               g.tensor(kW, io_type(w), dims_of(w), strides_of(w));
               g.tensor(kY, io_type(y), dims_of(y), strides_of(y));
               channel_tensor(g, kSum, y.size(1));
               channel_tensor(g, kSqSum, y.size(1));
               const int64_t input = prologue.defined() ? affine_relu(g, x, prologue) : kX;
               g.conv_forward(conv_of(p), input, kW, kY);
               g.gen_stats(kY, kSum, kSqSum);
             });
  if (std::string reason = unusable(entry); !reason.empty()) return refuse(why, reason);
  std::vector<int64_t> uids = {kX, kW, kY, kSum, kSqSum};
  std::vector<void*> ptrs = {x.data_ptr(), w.data_ptr(), y.data_ptr(), sum.data_ptr(), sqsum.data_ptr()};
  if (prologue.defined()) {
    uids.insert(uids.end(), {kScale, kBias});
    ptrs.insert(ptrs.end(), {prologue.scale.data_ptr(), prologue.bias.data_ptr()});
  }
  run(*entry, x.device(), uids, ptrs);
  return true;
}

bool conv2d_backward_weight_affine_relu(const Tensor& grad_y, const Tensor& x, const AffineRelu& prologue,
                                        const Tensor& grad_w, const ConvParams& p, const Routes& routes,
                                        std::string* why) {
  NABLA_ASSERT(prologue.defined(), "conv2d_backward_weight_affine_relu: no prologue");
  if (std::string problem = layout_problem({&grad_y, &x, &grad_w}, prologue, p); !problem.empty())
    return refuse(why, problem);
  nabla::cuda::DeviceGuard device(x.device().index);
  Entry* entry =
      cached(routes, key_of(Pattern::WeightGradAffineRelu, p, &prologue, routes, {&grad_y, &x, &grad_w}),
             [&](Graph& g) {
               g.tensor(kX, io_type(x), dims_of(x), strides_of(x));
               g.tensor(kDy, io_type(grad_y), dims_of(grad_y), strides_of(grad_y));
               g.tensor(kDw, io_type(grad_w), dims_of(grad_w), strides_of(grad_w));
               g.conv_backward_filter(conv_of(p), affine_relu(g, x, prologue), kDy, kDw);
             });
  if (std::string reason = unusable(entry); !reason.empty()) return refuse(why, reason);
  run(*entry, x.device(), {kX, kDy, kDw, kScale, kBias},
      {x.data_ptr(), grad_y.data_ptr(), grad_w.data_ptr(), prologue.scale.data_ptr(),
       prologue.bias.data_ptr()});
  return true;
}

bool conv2d_backward_input_relu_mask(const Tensor& grad_y, const Tensor& w, const Tensor& x,
                                     const AffineRelu& prologue, const Tensor& grad_pre, const ConvParams& p,
                                     const Routes& routes, std::string* why) {
  NABLA_ASSERT(prologue.defined(), "conv2d_backward_input_relu_mask: no prologue");
  if (std::string problem = layout_problem({&grad_y, &w, &x, &grad_pre}, prologue, p); !problem.empty())
    return refuse(why, problem);
  nabla::cuda::DeviceGuard device(x.device().index);
  Entry* entry =
      cached(routes, key_of(Pattern::DataGradReluMask, p, &prologue, routes, {&grad_y, &w, &x, &grad_pre}),
             [&](Graph& g) {
               const std::vector<int64_t> dims = dims_of(x), strides = strides_of(x);
               g.tensor(kX, io_type(x), dims, strides);
               g.tensor(kW, io_type(w), dims_of(w), strides_of(w));
               g.tensor(kDy, io_type(grad_y), dims_of(grad_y), strides_of(grad_y));
               g.tensor(kDx, io_type(grad_pre), dims_of(grad_pre), strides_of(grad_pre));
               channel_tensor(g, kScale, x.size(1), param_type(prologue));
               channel_tensor(g, kBias, x.size(1), param_type(prologue));
               const int64_t grad = g.virtual_tensor(dims, CUDNN_DATA_FLOAT, strides);
               g.conv_backward_data(conv_of(p), kDy, kW, grad);
               const int64_t scaled = g.virtual_tensor(dims, CUDNN_DATA_FLOAT, strides);
               const int64_t pre = g.virtual_tensor(dims, CUDNN_DATA_FLOAT, strides);
               g.pointwise({.mode = CUDNN_POINTWISE_MUL, .x = kX, .b = kScale, .y = scaled});
               g.pointwise({.mode = CUDNN_POINTWISE_ADD, .x = scaled, .b = kBias, .y = pre});
               g.relu_backward(pre, grad, kDx);
             });
  if (std::string reason = unusable(entry); !reason.empty()) return refuse(why, reason);
  run(*entry, x.device(), {kX, kW, kDy, kDx, kScale, kBias},
      {x.data_ptr(), w.data_ptr(), grad_y.data_ptr(), grad_pre.data_ptr(), prologue.scale.data_ptr(),
       prologue.bias.data_ptr()});
  return true;
}

bool conv2d_backward_input_batch_norm_relu(const Tensor& grad_z, const Tensor& w, const Tensor& x,
                                           const BatchNormParams& bn, const Tensor& grad_pre,
                                           const BatchNormBackwardCoefficients& out, const ConvParams& p,
                                           const Routes& routes, std::string* why) {
  if (std::string problem = layout_problem({&grad_z, &w, &x, &grad_pre}, {}, p); !problem.empty())
    return refuse(why, problem);
  for (const Tensor* t : {&bn.mean, &bn.invstd, &bn.weight, &bn.bias, &out.dweight, &out.dbias, &out.eq_dy,
                          &out.eq_x, &out.eq_bias}) {
    if (t->dtype() != kFloat32 || !t->is_contiguous() || t->numel() != x.size(1) ||
        reinterpret_cast<uintptr_t>(t->data_ptr()) % 16 != 0)
      return refuse(why,
                    "the batch norm's per-channel tensors must be 16-byte-aligned contiguous (C) float32");
  }
  nabla::cuda::DeviceGuard device(x.device().index);
  Entry* entry =
      cached(routes, key_of(Pattern::DataGradBatchNormRelu, p, nullptr, routes, {&grad_z, &w, &x, &grad_pre}),
             [&](Graph& g) {
               const std::vector<int64_t> dims = dims_of(x), strides = strides_of(x);
               g.tensor(kX, io_type(x), dims, strides);
               g.tensor(kW, io_type(w), dims_of(w), strides_of(w));
               g.tensor(kDy, io_type(grad_z), dims_of(grad_z), strides_of(grad_z));
               g.tensor(kDx, io_type(grad_pre), dims_of(grad_pre), strides_of(grad_pre));
               for (int64_t uid : {kMean, kInvStd, kScale, kBias, kDScale, kDBias, kEqDy, kEqX, kEqBias})
                 channel_tensor(g, uid, x.size(1));
               const int64_t grad = g.virtual_tensor(dims, CUDNN_DATA_FLOAT, strides);
               g.conv_backward_data(conv_of(p), kDy, kW, grad);
               // The batch norm's output, recomputed from x: (x - mean) * invstd * weight + bias.
               int64_t v = kX;
               for (const auto& [mode, operand] : {std::pair{CUDNN_POINTWISE_SUB, kMean},
                                                   {CUDNN_POINTWISE_MUL, kInvStd},
                                                   {CUDNN_POINTWISE_MUL, kScale},
                                                   {CUDNN_POINTWISE_ADD, kBias}}) {
                 const int64_t next = g.virtual_tensor(dims, CUDNN_DATA_FLOAT, strides);
                 g.pointwise({.mode = mode, .x = v, .b = operand, .y = next});
                 v = next;
               }
               g.relu_backward(v, grad, kDx);
               g.batch_norm_backward_weights({.x = kX,
                                              .dy = kDx,
                                              .mean = kMean,
                                              .invstd = kInvStd,
                                              .weight = kScale,
                                              .dweight = kDScale,
                                              .dbias = kDBias,
                                              .eq_dy = kEqDy,
                                              .eq_x = kEqX,
                                              .eq_bias = kEqBias});
             });
  if (std::string reason = unusable(entry); !reason.empty()) return refuse(why, reason);
  run(*entry, x.device(),
      {kX, kW, kDy, kDx, kMean, kInvStd, kScale, kBias, kDScale, kDBias, kEqDy, kEqX, kEqBias},
      {x.data_ptr(), w.data_ptr(), grad_z.data_ptr(), grad_pre.data_ptr(), bn.mean.data_ptr(),
       bn.invstd.data_ptr(), bn.weight.data_ptr(), bn.bias.data_ptr(), out.dweight.data_ptr(),
       out.dbias.data_ptr(), out.eq_dy.data_ptr(), out.eq_x.data_ptr(), out.eq_bias.data_ptr()});
  return true;
}

bool conv2d_forward_bias_relu(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& residual,
                              bool relu, const Tensor& y, const ConvParams& p, const Routes& routes,
                              std::string* why) {
  std::string problem = residual.defined() ? layout_problem({&x, &w, &y, &residual}, {}, p)
                                           : layout_problem({&x, &w, &y}, {}, p);
  if (!problem.empty()) return refuse(why, problem);
  if (residual.defined() && residual.strides() != y.strides())
    return refuse(why, "the residual must be laid out as the output");
  if (bias.dim() != 1 || bias.numel() != y.size(1) || !bias.is_contiguous() || bias.device() != y.device() ||
      (bias.dtype() != kFloat32 && bias.dtype() != y.dtype()) ||
      reinterpret_cast<uintptr_t>(bias.data_ptr()) % 16 != 0)
    return refuse(why, "the bias must be a 16-byte-aligned contiguous (O) tensor, float32 or of y's dtype");
  nabla::cuda::DeviceGuard device(x.device().index);
  // The bias's dtype and the epilogue's shape (residual, ReLU) are part of the problem.
  std::vector<int64_t> key = key_of(Pattern::ForwardBiasRelu, p, nullptr, routes, {&x, &w, &y});
  key.insert(key.end(), {static_cast<int64_t>(bias.dtype()), residual.defined(), relu});
  Entry* entry = cached(routes, std::move(key), [&](Graph& g) {
    const std::vector<int64_t> dims = dims_of(y), strides = strides_of(y);
    g.tensor(kX, io_type(x), dims_of(x), strides_of(x));
    g.tensor(kW, io_type(w), dims_of(w), strides_of(w));
    g.tensor(kY, io_type(y), dims, strides);
    channel_tensor(g, kBias, y.size(1), bias.dtype() == kFloat32 ? CUDNN_DATA_FLOAT : io_type(y));
    // conv -> + bias [-> + residual] [-> ReLU], each step a float32 virtual tensor but the last.
    int64_t v = g.virtual_tensor(dims, CUDNN_DATA_FLOAT, strides);
    g.conv_forward(conv_of(p), kX, kW, v);
    std::vector<std::pair<cudnnPointwiseMode_t, std::optional<int64_t>>> steps = {
        {CUDNN_POINTWISE_ADD, kBias}};
    if (residual.defined()) {
      g.tensor(kResidual, io_type(residual), dims, strides);
      steps.emplace_back(CUDNN_POINTWISE_ADD, kResidual);
    }
    if (relu) steps.emplace_back(CUDNN_POINTWISE_RELU_FWD, std::nullopt);
    for (size_t i = 0; i < steps.size(); ++i) {
      const int64_t next = i + 1 == steps.size() ? kY : g.virtual_tensor(dims, CUDNN_DATA_FLOAT, strides);
      g.pointwise({.mode = steps[i].first, .x = v, .b = steps[i].second, .y = next});
      v = next;
    }
  });
  if (std::string reason = unusable(entry); !reason.empty()) return refuse(why, reason);
  std::vector<int64_t> uids = {kX, kW, kY, kBias};
  std::vector<void*> ptrs = {x.data_ptr(), w.data_ptr(), y.data_ptr(), bias.data_ptr()};
  if (residual.defined()) {
    uids.push_back(kResidual);
    ptrs.push_back(residual.data_ptr());
  }
  run(*entry, x.device(), uids, ptrs);
  return true;
}

// Note [Grouped convolutions on the graph API]: cuDNN's legacy entry points (cudnnFind*) offer
// only a few algorithms for a grouped channels_last 16-bit convolution, and for MobileNet's
// stride-2 depthwise ones the best of them took nearly 4x PyTorch's time (forward + backward
// at batch 256, nabla_bench_depthwise). The backend graph API reaches the engines PyTorch's
// cuDNN path uses; in benchmark mode the first candidates are timed as above.
bool conv2d_graph(ConvDirection direction, const Tensor& x, const Tensor& w, const Tensor& y,
                  const ConvParams& p, const Routes& routes, std::string* why) {
  if (cudnnGetVersion() < 90000) return refuse(why, "the graph route needs cuDNN 9");
  for (const Tensor* t : {&x, &w, &y}) {
    if (t->dim() != 4 || (t->dtype() != kFloat16 && t->dtype() != kBFloat16) || t->dtype() != x.dtype() ||
        !t->is_contiguous(MemoryFormat::ChannelsLast) ||
        reinterpret_cast<uintptr_t>(t->data_ptr()) % 16 != 0 || t->numel() >= (int64_t{1} << 31))
      return refuse(why,
                    "the graph route takes 16-byte-aligned channels_last float16/bfloat16 tensors of one "
                    "dtype, under 2^31 elements");
  }
  if (x.size(1) % 8 != 0 || y.size(1) % 8 != 0) return refuse(why, "the graph route takes channels in 8s");
  nabla::cuda::DeviceGuard device(x.device().index);
  const Pattern pattern = direction == ConvDirection::Forward        ? Pattern::GraphForward
                          : direction == ConvDirection::BackwardData ? Pattern::GraphDataGrad
                                                                     : Pattern::GraphWeightGrad;
  Entry* entry = cached(routes, key_of(pattern, p, nullptr, routes, {&x, &w, &y}), [&](Graph& g) {
    // The groups are implied by the filter's input channels, C / groups.
    g.tensor(kX, io_type(x), dims_of(x), strides_of(x));
    g.tensor(kW, io_type(w), dims_of(w), strides_of(w));
    g.tensor(kY, io_type(y), dims_of(y), strides_of(y));
    if (pattern == Pattern::GraphForward) g.conv_forward(conv_of(p), kX, kW, kY);
    if (pattern == Pattern::GraphDataGrad) g.conv_backward_data(conv_of(p), kY, kW, kX);
    if (pattern == Pattern::GraphWeightGrad) g.conv_backward_filter(conv_of(p), kX, kY, kW);
  });
  if (std::string reason = unusable(entry); !reason.empty()) return refuse(why, reason);
  run(*entry, x.device(), {kX, kW, kY}, {x.data_ptr(), w.data_ptr(), y.data_ptr()});
  return true;
}

std::string conv_bn_last_engine() {
  return last_engine;
}

}  // namespace nabla::ops::cuda
