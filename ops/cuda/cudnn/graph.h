// Internal (ops/cuda only). A thin builder over cuDNN's backend graph API (cudnn/graph.h), the
// part of cudnn-frontend that nabla needs (cudnn-frontend is not packaged for Debian).
//
// A Graph holds tensor descriptors, each named by a unique id (uid), and operations between them
// (matmul, pointwise, reduction, convolutions, batch-norm statistics). plan() turns it into an
// operation graph, asks cuDNN's heuristics for engine configurations and keeps the first one that
// finalizes into an execution plan; plans() keeps the first few, for callers that time them. A Plan runs with
// one device pointer per non-virtual uid (or a host pointer for a by-value scalar) and a workspace of
// workspace_bytes(). Building a plan costs host time (and sometimes a runtime compilation), so callers cache
// plans by problem; running one launches kernels on the handle's stream and never synchronizes.
//
//   Graph g;
//   g.tensor(kQ, CUDNN_DATA_BFLOAT16, dims, strides);
//   const int64_t s = g.virtual_tensor(score_dims);
//   g.matmul(kQ, kKt, s);
//   std::string why;
//   std::optional<Plan> plan = g.plan(handle, &why);  // g is spent
#pragma once

#include <cudnn.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "nabla/core/tensor.h"

namespace nabla::ops::cuda::cudnn_graph {

// Owns one backend descriptor.
class Descriptor {
 public:
  explicit Descriptor(cudnnBackendDescriptorType_t type);
  ~Descriptor();
  Descriptor(Descriptor&& other) noexcept;
  Descriptor& operator=(Descriptor&& other) noexcept;
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;

  cudnnBackendDescriptor_t get() const { return desc_; }

  // Attribute setters; a failure throws naming the attribute.
  Descriptor& set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t count,
                  const void* values);
  Descriptor& set_int64(cudnnBackendAttributeName_t name, std::span<const int64_t> values);
  Descriptor& set_int64(cudnnBackendAttributeName_t name, int64_t value);
  Descriptor& set_desc(cudnnBackendAttributeName_t name, const Descriptor& value);
  Descriptor& set_data_type(cudnnBackendAttributeName_t name, cudnnDataType_t value);
  Descriptor& set_bool(cudnnBackendAttributeName_t name, bool value);
  Descriptor& finalize();
  // Finalize without throwing: configurations that do not apply fail here.
  cudnnStatus_t try_finalize();

 private:
  cudnnBackendDescriptor_t desc_ = nullptr;
};

// A finalized execution plan.
class Plan {
 public:
  Plan(Descriptor plan, std::shared_ptr<const std::vector<Descriptor>> keep, int64_t workspace_bytes,
       std::string engine)
      : plan_(std::move(plan)),
        keep_(std::move(keep)),
        workspace_bytes_(workspace_bytes),
        engine_(std::move(engine)) {}
  int64_t workspace_bytes() const { return workspace_bytes_; }
  const std::string& engine() const { return engine_; }  // for messages and the profiler
  // pointers[i] is the data of uids[i]: device memory, or a host scalar for a by-value tensor.
  void execute(cudnnHandle_t handle, std::span<const int64_t> uids, std::span<void* const> pointers,
               void* workspace) const;

 private:
  Descriptor plan_;
  // The engine configurations, operation graph, operations and tensors the plan was made from,
  // kept alive beside it as cudnn-frontend keeps them (shared by the plans of one graph).
  std::shared_ptr<const std::vector<Descriptor>> keep_;
  int64_t workspace_bytes_;
  std::string engine_;
};

struct TensorFlags {
  bool is_virtual = false;
  bool by_value = false;  // a host scalar passed in the variant pack
};

class Graph {
 public:
  // Declares the tensor `uid` (uids chosen by the caller are below kFirstVirtualUid).
  void tensor(int64_t uid, cudnnDataType_t dtype, std::vector<int64_t> dims, std::vector<int64_t> strides,
              TensorFlags flags = {});
  // A virtual intermediate (float32 unless told), dense in the given dims' order unless strides
  // are given; returns its uid.
  int64_t virtual_tensor(std::vector<int64_t> dims, cudnnDataType_t dtype = CUDNN_DATA_FLOAT,
                         std::vector<int64_t> strides = {});
  // A by-value float32 scalar of dims (1, 1, 1, 1).
  void scalar(int64_t uid);

