// The backend graph builder of cudnn/graph.h: descriptors, the operation graph, heuristics and
// execution. Every call goes through cuDNN's C backend API; nothing here touches the device
// except Plan::execute.
#include "nabla/ops/cuda/cudnn/graph.h"

#include <algorithm>
#include <array>
#include <utility>

#include "nabla/core/cuda/check.h"
#include "nabla/core/error.h"

namespace nabla::ops::cuda::cudnn_graph {

namespace {

std::string last_error(cudnnStatus_t status) {
  std::array<char, 512> text{};
  cudnnGetLastErrorString(text.data(), text.size());
  std::string out = cudnnGetErrorString(status);
  if (text[0] != '\0') out += std::string(": ") + text.data();
  return out;
}

}  // namespace

Descriptor::Descriptor(cudnnBackendDescriptorType_t type) {
  NABLA_CUDNN_CHECK(cudnnBackendCreateDescriptor(type, &desc_));
}

Descriptor::~Descriptor() {
  if (desc_) cudnnBackendDestroyDescriptor(desc_);
}

Descriptor::Descriptor(Descriptor&& other) noexcept : desc_(std::exchange(other.desc_, nullptr)) {}

Descriptor& Descriptor::operator=(Descriptor&& other) noexcept {
  if (this != &other) {
    if (desc_) cudnnBackendDestroyDescriptor(desc_);
    desc_ = std::exchange(other.desc_, nullptr);
  }
  return *this;
}

Descriptor& Descriptor::set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t count,
                            const void* values) {
  const cudnnStatus_t status = cudnnBackendSetAttribute(desc_, name, type, count, values);
  NABLA_CHECK(status == CUDNN_STATUS_SUCCESS, "cuDNN graph: setting attribute {} failed: {}",
              static_cast<int>(name), last_error(status));
  return *this;
}

Descriptor& Descriptor::set_int64(cudnnBackendAttributeName_t name, std::span<const int64_t> values) {
  return set(name, CUDNN_TYPE_INT64, static_cast<int64_t>(values.size()), values.data());
}

Descriptor& Descriptor::set_int64(cudnnBackendAttributeName_t name, int64_t value) {
  return set(name, CUDNN_TYPE_INT64, 1, &value);
}

Descriptor& Descriptor::set_desc(cudnnBackendAttributeName_t name, const Descriptor& value) {
  cudnnBackendDescriptor_t d = value.get();
  return set(name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &d);
}

Descriptor& Descriptor::set_data_type(cudnnBackendAttributeName_t name, cudnnDataType_t value) {
  return set(name, CUDNN_TYPE_DATA_TYPE, 1, &value);
}

Descriptor& Descriptor::set_bool(cudnnBackendAttributeName_t name, bool value) {
  return set(name, CUDNN_TYPE_BOOLEAN, 1, &value);
}

Descriptor& Descriptor::finalize() {
  const cudnnStatus_t status = try_finalize();
  NABLA_CHECK(status == CUDNN_STATUS_SUCCESS, "cuDNN graph: finalizing a descriptor failed: {}",
              last_error(status));
  return *this;
}

cudnnStatus_t Descriptor::try_finalize() {
  return cudnnBackendFinalize(desc_);
}

void Plan::execute(cudnnHandle_t handle, std::span<const int64_t> uids, std::span<void* const> pointers,
                   void* workspace) const {
  NABLA_ASSERT(uids.size() == pointers.size(), "cuDNN graph: {} uids but {} pointers", uids.size(),
               pointers.size());
  Descriptor pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  pack.set_int64(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, uids);
  pack.set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, static_cast<int64_t>(pointers.size()),
           pointers.data());
  pack.set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace);
  pack.finalize();
  NABLA_CUDNN_CHECK(cudnnBackendExecute(handle, plan_.get(), pack.get()));
}

