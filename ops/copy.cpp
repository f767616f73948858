// Copies between dtypes, devices and layouts: copy_, to, clone, contiguous.
//
// Within one device the backend's copy kernel does everything: strides, broadcasting and dtype
// conversion. Across devices only dense bytes travel, in one cudaMemcpy:
//   1. on the source device, the source is made dense (when it is not) by that device's kernel,
//      straight into the destination's dtype and layout when the destination is dense;
//   2. the dense bytes go across;
//   3. on the destination device, the kernel rearranges and converts them into the destination
//      (skipped when step 1 already produced the destination's exact layout and dtype).
// So no strided data is ever staged through the host, and a dtype conversion in a transfer to
// or from a GPU runs wherever the data has to be rearranged anyway.
#include "nabla/ops/copy.h"

#include <atomic>
#include <map>
#include <optional>

#include "nabla/core/cuda/runtime.h"
#include "nabla/core/cuda/stream.h"
#include "nabla/ops/autograd/detail/pointwise_node.h"
#include "nabla/ops/autograd/function.h"
#include "nabla/ops/cpu/kernels.h"
#include "nabla/ops/cuda/elementwise/kernels.h"
#include "nabla/ops/detail/alias.h"
#include "nabla/ops/detail/dispatch.h"
#include "nabla/ops/fusion/recompute.h"
#include "nabla/ops/fusion/recorder.h"
#include "nabla/ops/reduce.h"
#include "nabla/ops/view.h"

