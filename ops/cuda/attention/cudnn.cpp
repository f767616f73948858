// cuDNN's fused attention, reached through the backend graph API (cudnn/graph.h).
//
// Note [cuDNN attention]
// ~~~~~~~~~~~~~~~~~~~~~~
// cuDNN has no "attention" call: its fused attention engines take an operation graph of the
// pattern cudnn-frontend's SDPA node lowers to, and recognize it. Forward, for q, k, v (B, H, T, D):
//   s = q k^T * scale; with causal, s = row >= col ? s : -inf (two GEN_INDEX, CMP_GE and
//   BINARY_SELECT); m = max_j s; e = exp(s - m); l = sum_j e; lse = m + log(l); out = (e / l) v.
// lse (the "stats" output) is the same float32 log-sum-exp the flash kernels keep, so either
// backward can follow either forward. Backward recomputes p = exp(s - lse) and takes
//   delta = sum_d dout * out,  dv = p^T dout,  dp = dout v^T,  ds = p (dp - delta) * scale,
//   dq = ds k,  dk = ds^T q,
// the transposes of the virtual p and ds written as reshape operations. Every tensor keeps its
// real strides, so q, k, v as views of one (B, T, 3, H, D) projection, out as a view of a
// (B, T, H, D) buffer, and dq, dk, dv as views of one gradient buffer (Note [Attention layouts])
// are read and written in place.
//
// Grouped-query attention: k and v (and dk, dv) are declared with their own, fewer heads, and the
// matmuls that read them broadcast each over its group of query heads. The backward's dk and dv
// products are per query head ((B, H, Tk, D), virtual), each reduced (ADD) onto the key/value
// heads, the pattern cudnn-frontend's SDPA backward lowers grouped heads to.
//
// Building a plan (heuristics, sometimes a runtime compilation) costs milliseconds to seconds,
// so plans are cached per thread and problem (dtype, shapes, strides, causal, device); so is a refusal,
// whose reason the caller reports when cuDNN was asked for by name. Running a plan takes its
// workspace from the caching allocator and never synchronizes.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "nabla/core/cuda/check.h"
#include "nabla/core/cuda/device_guard.h"
#include "nabla/core/cuda/handles.h"
#include "nabla/core/cuda/stream.h"
#include "nabla/core/error.h"
#include "nabla/ops/cuda/attention/kernels.h"
#include "nabla/ops/cuda/cudnn/graph.h"

