// CUDA 2-d convolution on cuDNN's convolution API (cudnnConvolutionForward, BackwardData and
// BackwardFilter).
//
// Layout: the front end hands over x (or grad_x), w (or grad_w) and y (or grad_y) dense in one
// memory format. Contiguous tensors run as NCHW with an NCHW filter; channels_last ones as NHWC
// tensors with an NHWC filter, the layout cuDNN's tensor-core kernels read directly. Tensor
// descriptors carry the real strides.
//
// Precision: the convolution descriptor's compute type is float for float32, float16 and
// bfloat16 (16-bit data accumulates in float32) and double for float64. Math type: float32 runs
// with CUDNN_FMA_MATH when TF32 is off (no tensor-core rounding of the inputs) and as cuDNN
// chooses otherwise (TF32 allowed); float16/bfloat16 with CUDNN_TENSOR_OP_MATH. An algorithm
// whose math type is CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION (float32 rounded to float16) is never
// used.
//
// Algorithm choice, per problem (direction, device, dtype, layout, shapes, options, TF32,
// determinism, benchmark mode and pointer alignments):
//  - by default cudnnGetConvolution*Algorithm_v7 ranks the algorithms without running them; the
//    first usable one (status ok, deterministic when asked, a workspace that can be allocated)
//    wins;
//  - in benchmark mode cudnnFindConvolution*AlgorithmEx times them all on the real buffers with
//    a workspace as large as the hungriest algorithm asks for (halved until it can be
//    allocated), and the fastest usable one wins. That search synchronizes; it runs once per
//    problem.
// The choice (algorithm, math type, workspace size) is cached in a process-wide hash map under a
// mutex, so a hit costs a lookup and never touches the device. Workspaces come from the caching
// allocator (Tensor::empty on the current stream) and go back to it after the call, which is
// stream-ordered, so the next call on the stream reuses the same block.
//
// Note [Pointwise convolutions as GEMMs]
// A 1x1 convolution with stride 1, no padding and one group on NHWC tensors is exactly a matrix
// product over pixels: x is (N H W, C) row-major, y is (N H W, O), w is (O, C). So
//   forward  y = x @ w^T,   data  grad_x = grad_y @ w,   filter  grad_w = grad_y^T @ x,
// all read in place. These run on cuBLASLt (ops/cuda/linalg/gemm.cpp), which is faster at them than
// cuDNN's legacy convolution API (ResNet-50's 1x1 layers in float16 at batch 256: up to 4x), and
// skip the algorithm search. TF32 follows Routes::conv_tf32. float64 never runs NHWC.
#include <cuda_runtime_api.h>
#include <cudnn.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <climits>
#include <mutex>
#include <optional>
#include <unordered_map>

#include "nabla/core/cuda/check.h"
#include "nabla/core/cuda/device_guard.h"
#include "nabla/core/cuda/handles.h"
#include "nabla/core/cuda/memory.h"
#include "nabla/core/logging.h"
#include "nabla/ops/cuda/conv/bn_kernels.h"
#include "nabla/ops/cuda/conv/kernels.h"
#include "nabla/ops/cuda/cudnn/descriptors.h"
#include "nabla/ops/cuda/elementwise/kernels.h"
#include "nabla/ops/cuda/linalg/kernels.h"
#include "nabla/ops/detail/alias.h"

