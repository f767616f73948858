// Views with autograd. Each computes new geometry over the same storage (alias) and
// records a backward that maps the gradient back to the input's shape. Views of a tensor that
// requires grad are marked, so that in-place writes through them are refused (see
// autograd::check_inplace) instead of silently bypassing the base's history.
#include "nabla/ops/view.h"

#include <algorithm>
#include <numeric>

#include "nabla/ops/autograd/function.h"
#include "nabla/ops/copy.h"
#include "nabla/ops/detail/alias.h"
#include "nabla/ops/detail/dispatch.h"
#include "nabla/ops/factory.h"
#include "nabla/ops/fusion/recorder.h"
#include "nabla/ops/indexing.h"
#include "nabla/ops/reduce.h"

namespace nabla {

namespace {

Tensor make_view(const Tensor& x, const Shape& sizes, const Shape& strides, int64_t offset, const char* name,
                 autograd::BackwardFn backward) {
  Tensor v = ops::alias(x, sizes, strides, offset);
  if (autograd::needs_grad({x})) {
    autograd::record(name, {x}, {v}, {}, std::move(backward));
    v.impl()->autograd_meta().is_view_of_grad_tensor = true;
  }
  return v;
}

autograd::BackwardFn reshape_back(const Shape& in_sizes) {
  return [in_sizes](autograd::BackwardContext& ctx) { return TensorList{ctx.grad().reshape(in_sizes)}; };
}

// Resolves one -1 in `sizes` against `numel`; throws naming `op` when impossible.
Shape infer_sizes(const Shape& sizes, int64_t numel, const char* op) {
  Shape out = sizes;
  int64_t known = 1;
  int infer = -1;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] == -1) {
      NABLA_CHECK(infer < 0, "{}: only one dim can be -1, got {}", op, shape_str(sizes));
      infer = static_cast<int>(i);
    } else {
      NABLA_CHECK(sizes[i] >= 0, "{}: invalid size {} in shape {}", op, sizes[i], shape_str(sizes));
      known *= sizes[i];
    }
  }
  if (infer >= 0) {
    NABLA_CHECK(known != 0 && numel % known == 0, "{}: shape {} is invalid for a tensor of {} elements", op,
                shape_str(sizes), numel);
    out[infer] = numel / known;
  } else {
    NABLA_CHECK(known == numel, "{}: shape {} is invalid for a tensor of {} elements", op, shape_str(sizes),
                numel);
  }
  return out;
}

// Strides that let `new_sizes` view memory laid out as (old_sizes, old_strides), or nothing when
// the view would need a copy. Dims are walked in chunks that are contiguous among themselves;
// each chunk must be rebuilt exactly by a run of new dims.
std::optional<Shape> view_strides(const Shape& old_sizes, const Shape& old_strides, const Shape& new_sizes) {
  Shape new_strides(new_sizes.size(), 1);
  if (old_sizes.empty() || numel_of(old_sizes) == 0) return contiguous_strides(new_sizes);
  int64_t view_d = static_cast<int64_t>(new_sizes.size()) - 1;
  int64_t chunk_base_stride = old_strides.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t d = static_cast<int64_t>(old_sizes.size()) - 1; d >= 0; --d) {
    tensor_numel *= old_sizes[d];
    bool chunk_ends =
        d == 0 || (old_sizes[d - 1] != 1 && old_strides[d - 1] != tensor_numel * chunk_base_stride);
    if (!chunk_ends) continue;
    while (view_d >= 0 && (view_numel < tensor_numel || new_sizes[view_d] == 1)) {
      new_strides[view_d] = view_numel * chunk_base_stride;
      view_numel *= new_sizes[view_d];
      --view_d;
    }
    if (view_numel != tensor_numel) return std::nullopt;
    if (d > 0) {
      chunk_base_stride = old_strides[d - 1];
      tensor_numel = 1;
      view_numel = 1;
    }
  }
  if (view_d != -1) return std::nullopt;
  return new_strides;
}