namespace nabla {

namespace {

std::atomic<int64_t> conversions_total{0};
std::atomic<int64_t> conversions_cpu_conv{0};
thread_local bool in_cpu_conv_staging = false;

// Counts a copy of dense 4-d `src` into `format` when that changes the memory format.
void count_layout_change(const Tensor& src, MemoryFormat format) {
  if (src.dim() != 4 || src.is_contiguous(format)) return;
  if (!is_non_overlapping_and_dense(src.sizes(), src.strides())) return;  // a gather, not a relayout
  conversions_total.fetch_add(1, std::memory_order_relaxed);
  if (in_cpu_conv_staging) conversions_cpu_conv.fetch_add(1, std::memory_order_relaxed);
}

bool is_dense(const Tensor& t) {
  return is_non_overlapping_and_dense(t.sizes(), t.strides());
}

// Dense in NCHW and in NHWC order at once (one channel, or 1x1 pixels), with distinct strides.
bool is_both_formats(const Tensor& t) {
  return t.dim() == 4 && t.is_contiguous() && t.is_contiguous(MemoryFormat::ChannelsLast);
}

bool same_dense_layout(const Tensor& a, const Tensor& b) {
  return a.sizes() == b.sizes() && a.strides() == b.strides() && a.dtype() == b.dtype() && is_dense(a);
}

// dst = src (with conversion and broadcasting) when both are on one device.
void copy_on_device(const Tensor& dst, const Tensor& src) {
  ops::dispatch(
      "copy", dst, [&] { ops::cpu::copy(src, dst); },
      [&] {
        if (same_dense_layout(dst, src)) {  // the copy engine moves identical layouts
          cuda::copy_bytes(dst.data_ptr(), dst.device(), src.data_ptr(), src.device(), dst.nbytes());
          return;
        }
        ops::cuda::copy(src, dst);
      });
}

// A fresh dense tensor on `device` with `like`'s sizes and strides (which must be dense).
Tensor empty_with_layout(const Tensor& like, DType dtype, Device device) {
  return ops::empty_strided(like.sizes(), like.strides(), {.dtype = dtype, .device = device});
}

void copy_values(const Tensor& dst, const Tensor& src) {
  if (dst.numel() == 0) return;
  if (dst.device() == src.device()) {
    copy_on_device(dst, src);
    return;
  }
  // 1. Dense on the source device: a dense source travels as it is (a broadcast one unexpanded);
  //    any other is made dense, in dst's own layout and dtype when dst is dense.
  Tensor dense = src;
  if (!is_dense(src)) {
    dense = is_dense(dst) && src.sizes() == dst.sizes()
                ? empty_with_layout(dst, dst.dtype(), src.device())
                : Tensor::empty(src.sizes(), {.dtype = src.dtype(), .device = src.device()});
    copy_on_device(dense, src);
  }
  // 2. Across in one copy: straight into dst when the layouts already agree. copy_bytes runs on
  //    the destination GPU's stream (or the one GPU's); between two GPUs the source's stream
  //    must have finished writing first.
  if (src.is_cuda() && dst.is_cuda()) cuda::current_stream(src.device().index).synchronize();
  if (same_dense_layout(dense, dst)) {
    cuda::copy_bytes(dst.data_ptr(), dst.device(), dense.data_ptr(), dense.device(), dst.nbytes());
    return;
  }
  Tensor landed = empty_with_layout(dense, dense.dtype(), dst.device());
  cuda::copy_bytes(landed.data_ptr(), landed.device(), dense.data_ptr(), dense.device(), dense.nbytes());
  // 3. Rearrange and convert on the destination device.
  copy_on_device(dst, landed);
}

}  // namespace

Tensor& copy_(Tensor& dst, const Tensor& src) {
  ops::check_defined("copy_", dst, "dst");
  ops::check_defined("copy_", src, "src");
  NABLA_CHECK(broadcast_shapes(dst.sizes(), src.sizes(), "copy_") == dst.sizes(),
              "copy_: source {} cannot be broadcast to destination {}", describe(src), describe(dst));
  autograd::check_inplace(dst, "copy_");
  if (dst.dim() == 4 && dst.sizes() == src.sizes() && is_dense(dst))
    count_layout_change(src, dst.suggest_memory_format());
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

void copy_many(const TensorList& dsts, const TensorList& srcs) {
  NABLA_CHECK(dsts.size() == srcs.size(), "copy_many: {} destinations but {} sources", dsts.size(),
              srcs.size());
  std::map<int, std::vector<ops::cuda::ByteCopy>> batched;  // by device
  for (size_t i = 0; i < dsts.size(); ++i) {
    Tensor dst = dsts[i];
    const Tensor& src = srcs[i];
    ops::check_defined("copy_many", dst, "dst");
    ops::check_defined("copy_many", src, "src");
    NABLA_CHECK(!dst.requires_grad(),
                "copy_many: destination {} requires grad; copy_many records no autograd", i);
    ops::fusion::before_inplace_write(dst);
    if (dst.is_cuda() && src.device() == dst.device() && same_dense_layout(dst, src)) {
      if (dst.numel() > 0)
        batched[dst.device().index].push_back({dst.data_ptr(), src.data_ptr(), dst.nbytes()});
      dst.bump_version();
      continue;
    }
    NoGradGuard no_grad;
    copy_(dst, src);
  }
  for (const auto& entry : batched) {  // not a structured binding: the lambda captures it (clang < 16)
    const int device = entry.first;
    const auto& copies = entry.second;
    ops::dispatch(
        "copy_many", Device::cuda(device), [] {}, [&] { ops::cuda::copy_bytes_many(copies, device); });
  }
}

Tensor to(const Tensor& x, Device device, DType dtype) {
  ops::check_defined("to", x, "self");
  if (x.device() == device && x.dtype() == dtype) return x;
  // A dense tensor keeps its exact strides, as PyTorch's to() does (MemoryFormat::Preserve): a
  // transposed weight cast under autocast stays a transposed view of a plain buffer, so the
  // cast is a straight pass and the matmul's gradient for it comes back in the parameter's
  // layout (Note [Gradient layout]); a one-channel NHWC tensor stays NHWC-strided, so convs keep
  // reading it as channels_last. Any other tensor gets its suggested format.
  Tensor out =
      is_dense(x)
          ? empty_with_layout(x, dtype, device)
          : Tensor::empty(x.sizes(),
                          {.dtype = dtype, .device = device, .memory_format = x.suggest_memory_format()});
  // A dtype cast on one GPU is pointwise: a compiled step records it (Note [Deferred launches]).
  if (x.device() != device || !ops::fusion::record_cast(x, out)) {
    NoGradGuard no_grad;
    copy_values(out, x);
  }
  if (autograd::needs_grad({x}) && is_floating(dtype)) {
    Device in_device = x.device();
    DType in_dtype = x.dtype();
    // A cast on one device is a pointwise node (Note [Pointwise nodes first] in ops/autograd/engine.cpp).
    std::optional<autograd::detail::PointwiseNodeScope> pointwise;
    if (in_device == device) pointwise.emplace();
    autograd::record("ToCopyBackward", {x}, {out}, {}, [in_device, in_dtype](autograd::BackwardContext& ctx) {
      return TensorList{ctx.grad().to(in_device, in_dtype)};
    });
  }
  return out;
}

Tensor clone(const Tensor& x, MemoryFormat format) {
  ops::check_defined("clone", x, "self");
  MemoryFormat f = format == MemoryFormat::Preserve ? x.suggest_memory_format() : format;
  count_layout_change(x, f);
  // Preserve keeps exact strides where the format alone cannot say them, as to() does.
  Tensor out = format == MemoryFormat::Preserve && is_both_formats(x)
                   ? empty_with_layout(x, x.dtype(), x.device())
                   : Tensor::empty(x.sizes(), {.dtype = x.dtype(), .device = x.device(), .memory_format = f});
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
  if (x.is_contiguous(format)) {
    // A tensor that is NCHW and NHWC at once gets NHWC's exact strides, so that it reads as
    // channels_last downstream (no data moves; see ops::with_format_strides).
    if (format == MemoryFormat::ChannelsLast && x.strides() != channels_last_strides(x.sizes()))
      return ops::with_format_strides(x, format);
    return x;
  }
  return clone(x, format);
}

namespace debug {

LayoutConversions layout_conversions() {
  return {.total = conversions_total.load(std::memory_order_relaxed),
          .cpu_conv_staging = conversions_cpu_conv.load(std::memory_order_relaxed)};
}

void reset_layout_conversions() {
  conversions_total.store(0, std::memory_order_relaxed);
  conversions_cpu_conv.store(0, std::memory_order_relaxed);
}

CpuConvStagingScope::CpuConvStagingScope() : previous_(in_cpu_conv_staging) {
  in_cpu_conv_staging = true;
}

CpuConvStagingScope::~CpuConvStagingScope() {
  in_cpu_conv_staging = previous_;
}

}  // namespace debug

}  // namespace nabla