namespace nabla::ops::cuda {

namespace {

using cudnn_graph::dims_of;
using cudnn_graph::Graph;
using cudnn_graph::io_type;
using cudnn_graph::Plan;
using cudnn_graph::strides_of;

// The uids of the graphs' real tensors. k and v are declared read transposed, (B, H, D, Tk), for
// the matmuls that need k^T and v^T; the backward also reads k untransposed through a reshape.
enum Uid : int64_t {
  kQ = 1,
  kK,
  kV,
  kOut,
  kStats,
  kScale,
  kNegInf,
  kOne,
  kDout,
  kDq,
  kDk,
  kDv,
  kDelta,
  kDqSum
};

// (B, H, T, D) -> (B, H, D, T): the same memory read transposed.
std::vector<int64_t> transposed(std::vector<int64_t> v) {
  std::swap(v[2], v[3]);
  return v;
}

// Why cuDNN cannot take a tensor, or "" when it can: 16-byte aligned data, a unit last stride
// and every other stride a multiple of 8 elements (16 bytes).
std::string layout_problem(const Tensor& t, const char* name) {
  if (t.stride(-1) != 1) return std::string(name) + " has a last stride other than 1";
  for (int64_t d = 0; d + 1 < t.dim(); ++d) {
    if (t.size(d) > 1 && (t.stride(d) <= 0 || t.stride(d) % 8 != 0)) {
      return std::string(name) + " has a stride that is not a positive multiple of 8 elements";
    }
  }
  if (reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 != 0)
    return std::string(name) + " is not 16-byte aligned";
  return "";
}

// Shared checks of the forward and the backward.
std::string problem(const Tensor& q, const Tensor& k, const Tensor& v, bool backward) {
  const size_t version = cudnnGetVersion();
  if (version < 90000) return "cuDNN's fused attention needs cuDNN 9";
  // cudnn-frontend refuses these two releases for fused attention (known wrong results).
  if (version == 91000 || version == 91001) return "cuDNN 9.10.0 and 9.10.1 are refused for fused attention";
  if (q.dim() != 4 || (q.dtype() != kFloat16 && q.dtype() != kBFloat16)) {
    return "cuDNN's fused attention takes 4-d float16/bfloat16 inputs";
  }
  const int64_t D = q.size(3), Tq = q.size(2), Tk = k.size(2);
  if (D % 8 != 0 || D > 128 || v.size(3) != D)
    return "nabla's cuDNN attention takes D == Dv, a multiple of 8 up to 128";
  if (k.size(1) != v.size(1) || k.size(1) == 0 || q.size(1) % k.size(1) != 0)
    return "key and value need one head count that divides the query's";
  if (q.numel() == 0 || Tk == 0) return "empty inputs";
  // Before 9.15.1 cudnn-frontend adds a padding mask to the backward unless T % 128 == 0; nabla
  // does not build that variant.
  if (backward && version <= 91500 && (Tq % 128 != 0 || Tk % 128 != 0)) {
    return "cuDNN " + std::to_string(version) +
           " (before 9.15.1) needs sequence lengths that are multiples of 128 for the backward";
  }
  if (backward && Tq == 1 && Tk == 1) return "cuDNN's fused attention backward does not take Tq = Tk = 1";
  for (const auto& [t, name] : {std::pair{&q, "query"}, {&k, "key"}, {&v, "value"}}) {
    if (std::string p = layout_problem(*t, name); !p.empty()) return p;
  }
  return "";
}

std::vector<int64_t> score_dims(const Tensor& q, const Tensor& k) {
  return {q.size(0), q.size(1), q.size(2), k.size(2)};
}
std::vector<int64_t> row_dims(const Tensor& q) {
  return {q.size(0), q.size(1), q.size(2), 1};
}

// The causal mask: x where the query index (axis 2) >= the key index (axis 3), else -inf.
int64_t causal_mask(Graph& g, int64_t x, const std::vector<int64_t>& dims) {
  const int64_t row = g.virtual_tensor(dims, CUDNN_DATA_INT32),
                col = g.virtual_tensor(dims, CUDNN_DATA_INT32);
  g.pointwise({.mode = CUDNN_POINTWISE_GEN_INDEX, .x = x, .y = row, .axis = 2});
  g.pointwise({.mode = CUDNN_POINTWISE_GEN_INDEX, .x = x, .y = col, .axis = 3});
  const int64_t keep = g.virtual_tensor(dims, CUDNN_DATA_BOOLEAN);
  g.pointwise({.mode = CUDNN_POINTWISE_CMP_GE, .x = row, .b = col, .y = keep, .math = CUDNN_DATA_BOOLEAN});
  const int64_t masked = g.virtual_tensor(dims);
  g.pointwise({.mode = CUDNN_POINTWISE_BINARY_SELECT, .x = x, .b = kNegInf, .t = keep, .y = masked});
  return masked;
}

// q, k^T (k's uid), v (or v^T for the backward), the stats and the scalars.
void declare_common(Graph& g, const Tensor& q, const Tensor& k, const Tensor& v, bool v_transposed) {
  const cudnnDataType_t type = io_type(q);
  g.tensor(kQ, type, dims_of(q), strides_of(q));
  g.tensor(kK, type, transposed(dims_of(k)), transposed(strides_of(k)));
  if (v_transposed) {
    g.tensor(kV, type, transposed(dims_of(v)), transposed(strides_of(v)));
  } else {
    g.tensor(kV, type, dims_of(v), strides_of(v));
  }
  g.tensor(kStats, CUDNN_DATA_FLOAT, row_dims(q), cudnn_graph::dense_strides(row_dims(q)));
  g.scalar(kScale);
  g.scalar(kNegInf);
}

std::optional<Plan> forward_plan(const Tensor& q, const Tensor& k, const Tensor& v, bool causal,
                                 const Tensor& out, std::string* why) {
  Graph g;
  declare_common(g, q, k, v, /*v_transposed=*/false);
  g.tensor(kOut, io_type(q), dims_of(out), strides_of(out));
  const std::vector<int64_t> sd = score_dims(q, k), rd = row_dims(q);
  const int64_t raw = g.virtual_tensor(sd), scaled = g.virtual_tensor(sd);
  g.matmul(kQ, kK, raw);
  g.pointwise({.mode = CUDNN_POINTWISE_MUL, .x = raw, .b = kScale, .y = scaled});
  const int64_t s = causal ? causal_mask(g, scaled, sd) : scaled;
  const int64_t m = g.virtual_tensor(rd), shifted = g.virtual_tensor(sd), e = g.virtual_tensor(sd);
  g.reduction(CUDNN_REDUCE_TENSOR_MAX, s, m);
  g.pointwise({.mode = CUDNN_POINTWISE_SUB, .x = s, .b = m, .y = shifted});
  g.pointwise({.mode = CUDNN_POINTWISE_EXP, .x = shifted, .y = e});
  const int64_t l = g.virtual_tensor(rd), log_l = g.virtual_tensor(rd);
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, e, l);
  g.pointwise({.mode = CUDNN_POINTWISE_LOG, .x = l, .y = log_l});
  g.pointwise({.mode = CUDNN_POINTWISE_ADD, .x = m, .b = log_l, .y = kStats});
  const int64_t p = g.virtual_tensor(sd, io_type(q));
  g.pointwise({.mode = CUDNN_POINTWISE_DIV, .x = e, .b = l, .y = p});
  g.matmul(p, kV, kOut);
  return g.plan(nabla::cuda::cudnn_handle(), why);
}

// Deterministic: dq is written by one matmul; otherwise cuDNN accumulates it in a float32 buffer
// (kDqSum, in our part of the workspace) and rounds it to dq last.
std::optional<Plan> backward_plan(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                                  const Tensor& out, bool causal, bool deterministic, const Tensor& dq,
                                  const Tensor& dk, const Tensor& dv, std::string* why) {
  Graph g;
  const cudnnDataType_t type = io_type(q);
  declare_common(g, q, k, v, /*v_transposed=*/true);
  g.tensor(kOut, type, dims_of(out), strides_of(out));
  g.tensor(kDout, type, dims_of(dout), strides_of(dout));
  g.tensor(kDq, type, dims_of(dq), strides_of(dq));
  g.tensor(kDk, type, dims_of(dk), strides_of(dk));
  g.tensor(kDv, type, dims_of(dv), strides_of(dv));
  g.scalar(kOne);
  const std::vector<int64_t> sd = score_dims(q, k), rd = row_dims(q);
  g.tensor(kDelta, CUDNN_DATA_FLOAT, rd, cudnn_graph::dense_strides(rd));
  if (!deterministic) g.tensor(kDqSum, CUDNN_DATA_FLOAT, dims_of(q), cudnn_graph::dense_strides(dims_of(q)));
  // delta = sum_d dout * out.
  const int64_t product = g.virtual_tensor(dims_of(q)), row_sum = g.virtual_tensor(rd);
  g.pointwise({.mode = CUDNN_POINTWISE_MUL, .x = kDout, .b = kOut, .y = product});
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, product, row_sum);
  g.pointwise({.mode = CUDNN_POINTWISE_MUL, .x = row_sum, .b = kOne, .y = kDelta});
  // p = exp(s * scale - lse), masked.
  const int64_t raw = g.virtual_tensor(sd), scaled = g.virtual_tensor(sd), centred = g.virtual_tensor(sd);
  g.matmul(kQ, kK, raw);
  g.pointwise({.mode = CUDNN_POINTWISE_MUL, .x = raw, .b = kScale, .y = scaled});
  g.pointwise({.mode = CUDNN_POINTWISE_SUB, .x = scaled, .b = kStats, .y = centred});
  const int64_t s = causal ? causal_mask(g, centred, sd) : centred;
  const int64_t p = g.virtual_tensor(sd);
  g.pointwise({.mode = CUDNN_POINTWISE_EXP, .x = s, .y = p});
  // dv = p^T dout.
  const std::vector<int64_t> sd_t = transposed(sd);
  const std::vector<int64_t> t_strides = {sd[1] * sd[2] * sd[3], sd[2] * sd[3], 1, sd[3]};
  const int64_t p_t = g.virtual_tensor(sd_t, type, t_strides);
  g.reshape(p, p_t);
  // With grouped heads, a product per query head reduced onto each key/value head.
  const bool grouped = k.size(1) != q.size(1);
  const auto per_query_head = [&](int64_t a, int64_t b, int64_t into, const Tensor& like) {
    if (!grouped) return g.matmul(a, b, into);
    const std::vector<int64_t> full = {q.size(0), q.size(1), like.size(2), like.size(3)};
    const int64_t product = g.virtual_tensor(full, type, cudnn_graph::dense_strides(full));
    g.matmul(a, b, product);
    g.reduction(CUDNN_REDUCE_TENSOR_ADD, product, into);
  };
  per_query_head(p_t, kDout, kDv, dv);
  // ds = p (dout v^T - delta) * scale.
  const int64_t dp = g.virtual_tensor(sd), centred_dp = g.virtual_tensor(sd), pds = g.virtual_tensor(sd);
  const int64_t ds = g.virtual_tensor(sd);
  g.matmul(kDout, kV, dp);
  g.pointwise({.mode = CUDNN_POINTWISE_SUB, .x = dp, .b = kDelta, .y = centred_dp});
  g.pointwise({.mode = CUDNN_POINTWISE_MUL, .x = centred_dp, .b = p, .y = pds});
  g.pointwise({.mode = CUDNN_POINTWISE_MUL, .x = pds, .b = kScale, .y = ds});
  // dk = ds^T q.
  const int64_t ds_t = g.virtual_tensor(sd_t, type, t_strides);
  g.reshape(ds, ds_t);
  per_query_head(ds_t, kQ, kDk, dk);
  // dq = ds k, k read untransposed through a reshape of k^T.
  const int64_t k_plain = g.virtual_tensor(dims_of(k), CUDNN_DATA_FLOAT, strides_of(k));
  g.reshape(kK, k_plain);
  if (deterministic) {
    g.matmul(ds, k_plain, kDq);
  } else {
    g.matmul(ds, k_plain, kDqSum);
    g.pointwise({.mode = CUDNN_POINTWISE_IDENTITY, .x = kDqSum, .y = kDq});
  }
  return g.plan(nabla::cuda::cudnn_handle(), why);
}