namespace nabla::ops::cuda {

namespace {

enum class Direction : int64_t { Forward, BackwardData, BackwardFilter };

// One convolution call: descriptors and pointers. x, w and y are the forward's roles; which of
// them is written depends on the direction.
struct Problem {
  cudnnHandle_t handle;
  TensorDescriptor x_desc, y_desc;
  FilterDescriptor w_desc;
  ConvolutionDescriptor conv;
  void* x;
  void* w;
  void* y;
  Device device;
  bool f64;  // alpha and beta are doubles
  bool fp32_without_tf32;
  cudnnMathType_t default_math;
};

template <Direction D>
struct Algos;

template <>
struct Algos<Direction::Forward> {
  using Perf = cudnnConvolutionFwdAlgoPerf_t;
  using Algo = cudnnConvolutionFwdAlgo_t;
  static constexpr int kCount = CUDNN_CONVOLUTION_FWD_ALGO_COUNT;
  static void rank(const Problem& p, int* n, Perf* perfs) {
    NABLA_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(p.handle, p.x_desc.get(), p.w_desc.get(),
                                                             p.conv.get(), p.y_desc.get(), kCount, n, perfs));
  }
  static void find(const Problem& p, int* n, Perf* perfs, void* ws, size_t bytes) {
    NABLA_CUDNN_CHECK(cudnnFindConvolutionForwardAlgorithmEx(p.handle, p.x_desc.get(), p.x, p.w_desc.get(),
                                                             p.w, p.conv.get(), p.y_desc.get(), p.y, kCount,
                                                             n, perfs, ws, bytes));
  }
  static cudnnStatus_t workspace(const Problem& p, Algo algo, size_t* bytes) {
    return cudnnGetConvolutionForwardWorkspaceSize(p.handle, p.x_desc.get(), p.w_desc.get(), p.conv.get(),
                                                   p.y_desc.get(), algo, bytes);
  }
  static void run(const Problem& p, Algo algo, void* ws, size_t bytes, const void* one, const void* zero) {
    NABLA_CUDNN_CHECK(cudnnConvolutionForward(p.handle, one, p.x_desc.get(), p.x, p.w_desc.get(), p.w,
                                              p.conv.get(), algo, ws, bytes, zero, p.y_desc.get(), p.y));
  }
};

template <>
struct Algos<Direction::BackwardData> {
  using Perf = cudnnConvolutionBwdDataAlgoPerf_t;
  using Algo = cudnnConvolutionBwdDataAlgo_t;
  static constexpr int kCount = CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT;
  static void rank(const Problem& p, int* n, Perf* perfs) {
    NABLA_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(
        p.handle, p.w_desc.get(), p.y_desc.get(), p.conv.get(), p.x_desc.get(), kCount, n, perfs));
  }
  static void find(const Problem& p, int* n, Perf* perfs, void* ws, size_t bytes) {
    NABLA_CUDNN_CHECK(cudnnFindConvolutionBackwardDataAlgorithmEx(
        p.handle, p.w_desc.get(), p.w, p.y_desc.get(), p.y, p.conv.get(), p.x_desc.get(), p.x, kCount, n,
        perfs, ws, bytes));
  }
  static cudnnStatus_t workspace(const Problem& p, Algo algo, size_t* bytes) {
    return cudnnGetConvolutionBackwardDataWorkspaceSize(p.handle, p.w_desc.get(), p.y_desc.get(),
                                                        p.conv.get(), p.x_desc.get(), algo, bytes);
  }
  static void run(const Problem& p, Algo algo, void* ws, size_t bytes, const void* one, const void* zero) {
    NABLA_CUDNN_CHECK(cudnnConvolutionBackwardData(p.handle, one, p.w_desc.get(), p.w, p.y_desc.get(), p.y,
                                                   p.conv.get(), algo, ws, bytes, zero, p.x_desc.get(), p.x));
  }
};

