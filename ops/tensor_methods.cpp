// Definitions of the Tensor methods declared in core/tensor.h that need ops. Each forwards to
// the free function of the same name.
#include "nabla/core/tensor.h"

#include "nabla/ops/ops.h"

namespace nabla {

void Tensor::backward(const Tensor& gradient, bool retain_graph, bool create_graph) const {
  autograd::backward({*this}, {gradient}, {.retain_graph = retain_graph, .create_graph = create_graph});
}

Tensor Tensor::view(const Shape& sizes) const {
  return nabla::view(*this, sizes);
}
Tensor Tensor::reshape(const Shape& sizes) const {
  return nabla::reshape(*this, sizes);
}
Tensor Tensor::permute(const Shape& dims) const {
  return nabla::permute(*this, dims);
}
Tensor Tensor::transpose(int64_t dim0, int64_t dim1) const {
  return nabla::transpose(*this, dim0, dim1);
}
Tensor Tensor::t() const {
  NABLA_CHECK(dim() <= 2, "t: expects a tensor of at most 2 dims, got {}; use transpose(dim0, dim1)",
              describe(*this));
  return dim() < 2 ? *this : nabla::transpose(*this, 0, 1);
}
Tensor Tensor::narrow(int64_t dim, int64_t start, int64_t length) const {
  return nabla::narrow(*this, dim, start, length);
}
Tensor Tensor::slice(int64_t dim, int64_t start, int64_t end, int64_t step) const {
  return nabla::slice(*this, dim, start, end, step);
}
Tensor Tensor::select(int64_t dim, int64_t index) const {
  return nabla::select(*this, dim, index);
}
Tensor Tensor::expand(const Shape& sizes) const {
  return nabla::expand(*this, sizes);
}
Tensor Tensor::squeeze() const {
  return nabla::squeeze(*this);
}
Tensor Tensor::squeeze(int64_t dim) const {
  return nabla::squeeze(*this, dim);
}
Tensor Tensor::unsqueeze(int64_t dim) const {
  return nabla::unsqueeze(*this, dim);
}
Tensor Tensor::flatten(int64_t start_dim, int64_t end_dim) const {
  return nabla::flatten(*this, start_dim, end_dim);
}
Tensor Tensor::contiguous(MemoryFormat format) const {
  return nabla::contiguous(*this, format);
}
Tensor Tensor::as_strided(const Shape& sizes, const Shape& strides, std::optional<int64_t> offset) const {
  return nabla::as_strided(*this, sizes, strides, offset);
}

Tensor Tensor::to(Device device) const {
  return nabla::to(*this, device, dtype());
}
Tensor Tensor::to(DType dtype) const {
  return nabla::to(*this, device(), dtype);
}
Tensor Tensor::to(Device device, DType dtype) const {
  return nabla::to(*this, device, dtype);
}
Tensor Tensor::pin_memory() const {
  NABLA_CHECK(is_cpu(), "pin_memory: only CPU tensors can be pinned, got {}", describe(*this));
  if (is_pinned()) return *this;
  Tensor out = Tensor::empty(
      sizes(), {.dtype = dtype(), .memory_format = suggest_memory_format(), .pinned_memory = true});
  NoGradGuard no_grad;
  out.copy_(*this);
  return out;
}

Tensor Tensor::clone(MemoryFormat format) const {
  return nabla::clone(*this, format);
}
Tensor& Tensor::copy_(const Tensor& src) {
  return nabla::copy_(*this, src);
}

Tensor& Tensor::fill_(double value) {
  autograd::check_inplace(*this, "fill_");
  {
    NoGradGuard no_grad;
    Tensor filled = full({}, value, {.dtype = dtype(), .device = device()});
    nabla::copy_(*this, filled);
  }
  if (requires_grad() && GradMode::is_enabled()) {
    // The old values no longer matter: cut the history (a constant has zero gradient).
    autograd::record("FillBackward", {}, {*this}, {},
                     [](autograd::BackwardContext&) { return TensorList{}; });
  }
  return *this;
}

Tensor& Tensor::zero_() {
  return fill_(0.0);
}

template <typename T>
T Tensor::item() const {
  NABLA_CHECK(defined() && numel() == 1, "item: expected a tensor with one element, got {}", describe(*this));
  Tensor host = to(Device::cpu());
  return dispatch(host.dtype(), "item", [&]<typename S>() {
    S value = *static_cast<const S*>(host.data_ptr());
    if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
      return T(static_cast<float>(static_cast<compute_t<S>>(value)));
    } else {
      return static_cast<T>(static_cast<compute_t<S>>(value));
    }
  });
}

template <typename T>
std::vector<T> Tensor::to_vector() const {
  NABLA_CHECK(defined() && dtype() == dtype_v<T>,
              "to_vector<{}>: the tensor is {}; convert it with .to(dtype) first", dtype_name(dtype_v<T>),
              describe(*this));
  Tensor host = to(Device::cpu()).contiguous();
  const T* p = static_cast<const T*>(host.data_ptr());
  return std::vector<T>(p, p + host.numel());
}

#define NABLA_INSTANTIATE(T)          \
  template T Tensor::item<T>() const; \
  template std::vector<T> Tensor::to_vector<T>() const;
NABLA_INSTANTIATE(float)
NABLA_INSTANTIATE(double)
NABLA_INSTANTIATE(Half)
NABLA_INSTANTIATE(BFloat16)
NABLA_INSTANTIATE(int64_t)
NABLA_INSTANTIATE(int32_t)
NABLA_INSTANTIATE(uint8_t)
NABLA_INSTANTIATE(bool)
#undef NABLA_INSTANTIATE

Tensor Tensor::sum() const {
  return nabla::sum(*this);
}
Tensor Tensor::sum(const Shape& dims, bool keepdim) const {
  return nabla::sum(*this, dims, keepdim);
}
Tensor Tensor::mean() const {
  return nabla::mean(*this);
}
Tensor Tensor::mean(const Shape& dims, bool keepdim) const {
  return nabla::mean(*this, dims, keepdim);
}
Tensor Tensor::abs() const {
  return nabla::abs(*this);
}
Tensor Tensor::exp() const {
  return nabla::exp(*this);
}
Tensor Tensor::log() const {
  return nabla::log(*this);
}
Tensor Tensor::sqrt() const {
  return nabla::sqrt(*this);
}
Tensor Tensor::pow(double exponent) const {
  return nabla::pow(*this, exponent);
}
Tensor Tensor::relu() const {
  return nabla::relu(*this);
}
Tensor Tensor::sigmoid() const {
  return nabla::sigmoid(*this);
}
Tensor Tensor::tanh() const {
  return nabla::tanh(*this);
}
Tensor Tensor::matmul(const Tensor& other) const {
  return nabla::matmul(*this, other);
}

Tensor& Tensor::add_(const Tensor& other, double alpha) {
  return nabla::add_(*this, other, alpha);
}
Tensor& Tensor::sub_(const Tensor& other, double alpha) {
  return nabla::sub_(*this, other, alpha);
}
Tensor& Tensor::mul_(const Tensor& other) {
  return nabla::mul_(*this, other);
}
Tensor& Tensor::div_(const Tensor& other) {
  return nabla::div_(*this, other);
}
Tensor& Tensor::add_(double value) {
  return nabla::add_(*this, value);
}
Tensor& Tensor::mul_(double value) {
  return nabla::mul_(*this, value);
}
Tensor& Tensor::relu_() {
  return nabla::relu_(*this);
}
Tensor& Tensor::clamp_(std::optional<double> min, std::optional<double> max) {
  return nabla::clamp_(*this, min, max);
}

}  // namespace nabla
