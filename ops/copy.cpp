// Copies between dtypes, devices and layouts: copy_, to, clone, contiguous.
//
// CPU to CPU copies run the strided cast kernel. Copies that touch a CUDA device move raw bytes
// with cudaMemcpy: the source is first made dense in the destination's dtype and layout on its
// own side when it can be (on the CPU), and a strided CUDA source is fetched as its whole
// storage span and rearranged on the host. Strided copies within a CUDA device need the CUDA
// elementwise kernels (CUDA backend issue).
#include "nabla/ops/copy.h"

#include "nabla/core/cuda/runtime.h"
#include "nabla/ops/autograd/function.h"
#include "nabla/ops/cpu/kernels.h"
#include "nabla/ops/dispatch.h"
#include "nabla/ops/reduce.h"
#include "nabla/ops/view.h"

namespace nabla {

namespace {

// The storage span of `t` in elements: from its offset to one past its furthest element.
int64_t span_elements(const Tensor& t) {
  if (t.numel() == 0) return 0;
  int64_t span = 1;
  for (int64_t d = 0; d < t.dim(); ++d) span += (t.size(d) - 1) * t.stride(d);
  return span;
}

// A CPU tensor with `src`'s values and geometry (its storage span fetched to the host).
Tensor fetch_to_host(const Tensor& src) {
  int64_t span = span_elements(src);
  Tensor host = Tensor::empty({span}, {.dtype = src.dtype()});
  cuda::copy_bytes(host.data_ptr(), Device::cpu(), src.data_ptr(), src.device(),
                   static_cast<size_t>(span) * src.itemsize());
  return Tensor::alias(host, src.sizes(), src.strides(), 0);
}

bool same_dense_layout(const Tensor& a, const Tensor& b) {
  return a.sizes() == b.sizes() && a.strides() == b.strides() && a.dtype() == b.dtype() &&
         is_non_overlapping_and_dense(a.sizes(), a.strides());
}

void copy_values(const Tensor& dst, const Tensor& src) {
  if (dst.is_cpu() && src.is_cpu()) {
    ops::cpu::copy(src, dst);
    return;
  }
  if (dst.device() == src.device()) {
    // Same CUDA device: only a byte copy for identical dense layouts is possible without kernels.
    if (same_dense_layout(dst, src)) {
      cuda::copy_bytes(dst.data_ptr(), dst.device(), src.data_ptr(), src.device(), dst.nbytes());
      return;
    }
    ops::missing_cuda_kernel("copy_ (strided or converting copy within a CUDA device)");
  }
  // Across devices: bring the source to the host in dst's dtype and layout, then move bytes.
  Tensor host_src = src.is_cpu() ? src : fetch_to_host(src);
  if (dst.is_cpu()) {
    ops::cpu::copy(host_src, dst);
    return;
  }
  NABLA_CHECK(is_non_overlapping_and_dense(dst.sizes(), dst.strides()),
              "copy_: copying into a strided CUDA tensor ({}) needs CUDA kernels this build lacks",
              describe(dst));
  Tensor staged =
      Tensor::alias(Tensor::empty({dst.numel()}, {.dtype = dst.dtype()}), dst.sizes(), dst.strides(), 0);
  // `staged` must cover exactly dst's span: dense with the same strides does.
  ops::cpu::copy(host_src, staged);
  cuda::copy_bytes(dst.data_ptr(), dst.device(), staged.data_ptr(), Device::cpu(), dst.nbytes());
}

}  // namespace

Tensor& copy_(Tensor& dst, const Tensor& src) {
  ops::check_defined("copy_", dst, "dst");
  ops::check_defined("copy_", src, "src");
  NABLA_CHECK(broadcast_shapes(dst.sizes(), src.sizes(), "copy_") == dst.sizes(),
              "copy_: source {} cannot be broadcast to destination {}", describe(src), describe(dst));
  autograd::check_inplace(dst, "copy_");
  {
    NoGradGuard no_grad;
    copy_values(dst, src);
  }
  dst.bump_version();
  if (autograd::needs_grad({src, dst})) {
    // dst's old value is overwritten, so its old history gets no gradient: the node's only
    // input is src (recorded even when src needs none, to cut dst off its old history).
    Shape src_sizes = src.sizes();
    DType src_dtype = src.dtype();
    Device src_device = src.device();
    autograd::record("CopyBackward", {src}, {dst}, {},
                     [src_sizes, src_dtype, src_device](autograd::BackwardContext& ctx) {
                       return TensorList{sum_to(ctx.grad(), src_sizes).to(src_device, src_dtype)};
                     });
  }
  return dst;
}

Tensor to(const Tensor& x, Device device, DType dtype) {
  ops::check_defined("to", x, "self");
  if (x.device() == device && x.dtype() == dtype) return x;
  MemoryFormat format = x.suggest_memory_format();
  Tensor out = Tensor::empty(x.sizes(), {.dtype = dtype, .device = device, .memory_format = format});
  {
    NoGradGuard no_grad;
    copy_values(out, x);
  }
  if (autograd::needs_grad({x}) && is_floating(dtype)) {
    Device in_device = x.device();
    DType in_dtype = x.dtype();
    autograd::record("ToCopyBackward", {x}, {out}, {}, [in_device, in_dtype](autograd::BackwardContext& ctx) {
      return TensorList{ctx.grad().to(in_device, in_dtype)};
    });
  }
  return out;
}

Tensor clone(const Tensor& x, MemoryFormat format) {
  ops::check_defined("clone", x, "self");
  MemoryFormat f = format == MemoryFormat::Preserve ? x.suggest_memory_format() : format;
  Tensor out = Tensor::empty(x.sizes(), {.dtype = x.dtype(), .device = x.device(), .memory_format = f});
  {
    NoGradGuard no_grad;
    copy_values(out, x);
  }
  if (autograd::needs_grad({x})) {
    autograd::record("CloneBackward", {x}, {out}, {},
                     [](autograd::BackwardContext& ctx) { return TensorList{ctx.grad()}; });
  }
  return out;
}

Tensor contiguous(const Tensor& x, MemoryFormat format) {
  ops::check_defined("contiguous", x, "self");
  NABLA_CHECK(format != MemoryFormat::Preserve, "contiguous: MemoryFormat::Preserve is not a layout to make");
  if (x.is_contiguous(format)) return x;
  return clone(x, format);
}

}  // namespace nabla