template <>
struct Algos<Direction::BackwardFilter> {
  using Perf = cudnnConvolutionBwdFilterAlgoPerf_t;
  using Algo = cudnnConvolutionBwdFilterAlgo_t;
  static constexpr int kCount = CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT;
  static void rank(const Problem& p, int* n, Perf* perfs) {
    NABLA_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
        p.handle, p.x_desc.get(), p.y_desc.get(), p.conv.get(), p.w_desc.get(), kCount, n, perfs));
  }
  static void find(const Problem& p, int* n, Perf* perfs, void* ws, size_t bytes) {
    NABLA_CUDNN_CHECK(cudnnFindConvolutionBackwardFilterAlgorithmEx(
        p.handle, p.x_desc.get(), p.x, p.y_desc.get(), p.y, p.conv.get(), p.w_desc.get(), p.w, kCount, n,
        perfs, ws, bytes));
  }
  static cudnnStatus_t workspace(const Problem& p, Algo algo, size_t* bytes) {
    return cudnnGetConvolutionBackwardFilterWorkspaceSize(p.handle, p.x_desc.get(), p.y_desc.get(),
                                                          p.conv.get(), p.w_desc.get(), algo, bytes);
  }
  static void run(const Problem& p, Algo algo, void* ws, size_t bytes, const void* one, const void* zero) {
    NABLA_CUDNN_CHECK(cudnnConvolutionBackwardFilter(p.handle, one, p.x_desc.get(), p.x, p.y_desc.get(), p.y,
                                                     p.conv.get(), algo, ws, bytes, zero, p.w_desc.get(),
                                                     p.w));
  }
};

// ---- the algorithm cache ----------------------------------------------------------------------

using Key = std::array<int64_t, 22>;

struct KeyHash {
  size_t operator()(const Key& key) const {
    uint64_t h = 0xcbf29ce484222325ull;
    for (int64_t v : key) h = (h ^ static_cast<uint64_t>(v)) * 0x100000001b3ull;
    return static_cast<size_t>(h);
  }
};

struct Choice {
  int algo;
  cudnnMathType_t math;
  size_t workspace_bytes;
};

struct AlgoCache {
  std::mutex mutex;
  std::unordered_map<Key, Choice, KeyHash> choices;
};

AlgoCache& algo_cache() {
  static auto* cache = new AlgoCache();  // leaked on purpose: used until process exit
  return *cache;
}

// The largest power of two (up to 256) dividing the address.
int64_t alignment(const void* p) {
  const auto bits = reinterpret_cast<uintptr_t>(p);
  int64_t align = 256;
  while (align > 1 && (bits & static_cast<uintptr_t>(align - 1)) != 0) align /= 2;
  return align;
}

Key make_key(Direction d, const Tensor& x, const Tensor& w, const Problem& p, const ConvParams& params,
             const Routes& s, bool nhwc) {
  return {static_cast<int64_t>(d),
          x.device().index,
          static_cast<int64_t>(x.dtype()),
          nhwc,
          x.size(0),
          x.size(1),
          x.size(2),
          x.size(3),
          w.size(0),
          w.size(1),
          w.size(2),
          w.size(3),
          params.stride[0] * 65536 + params.stride[1],
          params.padding[0] * 65536 + params.padding[1],
          params.dilation[0] * 65536 + params.dilation[1],
          params.groups,
          s.conv_tf32,
          s.cudnn_deterministic,
          s.cudnn_benchmark,
          alignment(p.x),
          alignment(p.w),
          alignment(p.y)};
}

Tensor allocate_workspace(size_t bytes, Device device) {
  return Tensor::empty({static_cast<int64_t>(bytes)}, {.dtype = kUInt8, .device = device});
}

// The benchmark's timing scratch is as large as the hungriest algorithm asks for: FFT in NCHW
// wants several GiB at batch 256. Left in the allocator's cache it would stay reserved for the
// rest of the process: NCHW float32 training reserved nearly twice the memory it allocated, and
// batch-16 inference held several GiB. The search has just synchronized the device anyway, so
// handing the free segments back costs little, and only once per problem.
constexpr size_t kReleaseScratchFrom = size_t{256} << 20;

void release_benchmark_scratch(size_t budget) {
  if (budget < kReleaseScratchFrom) return;
  try {
    nabla::cuda::empty_cache();
  } catch (const Error&) {
    // Inside a CUDA graph capture the cache cannot be emptied; the scratch stays cached.
  }
}

void* data_of(const Tensor& workspace) {
  return workspace.numel() > 0 ? workspace.data_ptr() : nullptr;
}