// A cache of plans (or of the reason there is none) per problem. Per thread, as PyTorch's and
// ONNX Runtime's are: cuDNN does not promise that one execution plan may run on two threads at
// once, and each thread runs with its own handle (nabla::cuda::cudnn_handle), the one its plans
// were built with. The key's first element tells the forward's entries from the backward's.
struct Entry {
  std::optional<Plan> plan;
  std::string why;
};

std::shared_ptr<const Entry> cached(std::vector<int64_t> key, const auto& build) {
  thread_local std::map<std::vector<int64_t>, std::shared_ptr<const Entry>> cache;
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  auto entry = std::make_shared<Entry>();
  try {
    entry->plan = build(&entry->why);
  } catch (const Error& e) {  // a descriptor cuDNN rejects: a refusal like any other
    entry->plan.reset();
    entry->why = e.what();
  }
  return cache.emplace(std::move(key), std::move(entry)).first->second;
}

void append(std::vector<int64_t>& key, const Tensor& t) {
  key.insert(key.end(), t.sizes().begin(), t.sizes().end());
  key.insert(key.end(), t.strides().begin(), t.strides().end());
}

bool refuse(std::string* why, std::string reason) {
  if (why) *why = std::move(reason);
  return false;
}

float negative_infinity() {
  // cudnn-frontend passes float's lowest before cuDNN 9.10, whose engines did not take -inf.
  return cudnnGetVersion() >= 91000 ? -std::numeric_limits<float>::infinity()
                                    : std::numeric_limits<float>::lowest();
}

