// Public header. Tensor: a cheap value handle to an n-dimensional strided array with autograd.
//
// Copying a Tensor copies a shared pointer; both handles name the same tensor. Views share the
// Storage and differ in sizes, strides and offset. Metadata and autograd bookkeeping are defined
// in core; the math methods (view(), sum(), to(), ...) are declared here and defined in the ops
// library, so that core builds and links without ops while users get method syntax. See
// docs/design/tensor-and-autograd.md.
#pragma once

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "nabla/core/device.h"
#include "nabla/core/dtype.h"
#include "nabla/core/error.h"
#include "nabla/core/shape.h"
#include "nabla/core/storage.h"
#include "nabla/core/tensor_options.h"

namespace nabla {

namespace autograd {
class Node;
struct AutogradMeta;
}  // namespace autograd

class Tensor;
using TensorList = std::vector<Tensor>;

// The state behind a Tensor handle: storage, geometry, dtype and autograd bookkeeping. Its
// fields are private; ops read them through Tensor, and the few places that must change a
// live tensor's geometry (DDP's flat buffers) say so through rebind().
class TensorImpl {
 public:
  TensorImpl(std::shared_ptr<Storage> storage, int64_t offset, Shape sizes, Shape strides, DType dtype);
  ~TensorImpl();

  const std::shared_ptr<Storage>& storage() const { return storage_; }
  int64_t offset() const { return offset_; }  // in elements
  const Shape& sizes() const { return sizes_; }
  const Shape& strides() const { return strides_; }  // in elements
  DType dtype() const { return dtype_; }

  autograd::AutogradMeta* autograd_if_any() const { return autograd_.get(); }  // null until needed
  autograd::AutogradMeta& autograd_meta();                                     // creates on first use

  // Points this tensor at other memory with the same sizes and dtype; every handle sees it.
  void rebind(std::shared_ptr<Storage> storage, int64_t offset, Shape strides);

 private:
  std::shared_ptr<Storage> storage_;
  int64_t offset_ = 0;
  Shape sizes_;
  Shape strides_;
  DType dtype_ = kFloat32;
  std::unique_ptr<autograd::AutogradMeta> autograd_;
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // An uninitialized tensor over fresh storage; factories build on this.
  static Tensor empty(const Shape& sizes, const TensorOptions& options = {});
  // Wraps memory the caller owns (not freed by nabla); strides default to contiguous.
  static Tensor from_blob(void* data, const Shape& sizes, const TensorOptions& options = {},
                          std::optional<Shape> strides = std::nullopt);

  bool defined() const { return impl_ != nullptr; }
  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  bool is_same(const Tensor& other) const { return impl_ == other.impl_; }

  // ---- metadata (core) ----
  const Shape& sizes() const { return checked().sizes(); }
  const Shape& shape() const { return checked().sizes(); }
  const Shape& strides() const { return checked().strides(); }
  int64_t size(int64_t dim) const;
  int64_t stride(int64_t dim) const;
  int64_t dim() const { return static_cast<int64_t>(checked().sizes().size()); }
  int64_t numel() const { return numel_of(checked().sizes()); }
  DType dtype() const { return checked().dtype(); }
  Device device() const { return checked().storage()->device(); }
  TensorOptions options() const { return {.dtype = dtype(), .device = device()}; }
  int64_t storage_offset() const { return checked().offset(); }
  const std::shared_ptr<Storage>& storage() const { return checked().storage(); }
  size_t itemsize() const { return nabla::itemsize(dtype()); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * itemsize(); }
  bool is_cuda() const { return device().is_cuda(); }
  bool is_cpu() const { return device().is_cpu(); }
  bool is_floating_point() const { return is_floating(dtype()); }
  // True for CPU tensors in page-locked memory (see TensorOptions::pinned_memory).
  bool is_pinned() const;
  bool is_contiguous(MemoryFormat format = MemoryFormat::Contiguous) const;
  // channels_last when the strides say so (and not also plain contiguous), else contiguous.
  MemoryFormat suggest_memory_format() const;

  void* data_ptr() const;
  template <typename T>
  T* data_ptr() const {
    NABLA_CHECK(dtype() == dtype_v<T>, "data_ptr<{}>() called on a {} tensor", dtype_name(dtype_v<T>),
                dtype_name(dtype()));
    return static_cast<T*>(data_ptr());
  }