  void matmul(int64_t a, int64_t b, int64_t c);  // c = a b over the last two dims, float32 compute
  // y = mode(x[, b][, t]). BINARY_SELECT: y = t ? x : b. GEN_INDEX: y = the index along `axis`.
  struct Pointwise {
    cudnnPointwiseMode_t mode;
    int64_t x;
    std::optional<int64_t> b = {};
    std::optional<int64_t> t = {};
    int64_t y;
    std::optional<int64_t> axis = {};
    cudnnDataType_t math = CUDNN_DATA_FLOAT;
  };
  void pointwise(const Pointwise& p);
  // dx = dy where x > 0, else 0 (ReLU's gradient, from the ReLU's input x).
  void relu_backward(int64_t x, int64_t dy, int64_t dx);
  void reduction(cudnnReduceTensorOp_t op, int64_t x, int64_t y);  // over the dims where y has size 1
  void reshape(int64_t x, int64_t y);  // y views x's elements with its own dims and strides

  // 2-d cross-correlation (what deep learning calls convolution), float32 accumulation. Tensors
  // are declared with NCHW dims (filters KCRS) and their real strides.
  struct Conv {
    std::vector<int64_t> stride, padding, dilation;
  };
  void conv_forward(const Conv& c, int64_t x, int64_t w, int64_t y);            // y = conv(x, w)
  void conv_backward_data(const Conv& c, int64_t dy, int64_t w, int64_t dx);    // dx = dgrad(dy, w)
  void conv_backward_filter(const Conv& c, int64_t x, int64_t dy, int64_t dw);  // dw = wgrad(x, dy)
  // sum and sqsum (1, C, 1, 1): the per-channel sums of x and of its squares (float32).
  void gen_stats(int64_t x, int64_t sum, int64_t sqsum);
  // A training batch norm's backward reductions, for x with saved mean and invstd, weight
  // (gamma) and the gradient dy of its output: dweight, dbias, and the per-channel coefficients
  // of dx = eq_dy * dy + eq_x * x + eq_bias. Every tensor but x and dy is (1, C, 1, 1) float32.
  struct BatchNormBackwardWeights {
    int64_t x, dy, mean, invstd, weight, dweight, dbias, eq_dy, eq_x, eq_bias;
  };
  void batch_norm_backward_weights(const BatchNormBackwardWeights& b);

  // The first engine configuration (heuristics mode A, then the fallback list) that finalizes.
  // Returns nullopt and says why in `why` when none does. The graph is spent (plans() for more).
  std::optional<Plan> plan(cudnnHandle_t handle, std::string* why);
  // Up to `limit` plans in the heuristics' order (empty, with `why`, when none finalizes), only
  // engines without cuDNN's NONDETERMINISTIC note when `deterministic`. They share the graph's
  // descriptors; the graph is spent.
  std::vector<Plan> plans(cudnnHandle_t handle, int limit, std::string* why, bool deterministic = false);

  static constexpr int64_t kFirstVirtualUid = 1000;

 private:
  const Descriptor& find(int64_t uid) const;

  struct Entry {
    int64_t uid;
    Descriptor desc;
  };
  std::vector<Entry> tensors_;
  std::vector<Descriptor> settings_;    // matmul/pointwise/reduction descriptors the ops point at
  std::vector<Descriptor> operations_;  // in the order added
  int64_t next_virtual_ = kFirstVirtualUid;
};

// Dense strides for dims in the given order (the last dim has stride 1).
std::vector<int64_t> dense_strides(const std::vector<int64_t>& dims);

// A tensor's dims and strides as Graph::tensor takes them, and the cuDNN type of its 16-bit data
// (bfloat16, else float16).
std::vector<int64_t> dims_of(const Tensor& t);
std::vector<int64_t> strides_of(const Tensor& t);
cudnnDataType_t io_type(const Tensor& t);

}  // namespace nabla::ops::cuda::cudnn_graph