// Whether a ranked or timed algorithm may run under the routes; sets its math type on the
// descriptor if so.
template <typename Perf>
bool usable(const Perf& perf, Problem& p, const Routes& s) {
  if (perf.status != CUDNN_STATUS_SUCCESS) return false;
  if (s.cudnn_deterministic && perf.determinism != CUDNN_DETERMINISTIC) return false;
  if (perf.mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION) return false;
  if (p.fp32_without_tf32 && perf.mathType == CUDNN_TENSOR_OP_MATH) return false;
  p.conv.set_math(p.fp32_without_tf32 ? CUDNN_FMA_MATH : perf.mathType);
  return true;
}

[[noreturn]] void no_algorithm(const char* op, const Problem& p, const Routes& s) {
  NABLA_CHECK(false,
              "{}: cuDNN offers no usable algorithm for this convolution on {} (deterministic={}); try other "
              "shapes or options, or free memory for its workspace",
              op, p.device.str(), s.cudnn_deterministic);
  __builtin_unreachable();
}

// Heuristics: the first usable algorithm whose workspace can be allocated. `workspace` keeps it.
template <Direction D>
Choice choose_by_heuristics(Problem& p, const Routes& s, Tensor& workspace, const char* op) {
  using A = Algos<D>;
  std::array<typename A::Perf, A::kCount> perfs{};
  int n = 0;
  A::rank(p, &n, perfs.data());
  for (int i = 0; i < n; ++i) {
    if (!usable(perfs[i], p, s)) continue;
    size_t bytes = 0;
    if (A::workspace(p, perfs[i].algo, &bytes) != CUDNN_STATUS_SUCCESS) continue;
    try {
      workspace = allocate_workspace(bytes, p.device);
    } catch (const OutOfMemoryError&) {
      continue;
    }
    return {static_cast<int>(perfs[i].algo), p.fp32_without_tf32 ? CUDNN_FMA_MATH : perfs[i].mathType, bytes};
  }
  no_algorithm(op, p, s);
}

// Benchmark mode: time every algorithm on the real buffers and keep the fastest usable one.
template <Direction D>
Choice choose_by_benchmark(Problem& p, const Routes& s, Tensor& workspace, const char* op, const Key& key) {
  using A = Algos<D>;
  p.conv.set_math(p.default_math);
  size_t budget = 0;
  for (int a = 0; a < A::kCount; ++a) {
    size_t bytes = 0;
    if (A::workspace(p, static_cast<typename A::Algo>(a), &bytes) == CUDNN_STATUS_SUCCESS) {
      budget = std::max(budget, bytes);
    }
  }
  Tensor scratch;
  for (;;) {
    try {
      scratch = allocate_workspace(budget, p.device);
      break;
    } catch (const OutOfMemoryError&) {
      if (budget == 0) throw;
      budget /= 2;
    }
  }
  std::array<typename A::Perf, A::kCount> perfs{};
  int n = 0;
  A::find(p, &n, perfs.data(), data_of(scratch), budget);
  scratch = Tensor();  // back to the cache before the chosen algorithm's workspace is taken
  release_benchmark_scratch(budget);
  for (int i = 0; i < n; ++i) {
    if (perfs[i].memory > budget || !usable(perfs[i], p, s)) continue;
    size_t bytes = 0;
    if (A::workspace(p, perfs[i].algo, &bytes) != CUDNN_STATUS_SUCCESS) continue;
    workspace = allocate_workspace(bytes, p.device);
    // NABLA_LOG_LEVEL=debug: what each search chose, to compare runs whose speeds differ.
    NABLA_LOG_DEBUG(
        "{} {} (cuDNN benchmark): algorithm {} in {:.4f} ms, math {}, workspace {} bytes; {} timed", op,
        fmt::join(key, ","), static_cast<int>(perfs[i].algo), perfs[i].time,
        static_cast<int>(perfs[i].mathType), bytes, n);
    return {static_cast<int>(perfs[i].algo), p.fp32_without_tf32 ? CUDNN_FMA_MATH : perfs[i].mathType, bytes};
  }
  no_algorithm(op, p, s);
}