constexpr int64_t round_up(int64_t bytes) {
  return (bytes + 255) / 256 * 256;
}

}  // namespace

bool cudnn_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, double scale,
                             const Tensor& out, const Tensor& lse, std::string* why) {
  if (std::string p = problem(q, k, v, /*backward=*/false); !p.empty()) return refuse(why, p);
  if (std::string p = layout_problem(out, "out"); !p.empty()) return refuse(why, p);
  NABLA_ASSERT(lse.is_contiguous() && lse.dtype() == kFloat32, "cudnn_attention_forward: lse layout");
  nabla::cuda::DeviceGuard device(q.device().index);
  std::vector<int64_t> key = {0, q.device().index, static_cast<int64_t>(q.dtype()), causal};
  for (const Tensor* t : {&q, &k, &v, &out}) append(key, *t);
  const auto entry =
      cached(std::move(key), [&](std::string* reason) { return forward_plan(q, k, v, causal, out, reason); });
  if (!entry->plan) return refuse(why, entry->why);
  float scale_value = static_cast<float>(scale), neg_inf = negative_infinity();
  // Only the graph's tensors: an id it does not have is an error (the -inf fill is causal's).
  std::vector<int64_t> uids = {kQ, kK, kV, kOut, kStats, kScale};
  std::vector<void*> pointers = {q.data_ptr(),   k.data_ptr(),   v.data_ptr(),
                                 out.data_ptr(), lse.data_ptr(), &scale_value};
  if (causal) {
    uids.push_back(kNegInf);
    pointers.push_back(&neg_inf);
  }
  const int64_t bytes = entry->plan->workspace_bytes();
  const Tensor workspace =
      Tensor::empty({std::max<int64_t>(bytes, 1)}, {.dtype = kUInt8, .device = q.device()});
  entry->plan->execute(nabla::cuda::cudnn_handle(), uids, pointers, workspace.data_ptr());
  return true;
}

