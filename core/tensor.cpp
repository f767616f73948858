// Tensor metadata and autograd bookkeeping. Math methods are defined in ops/tensor_methods.cpp.
#include "nabla/core/tensor.h"

#include "nabla/core/autograd/node.h"
#include "nabla/core/cuda/pinned_allocator.h"

namespace nabla {

TensorImpl::TensorImpl(std::shared_ptr<Storage> storage, int64_t offset, Shape sizes, Shape strides,
                       DType dtype)
    : storage_(std::move(storage)),
      offset_(offset),
      sizes_(std::move(sizes)),
      strides_(std::move(strides)),
      dtype_(dtype) {}

TensorImpl::~TensorImpl() = default;

autograd::AutogradMeta& TensorImpl::autograd_meta() {
  if (!autograd_) autograd_ = std::make_unique<autograd::AutogradMeta>();
  return *autograd_;
}

void TensorImpl::rebind(std::shared_ptr<Storage> storage, int64_t offset, Shape strides) {
  NABLA_ASSERT(strides.size() == sizes_.size(), "rebind: {} strides for a {}-d tensor", strides.size(),
               sizes_.size());
  storage_ = std::move(storage);
  offset_ = offset;
  strides_ = std::move(strides);
}

Tensor Tensor::empty(const Shape& sizes, const TensorOptions& options) {
  for (int64_t s : sizes) NABLA_CHECK(s >= 0, "empty: negative size in shape {}", shape_str(sizes));
  NABLA_CHECK(options.memory_format != MemoryFormat::ChannelsLast || sizes.size() == 4,
              "empty: channels_last needs a 4-d shape, got {}", shape_str(sizes));
  size_t nbytes = static_cast<size_t>(numel_of(sizes)) * nabla::itemsize(options.dtype);
  NABLA_CHECK(!options.pinned_memory || options.device.is_cpu(),
              "empty: pinned_memory applies to CPU tensors, not to {}", options.device.str());
  auto storage = options.pinned_memory
                     ? std::make_shared<Storage>(cuda::pinned_allocator().allocate(nbytes), nbytes)
                     : Storage::allocate(nbytes, options.device);
  Shape strides =
      strides_for(sizes, options.memory_format == MemoryFormat::Preserve ? MemoryFormat::Contiguous
                                                                         : options.memory_format);
  Tensor t(std::make_shared<TensorImpl>(std::move(storage), 0, sizes, std::move(strides), options.dtype));
  if (options.requires_grad) t.requires_grad_(true);
  return t;
}

Tensor Tensor::from_blob(void* data, const Shape& sizes, const TensorOptions& options,
                         std::optional<Shape> strides) {
  Shape st = strides ? *strides : strides_for(sizes, options.memory_format);
  NABLA_CHECK(st.size() == sizes.size(), "from_blob: {} strides given for a {}-d shape {}", st.size(),
              sizes.size(), shape_str(sizes));
  int64_t span = 1;
  for (size_t i = 0; i < sizes.size(); ++i) {
    NABLA_CHECK(sizes[i] >= 0 && st[i] >= 0,
                "from_blob: sizes and strides must be non-negative, got {} and {}", shape_str(sizes),
                shape_str(st));
    if (sizes[i] > 0) span += (sizes[i] - 1) * st[i];
  }
  size_t nbytes = numel_of(sizes) == 0 ? 0 : static_cast<size_t>(span) * nabla::itemsize(options.dtype);
  // Borrowed memory: the deleter is empty, the caller keeps ownership.
  auto storage = std::make_shared<Storage>(DataPtr(data, nullptr, nullptr, options.device), nbytes);
  Tensor t(std::make_shared<TensorImpl>(std::move(storage), 0, sizes, std::move(st), options.dtype));
  if (options.requires_grad) t.requires_grad_(true);
  return t;
}

bool Tensor::is_pinned() const {
  return is_cpu() && cuda::is_pinned(storage()->data());
}

int64_t Tensor::size(int64_t dim) const {
  return sizes()[wrap_dim(dim, this->dim(), "size")];
}
int64_t Tensor::stride(int64_t dim) const {
  return strides()[wrap_dim(dim, this->dim(), "stride")];
}

bool Tensor::is_contiguous(MemoryFormat format) const {
  if (format == MemoryFormat::ChannelsLast) return is_channels_last_strides(sizes(), strides());
  return is_contiguous_strides(sizes(), strides());
}

MemoryFormat Tensor::suggest_memory_format() const {
  if (dim() == 4 && is_channels_last_strides(sizes(), strides()) &&
      !is_contiguous_strides(sizes(), strides())) {
    return MemoryFormat::ChannelsLast;
  }
  return MemoryFormat::Contiguous;
}

void* Tensor::data_ptr() const {
  const auto& impl = checked();
  return static_cast<char*>(impl.storage()->data()) +
         impl.offset() * static_cast<int64_t>(nabla::itemsize(impl.dtype()));
}

bool Tensor::requires_grad() const {
  const auto& impl = checked();
  return impl.autograd_if_any() && impl.autograd_if_any()->requires_grad;
}

Tensor& Tensor::requires_grad_(bool requires_grad) {
  NABLA_CHECK(!requires_grad || is_floating_point(),
              "requires_grad_: only floating-point tensors can require "
              "gradients, got {}",
              describe(*this));
  NABLA_CHECK(is_leaf(),
              "requires_grad_: can only be changed on a leaf tensor (this one is the result of {}); "
              "use detach() to get a new leaf",
              grad_fn()->name());
  impl_->autograd_meta().requires_grad = requires_grad;
  return *this;
}

namespace {
const Tensor kUndefined;
const std::shared_ptr<autograd::Node> kNoNode;
}  // namespace

const Tensor& Tensor::grad() const {
  const auto& impl = checked();
  return impl.autograd_if_any() ? impl.autograd_if_any()->grad : kUndefined;
}

Tensor& Tensor::mutable_grad() {
  return impl_->autograd_meta().grad;
}

void Tensor::set_grad(Tensor grad) const {
  if (grad.defined()) {
    NABLA_CHECK(grad.sizes() == sizes() && grad.dtype() == dtype() && grad.device() == device(),
                "set_grad: gradient {} does not match tensor {}", describe(grad), describe(*this));
  }
  impl_->autograd_meta().grad = std::move(grad);
}

bool Tensor::is_leaf() const {
  const auto& impl = checked();
  return !impl.autograd_if_any() || !impl.autograd_if_any()->grad_fn;
}

const std::shared_ptr<autograd::Node>& Tensor::grad_fn() const {
  const auto& impl = checked();
  return impl.autograd_if_any() ? impl.autograd_if_any()->grad_fn : kNoNode;
}

uint32_t Tensor::output_nr() const {
  const auto& impl = checked();
  return impl.autograd_if_any() ? impl.autograd_if_any()->output_nr : 0;
}

Tensor Tensor::detach() const {
  const auto& impl = checked();
  return Tensor(std::make_shared<TensorImpl>(impl.storage(), impl.offset(), impl.sizes(), impl.strides(),
                                             impl.dtype()));
}

void Tensor::register_hook(std::function<Tensor(const Tensor&)> hook) const {
  NABLA_CHECK(requires_grad(),
              "register_hook: the tensor does not require grad, so no gradient will reach it");
  if (is_leaf()) {
    impl_->autograd_meta().leaf_pre_hooks.push_back(std::move(hook));
  } else {
    grad_fn()->pre_hooks.emplace_back(output_nr(), std::move(hook));
  }
}

void Tensor::register_post_accumulate_grad_hook(std::function<void(const Tensor&)> hook) const {
  NABLA_CHECK(
      requires_grad() && is_leaf(),
      "register_post_accumulate_grad_hook: only leaf tensors that require grad accumulate a gradient");
  impl_->autograd_meta().post_accumulate_hooks.push_back(std::move(hook));
}

void Tensor::retain_grad() const {
  NABLA_CHECK(requires_grad(), "retain_grad: the tensor does not require grad");
  if (is_leaf() || impl_->autograd_if_any()->retains_grad) return;
  impl_->autograd_if_any()->retains_grad = true;
  std::weak_ptr<TensorImpl> weak = impl_;
  grad_fn()->pre_hooks.emplace_back(output_nr(), [weak](const Tensor& g) {
    if (auto impl = weak.lock()) {
      // The engine owns `g` and may add into it later, so keep a detached alias; accumulation
      // across backward calls replaces rather than adds, as for non-leaf grads in PyTorch.
      impl->autograd_meta().grad = g.detach();
    }
    return Tensor();
  });
}

std::string describe(const Tensor& t) {
  if (!t.defined()) return "an undefined tensor";
  return fmt::format("{}{} on {}", dtype_name(t.dtype()), shape_str(t.sizes()), t.device().str());
}

}  // namespace nabla