// The cached choice for `key`, or a new one (heuristics or benchmark); `workspace` holds its
// workspace and the descriptor its math type.
template <Direction D>
Choice choose(Problem& p, const Key& key, const Routes& s, const char* op, Tensor& workspace) {
  std::optional<Choice> choice;
  {
    auto& cache = algo_cache();
    std::lock_guard lock(cache.mutex);
    auto it = cache.choices.find(key);
    if (it != cache.choices.end()) choice = it->second;
  }
  if (choice) {
    p.conv.set_math(choice->math);
    workspace = allocate_workspace(choice->workspace_bytes, p.device);
    return *choice;
  }
  // Two threads may both search the same problem; they store the same kind of answer.
  choice = s.cudnn_benchmark ? choose_by_benchmark<D>(p, s, workspace, op, key)
                             : choose_by_heuristics<D>(p, s, workspace, op);
  auto& cache = algo_cache();
  std::lock_guard lock(cache.mutex);
  cache.choices.emplace(key, *choice);
  return *choice;
}

template <Direction D>
void convolve(Problem& p, const Key& key, const Routes& s, const char* op) {
  using A = Algos<D>;
  Tensor workspace;
  const Choice choice = choose<D>(p, key, s, op, workspace);
  const float one_f = 1.0f, zero_f = 0.0f;
  const double one_d = 1.0, zero_d = 0.0;
  const void* one = p.f64 ? static_cast<const void*>(&one_d) : static_cast<const void*>(&one_f);
  const void* zero = p.f64 ? static_cast<const void*>(&zero_d) : static_cast<const void*>(&zero_f);
  A::run(p, static_cast<typename A::Algo>(choice.algo), data_of(workspace), choice.workspace_bytes, one,
         zero);
}

// ---- problem setup ------------------------------------------------------------------------------

// NHWC when any operand is not plain NCHW (the front end makes them one or the other). An
// operand can be both (one channel, or a 1x1 kernel), so no single one decides: a one-channel
// input of a channels_last stem is NCHW-contiguous too, while its output is NHWC.
bool check_layouts(const char* op, const Tensor& x, const Tensor& w, const Tensor& y) {
  const bool nhwc = !x.is_contiguous() || !w.is_contiguous() || !y.is_contiguous();
  const MemoryFormat format = nhwc ? MemoryFormat::ChannelsLast : MemoryFormat::Contiguous;
  for (const Tensor* t : {&x, &w, &y}) {
    NABLA_ASSERT(t->is_contiguous(format),
                 "{}: the front end passes operands in one layout, got {}, {} and {}", op, describe(x),
                 describe(w), describe(y));
    NABLA_CHECK(t->numel() <= INT_MAX, "{}: {} has more than 2^31 - 1 elements, which cuDNN cannot index", op,
                describe(*t));
  }
  return nhwc;
}

cudnnMathType_t default_math(DType dtype, bool allow_tf32) {
  switch (dtype) {
    case DType::Float16:
    case DType::BFloat16:
      return CUDNN_TENSOR_OP_MATH;
    case DType::Float32:
      return allow_tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
    default:
      return CUDNN_DEFAULT_MATH;
  }
}

Problem make_problem(const Tensor& x, const Tensor& w, const Tensor& y, const ConvParams& params,
                     const Routes& s, bool nhwc) {
  const DType dtype = x.dtype();
  Problem p{.handle = nabla::cuda::cudnn_handle(),
            .x_desc = TensorDescriptor(x),
            .y_desc = TensorDescriptor(y),
            .w_desc = FilterDescriptor(w, nhwc),
            .conv = ConvolutionDescriptor(params, dtype),
            .x = x.data_ptr(),
            .w = w.data_ptr(),
            .y = y.data_ptr(),
            .device = x.device(),
            .f64 = dtype == kFloat64,
            .fp32_without_tf32 = dtype == kFloat32 && !s.conv_tf32,
            .default_math = default_math(dtype, s.conv_tf32)};
  p.conv.set_math(p.default_math);
  return p;
}