void Graph::tensor(int64_t uid, cudnnDataType_t dtype, std::vector<int64_t> dims,
                   std::vector<int64_t> strides, TensorFlags flags) {
  NABLA_ASSERT(dims.size() == strides.size(), "cuDNN graph: tensor {} has {} dims but {} strides", uid,
               dims.size(), strides.size());
  Descriptor d(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  d.set_int64(CUDNN_ATTR_TENSOR_UNIQUE_ID, uid)
      .set_data_type(CUDNN_ATTR_TENSOR_DATA_TYPE, dtype)
      .set_int64(CUDNN_ATTR_TENSOR_DIMENSIONS, dims)
      .set_int64(CUDNN_ATTR_TENSOR_STRIDES, strides)
      .set_int64(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, 16)
      .set_bool(CUDNN_ATTR_TENSOR_IS_VIRTUAL, flags.is_virtual);
  if (flags.by_value) d.set_bool(CUDNN_ATTR_TENSOR_IS_BY_VALUE, true);
  d.finalize();
  tensors_.push_back({uid, std::move(d)});
}

int64_t Graph::virtual_tensor(std::vector<int64_t> dims, cudnnDataType_t dtype,
                              std::vector<int64_t> strides) {
  const int64_t uid = next_virtual_++;
  if (strides.empty()) strides = dense_strides(dims);
  tensor(uid, dtype, std::move(dims), std::move(strides), {.is_virtual = true});
  return uid;
}

void Graph::scalar(int64_t uid) {
  tensor(uid, CUDNN_DATA_FLOAT, {1, 1, 1, 1}, {1, 1, 1, 1}, {.by_value = true});
}

const Descriptor& Graph::find(int64_t uid) const {
  for (const Entry& e : tensors_)
    if (e.uid == uid) return e.desc;
  NABLA_ASSERT(false, "cuDNN graph: no tensor with uid {}", uid);
  __builtin_unreachable();
}

void Graph::matmul(int64_t a, int64_t b, int64_t c) {
  Descriptor& m = settings_.emplace_back(CUDNN_BACKEND_MATMUL_DESCRIPTOR);
  m.set_data_type(CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_DATA_FLOAT).finalize();
  Descriptor op(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
  op.set_desc(CUDNN_ATTR_OPERATION_MATMUL_ADESC, find(a))
      .set_desc(CUDNN_ATTR_OPERATION_MATMUL_BDESC, find(b))
      .set_desc(CUDNN_ATTR_OPERATION_MATMUL_CDESC, find(c))
      .set_desc(CUDNN_ATTR_OPERATION_MATMUL_DESC, m)
      .finalize();
  operations_.push_back(std::move(op));
}

void Graph::pointwise(const Pointwise& pw) {
  Descriptor& p = settings_.emplace_back(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
  p.set(CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &pw.mode)
      .set_data_type(CUDNN_ATTR_POINTWISE_MATH_PREC, pw.math);
  if (pw.axis) p.set_int64(CUDNN_ATTR_POINTWISE_AXIS, *pw.axis);
  p.finalize();
  const float one = 1.0f;
  Descriptor op(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
  op.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, p)
      .set_desc(CUDNN_ATTR_OPERATION_POINTWISE_XDESC, find(pw.x))
      .set_desc(CUDNN_ATTR_OPERATION_POINTWISE_YDESC, find(pw.y))
      .set(CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1, CUDNN_TYPE_FLOAT, 1, &one);
  if (pw.b) {
    op.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_BDESC, find(*pw.b))
        .set(CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2, CUDNN_TYPE_FLOAT, 1, &one);
  }
  if (pw.t) op.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_TDESC, find(*pw.t));
  op.finalize();
  operations_.push_back(std::move(op));
}

void Graph::relu_backward(int64_t x, int64_t dy, int64_t dx) {
  const cudnnPointwiseMode_t mode = CUDNN_POINTWISE_RELU_BWD;
  Descriptor& p = settings_.emplace_back(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
  p.set(CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode)
      .set_data_type(CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_DATA_FLOAT)
      .finalize();
  Descriptor op(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
  op.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, p)
      .set_desc(CUDNN_ATTR_OPERATION_POINTWISE_XDESC, find(x))
      .set_desc(CUDNN_ATTR_OPERATION_POINTWISE_DYDESC, find(dy))
      .set_desc(CUDNN_ATTR_OPERATION_POINTWISE_DXDESC, find(dx))
      .finalize();
  operations_.push_back(std::move(op));
}

void Graph::reshape(int64_t x, int64_t y) {
  Descriptor op(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
  op.set_desc(CUDNN_ATTR_OPERATION_RESHAPE_XDESC, find(x))
      .set_desc(CUDNN_ATTR_OPERATION_RESHAPE_YDESC, find(y))
      .finalize();
  operations_.push_back(std::move(op));
}

void Graph::reduction(cudnnReduceTensorOp_t op_kind, int64_t x, int64_t y) {
  Descriptor& r = settings_.emplace_back(CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
  r.set(CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &op_kind)
      .set_data_type(CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_DATA_FLOAT)
      .finalize();
  Descriptor op(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
  op.set_desc(CUDNN_ATTR_OPERATION_REDUCTION_XDESC, find(x))
      .set_desc(CUDNN_ATTR_OPERATION_REDUCTION_YDESC, find(y))
      .set_desc(CUDNN_ATTR_OPERATION_REDUCTION_DESC, r)
      .finalize();
  operations_.push_back(std::move(op));
}

namespace {

Descriptor convolution(const Graph::Conv& c) {
  const int64_t dims = static_cast<int64_t>(c.stride.size());
  const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  Descriptor d(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
  d.set_data_type(CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_DATA_FLOAT)
      .set(CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode)
      .set_int64(CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, dims)
      .set_int64(CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, c.stride)
      .set_int64(CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, c.padding)
      .set_int64(CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, c.padding)
      .set_int64(CUDNN_ATTR_CONVOLUTION_DILATIONS, c.dilation)
      .finalize();
  return d;
}

}  // namespace

void Graph::conv_forward(const Conv& c, int64_t x, int64_t w, int64_t y) {
  const Descriptor& conv = settings_.emplace_back(convolution(c));
  const float one = 1.0f, zero = 0.0f;
  Descriptor op(CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR);
  op.set_desc(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, conv)
      .set_desc(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, find(x))
      .set_desc(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, find(w))
      .set_desc(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, find(y))
      .set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_TYPE_FLOAT, 1, &one)
      .set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, CUDNN_TYPE_FLOAT, 1, &zero)
      .finalize();
  operations_.push_back(std::move(op));
}

void Graph::conv_backward_data(const Conv& c, int64_t dy, int64_t w, int64_t dx) {
  const Descriptor& conv = settings_.emplace_back(convolution(c));
  const float one = 1.0f, zero = 0.0f;
  Descriptor op(CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR);
  op.set_desc(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC, conv)
      .set_desc(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY, find(dy))
      .set_desc(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W, find(w))
      .set_desc(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX, find(dx))
      .set(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA, CUDNN_TYPE_FLOAT, 1, &one)
      .set(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA, CUDNN_TYPE_FLOAT, 1, &zero)
      .finalize();
  operations_.push_back(std::move(op));
}

void Graph::conv_backward_filter(const Conv& c, int64_t x, int64_t dy, int64_t dw) {
  const Descriptor& conv = settings_.emplace_back(convolution(c));
  const float one = 1.0f, zero = 0.0f;
  Descriptor op(CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR);
  op.set_desc(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC, conv)
      .set_desc(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X, find(x))
      .set_desc(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY, find(dy))
      .set_desc(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW, find(dw))
      .set(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA, CUDNN_TYPE_FLOAT, 1, &one)
      .set(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA, CUDNN_TYPE_FLOAT, 1, &zero)
      .finalize();
  operations_.push_back(std::move(op));
}

void Graph::gen_stats(int64_t x, int64_t sum, int64_t sqsum) {
  const cudnnGenStatsMode_t mode = CUDNN_GENSTATS_SUM_SQSUM;
  Descriptor op(CUDNN_BACKEND_OPERATION_GEN_STATS_DESCRIPTOR);
  op.set(CUDNN_ATTR_OPERATION_GENSTATS_MODE, CUDNN_TYPE_GENSTATS_MODE, 1, &mode)
      .set_data_type(CUDNN_ATTR_OPERATION_GENSTATS_MATH_PREC, CUDNN_DATA_FLOAT)
      .set_desc(CUDNN_ATTR_OPERATION_GENSTATS_XDESC, find(x))
      .set_desc(CUDNN_ATTR_OPERATION_GENSTATS_SUMDESC, find(sum))
      .set_desc(CUDNN_ATTR_OPERATION_GENSTATS_SQSUMDESC, find(sqsum))
      .finalize();
  operations_.push_back(std::move(op));
}

void Graph::batch_norm_backward_weights(const BatchNormBackwardWeights& b) {
  Descriptor op(CUDNN_BACKEND_OPERATION_BN_BWD_WEIGHTS_DESCRIPTOR);
  op.set_data_type(CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_MATH_PREC, CUDNN_DATA_FLOAT)
      .set_desc(CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_MEAN_DESC, find(b.mean))
      .set_desc(CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_INVSTD_DESC, find(b.invstd))
      .set_desc(CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_BN_SCALE_DESC, find(b.weight))
      .set_desc(CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_X_DESC, find(b.x))
      .set_desc(CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_DY_DESC, find(b.dy))
      .set_desc(CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_DBN_SCALE_DESC, find(b.dweight))
      .set_desc(CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_DBN_BIAS_DESC, find(b.dbias))
      .set_desc(CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_EQ_DY_SCALE_DESC, find(b.eq_dy))
      .set_desc(CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_EQ_X_SCALE_DESC, find(b.eq_x))
      .set_desc(CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_EQ_BIAS, find(b.eq_bias))
      .finalize();
  operations_.push_back(std::move(op));
}

std::optional<Plan> Graph::plan(cudnnHandle_t handle, std::string* why) {
  std::vector<Plan> found = plans(handle, 1, why);
  if (found.empty()) return std::nullopt;
  return std::move(found.front());
}

namespace {

bool is_nondeterministic(cudnnBackendDescriptor_t engine) {
  std::array<cudnnBackendNumericalNote_t, 16> notes{};
  int64_t n = 0;
  if (cudnnBackendGetAttribute(engine, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                               static_cast<int64_t>(notes.size()), &n, notes.data()) != CUDNN_STATUS_SUCCESS)
    return true;  // unknown: not taken where determinism was asked for
  for (int64_t i = 0; i < n; ++i)
    if (notes[static_cast<size_t>(i)] == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC) return true;
  return false;
}

}  // namespace

std::vector<Plan> Graph::plans(cudnnHandle_t handle, int limit, std::string* why, bool deterministic) {
  std::vector<Plan> found;
  Descriptor graph(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  std::vector<cudnnBackendDescriptor_t> ops;
  for (const Descriptor& op : operations_) ops.push_back(op.get());
  graph.set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, static_cast<int64_t>(ops.size()),
            ops.data());
  graph.set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
  if (const cudnnStatus_t s = graph.try_finalize(); s != CUDNN_STATUS_SUCCESS) {
    *why = "the operation graph was rejected: " + last_error(s);
    return found;
  }
  // Everything the plans were made from, kept alive beside them.
  auto keep = std::make_shared<std::vector<Descriptor>>();
  std::string reasons;
  std::vector<int64_t> engines_seen;
  for (cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
    if (static_cast<int>(found.size()) >= limit) break;
    Descriptor heuristics(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
    heuristics.set_desc(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph)
        .set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
    if (const cudnnStatus_t s = heuristics.try_finalize(); s != CUDNN_STATUS_SUCCESS) {
      reasons += " heuristics: " + last_error(s) + ";";
      continue;
    }
    int64_t count = 0;
    cudnnBackendGetAttribute(heuristics.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                             0, &count, nullptr);
    std::vector<Descriptor> configs;
    std::vector<cudnnBackendDescriptor_t> raw;
    for (int64_t i = 0; i < count; ++i) {
      raw.push_back(configs.emplace_back(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR).get());
    }
    int64_t got = 0;
    if (count > 0 && cudnnBackendGetAttribute(heuristics.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                              CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got,
                                              raw.data()) != CUDNN_STATUS_SUCCESS) {
      got = 0;
    }
    for (int64_t i = 0; i < got && static_cast<int>(found.size()) < limit; ++i) {
      Descriptor& config = configs[static_cast<size_t>(i)];
      int64_t n = 0, index = -1;
      Descriptor engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
      cudnnBackendDescriptor_t engine_raw = engine.get();
      if (cudnnBackendGetAttribute(config.get(), CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                   1, &n, &engine_raw) == CUDNN_STATUS_SUCCESS) {
        cudnnBackendGetAttribute(engine_raw, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n, &index);
      }
      if (deterministic && is_nondeterministic(engine_raw)) {
        reasons += " engine " + std::to_string(index) + ": nondeterministic;";
        continue;
      }
      // One plan per engine: the fallback list repeats engines mode A offered, and a second
      // configuration of an engine is rarely the faster one.
      if (index >= 0 && std::find(engines_seen.begin(), engines_seen.end(), index) != engines_seen.end())
        continue;
      Descriptor plan(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
      plan.set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle)
          .set_desc(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, config);
      if (const cudnnStatus_t s = plan.try_finalize(); s != CUDNN_STATUS_SUCCESS) {
        reasons += " config " + std::to_string(i) + ": " + last_error(s) + ";";
        continue;
      }
      engines_seen.push_back(index);
      int64_t workspace = 0;
      NABLA_CUDNN_CHECK(cudnnBackendGetAttribute(plan.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                                 CUDNN_TYPE_INT64, 1, &n, &workspace));
      keep->push_back(std::move(config));
      found.emplace_back(std::move(plan), keep, workspace, "cuDNN engine " + std::to_string(index));
    }
    if (got == 0)
      reasons += std::string(" heuristics mode ") + (mode == CUDNN_HEUR_MODE_A ? "A" : "fallback") +
                 " offered no engine;";
  }
  if (found.empty()) {
    *why = "no engine configuration finalized:" + reasons;
    return found;
  }
  keep->push_back(std::move(graph));
  for (Descriptor& d : operations_) keep->push_back(std::move(d));
  for (Descriptor& d : settings_) keep->push_back(std::move(d));
  for (Entry& e : tensors_) keep->push_back(std::move(e.desc));
  operations_.clear(), settings_.clear(), tensors_.clear();
  return found;
}

std::vector<int64_t> dense_strides(const std::vector<int64_t>& dims) {
  std::vector<int64_t> strides(dims.size(), 1);
  for (size_t i = dims.size(); i-- > 1;) strides[i - 1] = strides[i] * dims[i];
  return strides;
}

std::vector<int64_t> dims_of(const Tensor& t) {
  return {t.sizes().begin(), t.sizes().end()};
}

std::vector<int64_t> strides_of(const Tensor& t) {
  return {t.strides().begin(), t.strides().end()};
}

cudnnDataType_t io_type(const Tensor& t) {
  return t.dtype() == kBFloat16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_HALF;
}

}  // namespace nabla::ops::cuda::cudnn_graph