// The inverse of slicing: zeros of `sizes`, laid out as the sliced tensor was (`strides`) when that
// layout is dense (Note [Gradients in their input's layout] in ops/detail/alias.h), with `g` written at the
// slice. Differentiable (its own backward is the slice), so double backward works through views.
Tensor slice_backward(const Tensor& g, const Shape& sizes, const Shape& strides, int64_t dim, int64_t start,
                      int64_t end, int64_t step) {
  const Shape layout = ops::dense_strides_like(sizes, strides);
  // Under the step compiler, a held g and the zeros around it are pieces of out, written only if
  // someone reads out (Note [Padded slices] in ops/fusion/recorder_pieces.cpp).
  Tensor out;
  if (step == 1 && g.is_cuda() && ops::fusion::holds_result(g)) {
    out = ops::empty_strided(sizes, layout, {.dtype = g.dtype(), .device = g.device()});
    if (!ops::fusion::record_pad(g, dim, start, out)) out = Tensor();
  }
  if (!out.defined()) {
    out = ops::alias(zeros({numel_of(sizes)}, {.dtype = g.dtype(), .device = g.device()}), sizes, layout, 0);
    NoGradGuard no_grad;
    Tensor window = slice(out, dim, start, end, step);
    copy_(window, g);
  }
  if (autograd::needs_grad({g})) {
    autograd::record("SliceBackwardBackward", {g}, {out}, {},
                     [dim, start, end, step](autograd::BackwardContext& ctx) {
                       return TensorList{slice(ctx.grad(), dim, start, end, step)};
                     });
  }
  return out;
}

}  // namespace

Tensor view(const Tensor& x, const Shape& sizes) {
  ops::check_defined("view", x, "self");
  Shape target = infer_sizes(sizes, x.numel(), "view");
  auto strides = view_strides(x.sizes(), x.strides(), target);
  NABLA_CHECK(
      strides.has_value(),
      "view: shape {} is not compatible with the strides of {} (strides {}); use reshape(), which copies "
      "when it must",
      shape_str(target), describe(x), shape_str(x.strides()));
  return make_view(x, target, *strides, x.storage_offset(), "ViewBackward", reshape_back(x.sizes()));
}

Tensor reshape(const Tensor& x, const Shape& sizes) {
  ops::check_defined("reshape", x, "self");
  Shape target = infer_sizes(sizes, x.numel(), "reshape");
  if (view_strides(x.sizes(), x.strides(), target)) return view(x, target);
  return view(contiguous(x), target);
}

Tensor permute(const Tensor& x, const Shape& dims) {
  ops::check_defined("permute", x, "self");
  const int64_t nd = x.dim();
  NABLA_CHECK(static_cast<int64_t>(dims.size()) == nd, "permute: {} dims given for a {}-d tensor {}",
              dims.size(), nd, describe(x));
  Shape sizes(nd), strides(nd), inverse(nd);
  std::vector<bool> seen(nd, false);
  for (int64_t i = 0; i < nd; ++i) {
    int64_t d = wrap_dim(dims[i], nd, "permute");
    NABLA_CHECK(!seen[d], "permute: dim {} repeats in {}", d, shape_str(dims));
    seen[d] = true;
    sizes[i] = x.size(d);
    strides[i] = x.stride(d);
    inverse[d] = i;
  }
  return make_view(
      x, sizes, strides, x.storage_offset(), "PermuteBackward",
      [inverse](autograd::BackwardContext& ctx) { return TensorList{ctx.grad().permute(inverse)}; });
}

Tensor transpose(const Tensor& x, int64_t dim0, int64_t dim1) {
  ops::check_defined("transpose", x, "self");
  const int64_t nd = x.dim();
  int64_t a = wrap_dim(dim0, nd, "transpose"), b = wrap_dim(dim1, nd, "transpose");
  Shape sizes = x.sizes(), strides = x.strides();
  if (nd == 0)
    return make_view(x, sizes, strides, x.storage_offset(), "TransposeBackward", reshape_back(sizes));
  std::swap(sizes[a], sizes[b]);
  std::swap(strides[a], strides[b]);
  return make_view(x, sizes, strides, x.storage_offset(), "TransposeBackward",
                   [a, b](autograd::BackwardContext& ctx) { return TensorList{ctx.grad().transpose(a, b)}; });
}