template <Direction D>
void run_direction(const char* op, const Tensor& x, const Tensor& w, const Tensor& y,
                   const ConvParams& params, const Routes& s) {
  nabla::cuda::DeviceGuard device(x.device().index);
  const bool nhwc = check_layouts(op, x, w, y);
  Problem p = make_problem(x, w, y, params, s, nhwc);
  convolve<D>(p, make_key(D, x, w, p, params, s, nhwc), s, op);
}

// Note [Pointwise convolutions as GEMMs]. `act` is x or grad_x.
bool is_pointwise_gemm(const Tensor& act, const Tensor& w, const ConvParams& p) {
  return w.size(2) == 1 && w.size(3) == 1 && p.stride[0] == 1 && p.stride[1] == 1 && p.padding[0] == 0 &&
         p.padding[1] == 0 && p.groups == 1 && act.dtype() != kFloat64 && !act.is_contiguous();
}

// (N, C, H, W) channels_last as the (N H W, C) row-major matrix it is in memory.
Tensor pixel_rows(const Tensor& t) {
  return ops::alias(t, {t.size(0) * t.size(2) * t.size(3), t.size(1)}, {t.size(1), 1}, t.storage_offset());
}

// A 1x1 weight (O, C, 1, 1), dense in either layout, as the (O, C) row-major matrix.
Tensor weight_matrix(const Tensor& w) {
  return ops::alias(w, {w.size(0), w.size(1)}, {w.size(1), 1}, w.storage_offset());
}

// Note [Convolutions on the graph API]: a grouped convolution always tries cuDNN's backend graph
// API first (Note [Grouped convolutions on the graph API] in conv/bn_fused.cpp), and an
// ungrouped one does too outside deterministic mode: the legacy cudnnFind* list lacks engines the
// graph API offers, and at ResNet-50's shapes its best 3x3 convolutions took up to 1.5x the graph
// API's. Deterministic mode keeps the legacy list, whose deterministic choices are the ones the
// bit-for-bit tests run on. The route table (conv/routes.cpp) sends the graph API only what it
// takes (16-bit channels_last, channels in 8s); where it still declines, the legacy call runs.
template <Direction D>
void on_cudnn(ConvRoute route, const char* op, const Tensor& x, const Tensor& w, const Tensor& y,
              const ConvParams& p, const Routes& routes) {
  constexpr ConvDirection direction = D == Direction::Forward        ? ConvDirection::Forward
                                      : D == Direction::BackwardData ? ConvDirection::BackwardData
                                                                     : ConvDirection::BackwardWeight;
  if (route == ConvRoute::GraphApi && conv2d_graph(direction, x, w, y, p, routes)) return;
  run_direction<D>(op, x, w, y, p, routes);
}

}  // namespace

void conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& y,
                    const ConvParams& p, const Routes& routes) {
  const ConvRoute route = conv_route(ConvDirection::Forward, x, w, y, p, routes);
  switch (route) {
    case ConvRoute::SpaceToDepth:
      conv2d_forward(space_to_depth_input(x, w, y, p), space_to_depth_weight(w), bias, y, {}, routes);
      return;
    case ConvRoute::PointwiseGemm:
      gemm(pixel_rows(x), weight_matrix(w).t(), pixel_rows(y),
           {.bias = bias, .allow_tf32 = routes.conv_tf32});
      return;
    case ConvRoute::DepthwiseKernel:  // a data-gradient route only
    case ConvRoute::GraphApi:
    case ConvRoute::Legacy:
      break;
  }
  // channels_last 16-bit with a bias: the bias in the convolution's epilogue where cuDNN's
  // fusion engines take it, else a pass of its own.
  if (bias.defined() && conv2d_forward_bias_relu(x, w, bias, {}, false, y, p, routes)) return;
  on_cudnn<Direction::Forward>(route, "conv2d", x, w, y, p, routes);
  if (bias.defined()) {
    // y += bias, broadcast over (N, H, W), in place with the elementwise kernel.
    Tensor b = ops::alias(bias, {1, bias.size(0), 1, 1}, {0, bias.stride(0), 0, 0}, bias.storage_offset());
    binary(BinaryOp::Add, y, b, y, 1.0);
  }
}