  // ---- autograd (core) ----
  bool requires_grad() const;
  Tensor& requires_grad_(bool requires_grad = true);
  const Tensor& grad() const;  // undefined until a backward pass reaches this leaf
  Tensor& mutable_grad();
  void set_grad(Tensor grad) const;
  bool is_leaf() const;
  const std::shared_ptr<autograd::Node>& grad_fn() const;
  uint32_t output_nr() const;
  uint32_t version() const { return storage()->version(); }
  void bump_version() const { storage()->bump_version(); }
  // Shares storage, no history, requires_grad false.
  Tensor detach() const;
  // Hook on the gradient flowing into this tensor; the return value (if defined) replaces it.
  void register_hook(std::function<Tensor(const Tensor&)> hook) const;
  // Leaf only: runs after .grad holds this backward pass's gradient (DDP starts buckets here).
  void register_post_accumulate_grad_hook(std::function<void(const Tensor&)> hook) const;
  // Non-leaf: keep .grad after backward.
  void retain_grad() const;

  // ---- defined in ops (link nabla::ops) ----
  void backward(const Tensor& gradient = {}, bool retain_graph = false, bool create_graph = false) const;

  Tensor view(const Shape& sizes) const;
  Tensor reshape(const Shape& sizes) const;
  Tensor permute(const Shape& dims) const;
  Tensor transpose(int64_t dim0, int64_t dim1) const;
  Tensor t() const;  // 2-d transpose
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1) const;
  Tensor select(int64_t dim, int64_t index) const;
  Tensor expand(const Shape& sizes) const;
  Tensor expand_as(const Tensor& other) const { return expand(other.sizes()); }
  Tensor squeeze() const;
  Tensor squeeze(int64_t dim) const;
  Tensor unsqueeze(int64_t dim) const;
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;
  Tensor contiguous(MemoryFormat format = MemoryFormat::Contiguous) const;
  Tensor as_strided(const Shape& sizes, const Shape& strides,
                    std::optional<int64_t> offset = std::nullopt) const;

  Tensor to(Device device) const;
  Tensor to(DType dtype) const;
  Tensor to(Device device, DType dtype) const;
  Tensor to(MemoryFormat format) const { return contiguous(format); }
  Tensor cpu() const { return to(Device::cpu()); }
  // A copy in pinned host memory (the tensor itself if it already is pinned).
  Tensor pin_memory() const;
  Tensor clone(MemoryFormat format = MemoryFormat::Preserve) const;
  Tensor& copy_(const Tensor& src);
  Tensor& fill_(double value);
  Tensor& zero_();

  template <typename T = double>
  T item() const;
  template <typename T>
  std::vector<T> to_vector() const;  // contiguous copy of all elements, in row-major order
  std::string to_string() const;

  Tensor sum() const;
  Tensor sum(const Shape& dims, bool keepdim = false) const;
  Tensor mean() const;
  Tensor mean(const Shape& dims, bool keepdim = false) const;
  Tensor abs() const;
  Tensor exp() const;
  Tensor log() const;
  Tensor sqrt() const;
  Tensor pow(double exponent) const;
  Tensor relu() const;
  Tensor sigmoid() const;
  Tensor tanh() const;
  Tensor matmul(const Tensor& other) const;

  Tensor& add_(const Tensor& other, double alpha = 1.0);
  Tensor& sub_(const Tensor& other, double alpha = 1.0);
  Tensor& mul_(const Tensor& other);
  Tensor& div_(const Tensor& other);
  Tensor& add_(double value);
  Tensor& mul_(double value);
  Tensor& relu_();
  Tensor& clamp_(std::optional<double> min, std::optional<double> max);

 private:
  const TensorImpl& checked() const {
    NABLA_CHECK(impl_ != nullptr, "use of an undefined tensor (default-constructed, or a missing gradient)");
    return *impl_;
  }
  std::shared_ptr<TensorImpl> impl_;
};

std::ostream& operator<<(std::ostream& os, const Tensor& t);  // defined in ops

// "float32[2, 3] on cpu" for error messages.
std::string describe(const Tensor& t);

}  // namespace nabla