Tensor slice(const Tensor& x, int64_t dim, int64_t start, int64_t end, int64_t step) {
  ops::check_defined("slice", x, "self");
  NABLA_CHECK(x.dim() > 0, "slice: cannot slice a 0-d tensor");
  int64_t d = wrap_dim(dim, x.dim(), "slice");
  NABLA_CHECK(step > 0, "slice: step must be positive, got {}", step);
  const int64_t n = x.size(d);
  auto clamp_index = [n](int64_t i) { return std::clamp<int64_t>(i < 0 ? i + n : i, 0, n); };
  int64_t s = clamp_index(start), e = std::max(clamp_index(end), clamp_index(start));
  Shape sizes = x.sizes(), strides = x.strides();
  sizes[d] = (e - s + step - 1) / step;
  strides[d] *= step;
  int64_t offset = x.storage_offset() + s * x.stride(d);
  const Shape& in_sizes = x.sizes();
  const Shape& in_strides = x.strides();
  return make_view(x, sizes, strides, offset, "SliceBackward",
                   [in_sizes, in_strides, d, s, e, step](autograd::BackwardContext& ctx) {
                     return TensorList{slice_backward(ctx.grad(), in_sizes, in_strides, d, s, e, step)};
                   });
}

Tensor narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length) {
  ops::check_defined("narrow", x, "self");
  int64_t d = wrap_dim(dim, x.dim(), "narrow");
  const int64_t n = x.size(d);
  if (start < 0) start += n;
  NABLA_CHECK(start >= 0 && length >= 0 && start + length <= n,
              "narrow: start {} and length {} do not fit in dim {} of size {} ({})", start, length, d, n,
              describe(x));
  return slice(x, d, start, start + length, 1);
}

Tensor select(const Tensor& x, int64_t dim, int64_t index) {
  ops::check_defined("select", x, "self");
  int64_t d = wrap_dim(dim, x.dim(), "select");
  const int64_t n = x.size(d);
  NABLA_CHECK(index >= -n && index < n, "select: index {} is out of range for dim {} of size {}", index, d,
              n);
  if (index < 0) index += n;
  Shape sizes = x.sizes(), strides = x.strides();
  int64_t offset = x.storage_offset() + index * strides[d];
  sizes.erase(sizes.begin() + d);
  strides.erase(strides.begin() + d);
  const Shape& in_sizes = x.sizes();
  const Shape& in_strides = x.strides();
  return make_view(x, sizes, strides, offset, "SelectBackward",
                   [in_sizes, in_strides, d, index](autograd::BackwardContext& ctx) {
                     return TensorList{slice_backward(ctx.grad().unsqueeze(d), in_sizes, in_strides, d, index,
                                                      index + 1, 1)};
                   });
}

Tensor expand(const Tensor& x, const Shape& sizes) {
  ops::check_defined("expand", x, "self");
  const int64_t nd = static_cast<int64_t>(sizes.size()), xd = x.dim();
  NABLA_CHECK(nd >= xd, "expand: target {} has fewer dims than {}", shape_str(sizes), describe(x));
  Shape out_sizes(nd), out_strides(nd);
  for (int64_t i = nd - 1; i >= 0; --i) {
    int64_t j = i - (nd - xd);  // the matching dim of x, or < 0 for a new leading dim
    int64_t target = sizes[i];
    if (j < 0) {
      NABLA_CHECK(target >= 0, "expand: a new leading dim cannot be -1 (target {})", shape_str(sizes));
      out_sizes[i] = target;
      out_strides[i] = 0;
      continue;
    }
    int64_t have = x.size(j);
    if (target == -1) target = have;
    NABLA_CHECK(
        have == target || have == 1,
        "expand: dim {} of {} has size {}, which can only expand to itself or from 1, not to {} (target {})",
        j, describe(x), have, target, shape_str(sizes));
    out_sizes[i] = target;
    out_strides[i] = have == target ? x.stride(j) : 0;
  }
  Shape in_sizes = x.sizes();
  return make_view(
      x, out_sizes, out_strides, x.storage_offset(), "ExpandBackward",
      [in_sizes](autograd::BackwardContext& ctx) { return TensorList{sum_to(ctx.grad(), in_sizes)}; });
}

Tensor squeeze(const Tensor& x) {
  ops::check_defined("squeeze", x, "self");
  Shape sizes, strides;
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (x.size(d) != 1) {
      sizes.push_back(x.size(d));
      strides.push_back(x.stride(d));
    }
  }
  return make_view(x, sizes, strides, x.storage_offset(), "SqueezeBackward", reshape_back(x.sizes()));
}