bool conv2d_forward_relu(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& residual,
                         const Tensor& y, const ConvParams& params, const Routes& routes) {
  nabla::cuda::DeviceGuard device(x.device().index);
  if (x.dtype() == kFloat64) return false;
  const bool nhwc = check_layouts("conv2d_relu", x, w, y);
  if (residual.defined() && (residual.strides() != y.strides() || residual.dtype() != y.dtype()))
    return false;
  if (takes_space_to_depth(x, w, y, params)) {
    return conv2d_forward_relu(space_to_depth_input(x, w, y, params), space_to_depth_weight(w), bias,
                               residual, y, {}, routes);
  }
  // Note [Few input channels]: cuDNN has no fast kernel for a channels_last 16-bit convolution
  // of an image (3 channels): at batch 16, ResNet-50's folded stem took about a fifth of the
  // whole forward on a generic one. Zero channels up to 8 make it an ordinary implicit GEMM, which
  // the fusion engines also take, for one small copy of the input and of the weight.
  if (nhwc && is_reduced_float(x.dtype()) && params.groups == 1 && x.size(1) < 8) {
    const auto padded = [](const Tensor& t) {
      Tensor p = Tensor::empty(
          {t.size(0), 8, t.size(2), t.size(3)},
          {.dtype = t.dtype(), .device = t.device(), .memory_format = MemoryFormat::ChannelsLast});
      fill(p, 0.0);
      copy(t, p.narrow(1, 0, t.size(1)));
      return p;
    };
    return conv2d_forward_relu(padded(x), padded(w), bias, residual, y, params, routes);
  }
  // cuDNN reads the bias in y's type.
  const Tensor b = bias.dtype() == y.dtype() ? bias.contiguous() : bias.to(y.dtype());
  // A 1x1 convolution of stride 1 is a GEMM (Note [Pointwise convolutions as GEMMs]): cuBLASLt
  // adds the bias and the residual and applies the ReLU in its epilogue.
  if (is_pointwise_gemm(x, w, params) &&
      gemm(pixel_rows(x), weight_matrix(w).t(), pixel_rows(y),
           {.bias = b,
            .allow_tf32 = routes.conv_tf32,
            .relu = true,
            .addend = residual.defined() ? pixel_rows(residual) : Tensor{}}))
    return true;
  // channels_last 16-bit: cuDNN's fusion engines, whose plans benchmark mode times on the call
  // itself. The legacy fused call below takes the plain convolution's algorithm, which at small
  // batches was a poor one for it (docs/performance-archive.md).
  if (conv2d_forward_bias_relu(x, w, b, residual, true, y, params, routes)) return true;
  // The forward's algorithm (same key, so the same cached choice): cuDNN runs the bias, the sum
  // and the ReLU in that algorithm's epilogue.
  Problem p = make_problem(x, w, y, params, routes, nhwc);
  Tensor workspace;
  const Choice choice = choose<Direction::Forward>(
      p, make_key(Direction::Forward, x, w, p, params, routes, nhwc), routes, "conv2d_relu", workspace);
  // cuDNN reads the bias as a (1, O, 1, 1) tensor.
  const TensorDescriptor bias_desc(
      ops::alias(b, {1, b.size(0), 1, 1}, {b.size(0), 1, 1, 1}, b.storage_offset()));
  const Tensor& z = residual.defined() ? residual : y;  // alpha2 = 0 when there is no residual
  const TensorDescriptor z_desc(z);
  const ReluDescriptor relu;
  const float one = 1.0f, alpha2 = residual.defined() ? 1.0f : 0.0f;
  const cudnnStatus_t status = cudnnConvolutionBiasActivationForward(
      p.handle, &one, p.x_desc.get(), p.x, p.w_desc.get(), p.w, p.conv.get(),
      static_cast<cudnnConvolutionFwdAlgo_t>(choice.algo), data_of(workspace), choice.workspace_bytes,
      &alpha2, z_desc.get(), z.data_ptr(), bias_desc.get(), b.data_ptr(), relu.get(), p.y_desc.get(), p.y);
  if (status == CUDNN_STATUS_NOT_SUPPORTED) return false;
  NABLA_CUDNN_CHECK(status);
  return true;
}