bool cudnn_attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                              const Tensor& out, const Tensor& lse, bool causal, double scale,
                              bool deterministic, const Tensor& dq, const Tensor& dk, const Tensor& dv,
                              std::string* why) {
  if (std::string p = problem(q, k, v, /*backward=*/true); !p.empty()) return refuse(why, p);
  for (const auto& [t, name] :
       {std::pair{&dout, "the output gradient"}, {&out, "out"}, {&dq, "dq"}, {&dk, "dk"}, {&dv, "dv"}}) {
    if (std::string p = layout_problem(*t, name); !p.empty()) return refuse(why, p);
  }
  NABLA_ASSERT(lse.is_contiguous() && lse.dtype() == kFloat32, "cudnn_attention_backward: lse layout");
  nabla::cuda::DeviceGuard device(q.device().index);
  std::vector<int64_t> key = {1, q.device().index, static_cast<int64_t>(q.dtype()), causal, deterministic};
  for (const Tensor* t : {&dout, &q, &k, &v, &out, &dq, &dk, &dv}) append(key, *t);
  const auto entry = cached(std::move(key), [&](std::string* reason) {
    return backward_plan(dout, q, k, v, out, causal, deterministic, dq, dk, dv, reason);
  });
  if (!entry->plan) return refuse(why, entry->why);
  // Our part of the workspace first (delta, then the float32 dq sum), then cuDNN's.
  const int64_t delta_bytes = round_up(q.size(0) * q.size(1) * q.size(2) * 4);
  const int64_t dq_sum_bytes = deterministic ? 0 : round_up(q.numel() * 4);
  const int64_t total = delta_bytes + dq_sum_bytes + entry->plan->workspace_bytes();
  const Tensor workspace = Tensor::empty({total}, {.dtype = kUInt8, .device = q.device()});
  auto* base = static_cast<std::byte*>(workspace.data_ptr());
  float scale_value = static_cast<float>(scale), neg_inf = negative_infinity(), one = 1.0f;
  std::vector<int64_t> uids = {kQ, kK, kV, kOut, kDout, kStats, kDq, kDk, kDv, kScale, kOne, kDelta};
  std::vector<void*> pointers = {q.data_ptr(),    k.data_ptr(),   v.data_ptr(),  out.data_ptr(),
                                 dout.data_ptr(), lse.data_ptr(), dq.data_ptr(), dk.data_ptr(),
                                 dv.data_ptr(),   &scale_value,   &one,          base};
  if (causal) {
    uids.push_back(kNegInf);
    pointers.push_back(&neg_inf);
  }
  if (!deterministic) {
    uids.push_back(kDqSum);
    pointers.push_back(base + delta_bytes);
    // cudnn-frontend zeroes the dq sum itself before cuDNN 9.6; later engines do it.
    if (cudnnGetVersion() < 90600) {
      NABLA_CUDA_CHECK(
          cudaMemsetAsync(base + delta_bytes, 0, static_cast<size_t>(dq_sum_bytes),
                          static_cast<cudaStream_t>(nabla::cuda::current_stream(q.device().index).handle())));
    }
  }
  entry->plan->execute(nabla::cuda::cudnn_handle(), uids, pointers, base + delta_bytes + dq_sum_bytes);
  return true;
}

}  // namespace nabla::ops::cuda