Tensor squeeze(const Tensor& x, int64_t dim) {
  ops::check_defined("squeeze", x, "self");
  if (x.dim() == 0)
    return make_view(x, {}, {}, x.storage_offset(), "SqueezeBackward", reshape_back(x.sizes()));
  int64_t d = wrap_dim(dim, x.dim(), "squeeze");
  Shape sizes = x.sizes(), strides = x.strides();
  if (sizes[d] == 1) {
    sizes.erase(sizes.begin() + d);
    strides.erase(strides.begin() + d);
  }
  return make_view(x, sizes, strides, x.storage_offset(), "SqueezeBackward", reshape_back(x.sizes()));
}

Tensor unsqueeze(const Tensor& x, int64_t dim) {
  ops::check_defined("unsqueeze", x, "self");
  int64_t d = wrap_dim(dim, x.dim() + 1, "unsqueeze");
  Shape sizes = x.sizes(), strides = x.strides();
  int64_t stride = d < x.dim() ? sizes[d] * strides[d] : 1;
  sizes.insert(sizes.begin() + d, 1);
  strides.insert(strides.begin() + d, stride);
  return make_view(x, sizes, strides, x.storage_offset(), "UnsqueezeBackward", reshape_back(x.sizes()));
}

Tensor flatten(const Tensor& x, int64_t start_dim, int64_t end_dim) {
  ops::check_defined("flatten", x, "self");
  if (x.dim() == 0) return reshape(x, {1});
  int64_t s = wrap_dim(start_dim, x.dim(), "flatten"), e = wrap_dim(end_dim, x.dim(), "flatten");
  NABLA_CHECK(s <= e, "flatten: start_dim {} comes after end_dim {}", s, e);
  Shape sizes(x.sizes().begin(), x.sizes().begin() + s);
  int64_t merged = 1;
  for (int64_t d = s; d <= e; ++d) merged *= x.size(d);
  sizes.push_back(merged);
  sizes.insert(sizes.end(), x.sizes().begin() + e + 1, x.sizes().end());
  return reshape(x, sizes);
}

Tensor ops::with_format_strides(const Tensor& x, MemoryFormat format) {
  NABLA_ASSERT(x.is_contiguous(format),
               "with_format_strides: the tensor must already be dense in the format");
  return make_view(x, x.sizes(), strides_for(x.sizes(), format), x.storage_offset(), "RestrideBackward",
                   reshape_back(x.sizes()));
}

Tensor as_strided(const Tensor& x, const Shape& sizes, const Shape& strides, std::optional<int64_t> offset) {
  ops::check_defined("as_strided", x, "self");
  NABLA_CHECK(sizes.size() == strides.size(), "as_strided: {} sizes but {} strides", sizes.size(),
              strides.size());
  int64_t off = offset.value_or(x.storage_offset());
  const int64_t storage_numel = static_cast<int64_t>(x.storage()->nbytes() / x.itemsize());
  int64_t last = off;
  for (size_t i = 0; i < sizes.size(); ++i) {
    NABLA_CHECK(sizes[i] >= 0 && strides[i] >= 0,
                "as_strided: sizes and strides must be non-negative, got {} and {}", shape_str(sizes),
                shape_str(strides));
    if (sizes[i] > 0) last += (sizes[i] - 1) * strides[i];
  }
  NABLA_CHECK(
      off >= 0 && (numel_of(sizes) == 0 || last < storage_numel),
      "as_strided: sizes {}, strides {} and offset {} reach element {}, past the storage's {} elements",
      shape_str(sizes), shape_str(strides), off, last, storage_numel);
  Shape in_sizes = x.sizes(), in_strides = x.strides();
  int64_t in_offset = x.storage_offset();
  // Backward: add each output gradient into its storage position, then read the input's
  // positions back. Where the input itself overlaps in memory, each alias gets the full sum.
  return make_view(x, sizes, strides, off, "AsStridedBackward", [=](autograd::BackwardContext& ctx) {
    const Tensor& g = ctx.grad();
    Tensor positions = arange(static_cast<double>(storage_numel), {.dtype = kInt64, .device = g.device()});
    Tensor out_pos = positions.as_strided(sizes, strides, off).reshape({-1});
    Tensor in_pos = positions.as_strided(in_sizes, in_strides, in_offset).reshape({-1});
    Tensor buffer = zeros({storage_numel}, {.dtype = g.dtype(), .device = g.device()});
    buffer = index_add(buffer, 0, out_pos, g.reshape({-1}));
    return TensorList{index_select(buffer, 0, in_pos).view(in_sizes)};
  });
}

}  // namespace nabla