void conv2d_backward_input(const Tensor& grad_y, const Tensor& w, const Tensor& grad_x, const ConvParams& p,
                           const Routes& routes) {
  const ConvRoute route = conv_route(ConvDirection::BackwardData, grad_x, w, grad_y, p, routes);
  switch (route) {
    case ConvRoute::DepthwiseKernel:
      depthwise_conv2d_backward_input(grad_y, w, grad_x, p);
      return;
    case ConvRoute::PointwiseGemm:
      gemm(pixel_rows(grad_y), weight_matrix(w), pixel_rows(grad_x), {.allow_tf32 = routes.conv_tf32});
      return;
    case ConvRoute::SpaceToDepth:  // a forward and filter-gradient route only
    case ConvRoute::GraphApi:
    case ConvRoute::Legacy:
      on_cudnn<Direction::BackwardData>(route, "conv2d_backward_input", grad_x, w, grad_y, p, routes);
      return;
  }
}

bool conv2d_backward_input_accumulate(const Tensor& grad_y, const Tensor& w, const Tensor& grad_x,
                                      const ConvParams& p, const Routes& routes) {
  if (!is_pointwise_gemm(grad_x, w, p)) return false;
  gemm(pixel_rows(grad_y), weight_matrix(w), pixel_rows(grad_x),
       {.allow_tf32 = routes.conv_tf32, .accumulate = true});
  return true;
}

void conv2d_backward_weight(const Tensor& grad_y, const Tensor& x, const Tensor& grad_w, const ConvParams& p,
                            const Routes& routes) {
  const ConvRoute route = conv_route(ConvDirection::BackwardWeight, x, grad_w, grad_y, p, routes);
  switch (route) {
    case ConvRoute::SpaceToDepth: {
      const Tensor folded_x = space_to_depth_input(x, grad_w, grad_y, p);
      const Tensor folded = Tensor::empty(
          {grad_w.size(0), folded_x.size(1), (grad_w.size(2) + 1) / 2, (grad_w.size(3) + 1) / 2},
          {.dtype = grad_w.dtype(), .device = grad_w.device(), .memory_format = MemoryFormat::ChannelsLast});
      conv2d_backward_weight(grad_y, folded_x, folded, {}, routes);
      weight_grad_from_space_to_depth(folded, grad_w);
      return;
    }
    case ConvRoute::PointwiseGemm:
      gemm(pixel_rows(grad_y).t(), pixel_rows(x), weight_matrix(grad_w), {.allow_tf32 = routes.conv_tf32});
      return;
    case ConvRoute::DepthwiseKernel:  // a data-gradient route only
    case ConvRoute::GraphApi:
    case ConvRoute::Legacy:
      on_cudnn<Direction::BackwardFilter>(route, "conv2d_backward_weight", x, grad_w, grad_y, p, routes);
      return;
  }
}

bool conv2d_is_pointwise_gemm(const Tensor& act, const Tensor& w, const ConvParams& p) {
  return is_pointwise_gemm(act, w, p);
}

void clear_conv_algorithm_cache() {
  auto& cache = algo_cache();
  std::lock_guard lock(cache.mutex);
  cache.choices.clear();
}

size_t conv_algorithm_cache_size() {
  auto& cache = algo_cache();
  std::lock_guard lock(cache.mutex);
  return cache.choices.size();
}

}  // namespace nabla::ops::cuda
