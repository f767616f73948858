// Front ends for joining (cat, stack), splitting (split, chunk) and indexing (index_select,
// gather, index_add, index_copy, scatter_add).
//
// split and chunk return views made by narrow, whose own autograd covers them. Index values are
// checked so that a bad index gets an error naming it and never touches memory out of bounds: on
// the CPU before any kernel writes; on CUDA by a kernel, without a wait for the device (see
// check_index_values), so indexing can be captured in a CUDA graph. Each indexing op's gradient
// is its partner op (index_select with index_add, gather with scatter_add; index_copy's are
// index_select and index_copy of zeros), written with these
// differentiable front ends so that create_graph works.
#include "nabla/ops/indexing.h"

#include <algorithm>
#include <optional>

#include "nabla/core/autograd/grad_mode.h"
#include "nabla/ops/autograd/function.h"
#include "nabla/ops/cpu/indexing_kernels.h"
#include "nabla/ops/cpu/kernels.h"
#include "nabla/ops/cuda/elementwise/kernels.h"
#include "nabla/ops/cuda/indexing/kernels.h"
#include "nabla/ops/detail/alias.h"
#include "nabla/ops/detail/dispatch.h"
#include "nabla/ops/detail/inplace.h"
#include "nabla/ops/factory.h"
#include "nabla/ops/fusion/recorder.h"
#include "nabla/ops/view.h"

namespace nabla {

namespace {

void check_index_tensor(const char* op, const Tensor& x, const Tensor& index) {
  ops::check_defined(op, x, "x");
  ops::check_defined(op, index, "index");
  ops::check_same_device(op, {x, index});
  NABLA_CHECK(index.dtype() == kInt64, "{}: expected an int64 index, got {}", op, describe(index));
  NABLA_CHECK(x.dim() >= 1, "{}: expected a tensor of at least 1 dim, got {}", op, describe(x));
}

// Throws naming the first bad value on the CPU. On CUDA a kernel checks the values without making
// the host wait, and the error comes at the host's next wait for the device (Note [Checks on the
// device] in core/cuda/device_checks.h); the indexing kernels skip a bad index meanwhile.
void check_index_values(const char* op, const Tensor& index, const Tensor& x, int64_t dim) {
  const auto message = [&] {
    return fmt::format("{}: index {{}} is out of range for dim {} of {} (expected 0 <= index < {})", op, dim,
                       describe(x), x.size(dim));
  };
  std::optional<int64_t> bad;
  ops::dispatch(
      "find_out_of_range", index, [&] { bad = ops::cpu::find_out_of_range(index, x.size(dim)); },
      [&] { ops::cuda::check_indices(index, x.size(dim), message()); });
  NABLA_CHECK(!bad, "{}", fmt::format(fmt::runtime(message()), bad.value_or(0)));
}

// A copy of x for the out-of-place accumulating ops, in x's memory format.
Tensor accumulation_base(const Tensor& x) {
  Tensor out = Tensor::empty(
      x.sizes(), {.dtype = x.dtype(), .device = x.device(), .memory_format = x.suggest_memory_format()});
  ops::dispatch(
      "copy", x, [&] { ops::cpu::copy(x, out); }, [&] { ops::cuda::copy(x, out); });
  return out;
}

// Pads `t` with zeros at the end of each dim up to `sizes` (scatter_add's src may be larger than
// its index; the unused part gets no gradient).
Tensor pad_to(Tensor t, const Shape& sizes) {
  for (int64_t d = 0; d < t.dim(); ++d) {
    if (t.size(d) == sizes[d]) continue;
    Shape fill(t.sizes());
    fill[d] = sizes[d] - t.size(d);
    t = cat({t, zeros(fill, t.options())}, d);
  }
  return t;
}

}  // namespace

Tensor cat(const TensorList& tensors, int64_t dim) {
  NABLA_CHECK(!tensors.empty(), "cat: expected a non-empty list of tensors");
  for (size_t i = 0; i < tensors.size(); ++i)
    NABLA_CHECK(tensors[i].defined(), "cat: tensor #{} is undefined", i);
  const Tensor& first = tensors[0];
  NABLA_CHECK(first.dim() > 0,
              "cat: zero-dimensional tensor {} cannot be concatenated; unsqueeze it or use stack",
              describe(first));
  const int64_t d = wrap_dim(dim, first.dim(), "cat");
  Shape out_sizes(first.sizes());
  out_sizes[d] = 0;
  DType dtype = first.dtype();
  MemoryFormat format = first.suggest_memory_format();  // kept only when every input agrees
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    NABLA_CHECK(t.device() == first.device(),
                "cat: expected all tensors on one device, got {} (tensor #0) and {} "
                "(tensor #{})",
                describe(first), describe(t), i);
    NABLA_CHECK(t.dim() == first.dim(),
                "cat: expected tensors of {} dims like tensor #0 {}, got {} (tensor #{})", first.dim(),
                describe(first), describe(t), i);
    for (int64_t k = 0; k < t.dim(); ++k) {
      NABLA_CHECK(
          k == d || t.size(k) == first.size(k),
          "cat: sizes must match except in dim {}, got {} (tensor #0) and {} (tensor #{}), which differ in "
          "dim {}",
          d, describe(first), describe(t), i, k);
    }
    out_sizes[d] += t.size(d);
    dtype = promote_types(dtype, t.dtype());
    if (t.suggest_memory_format() != format) format = MemoryFormat::Contiguous;
  }
  Tensor out = Tensor::empty(out_sizes, {.dtype = dtype, .device = first.device(), .memory_format = format});
  // Under the step compiler, pieces it holds are computed straight into their slots.
  if (!ops::fusion::record_cat(tensors, d, out)) {
    // Each piece copied into its slot of out, a narrowed alias (converting its dtype as it copies).
    const auto copy_pieces = [&](auto copy) {
      int64_t offset = 0;
      for (const Tensor& t : tensors) {
        copy(t, ops::narrow_alias(out, d, offset, t.size(d)));
        offset += t.size(d);
      }
    };
    ops::dispatch(
        "copy", first,
        [&] { copy_pieces([](const Tensor& t, const Tensor& slot) { ops::cpu::copy(t, slot); }); },
        [&] { copy_pieces([](const Tensor& t, const Tensor& slot) { ops::cuda::copy(t, slot); }); });
  }
  if (autograd::needs_grad(tensors)) {
    Shape lengths;
    for (const Tensor& t : tensors) lengths.push_back(t.size(d));
    autograd::record("cat", tensors, {out}, /*save=*/{}, [d, lengths](autograd::BackwardContext& ctx) {
      TensorList grads;
      int64_t offset = 0;
      for (size_t i = 0; i < lengths.size(); ++i) {
        grads.push_back(ctx.needs(i) ? ctx.grad().narrow(d, offset, lengths[i]) : Tensor());
        offset += lengths[i];
      }
      return grads;
    });
  }
  return out;
}

Tensor stack(const TensorList& tensors, int64_t dim) {
  NABLA_CHECK(!tensors.empty(), "stack: expected a non-empty list of tensors");
  for (size_t i = 0; i < tensors.size(); ++i)
    NABLA_CHECK(tensors[i].defined(), "stack: tensor #{} is undefined", i);
  const Tensor& first = tensors[0];
  const int64_t d = wrap_dim(dim, first.dim() + 1, "stack");
  TensorList parts;
  parts.reserve(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    NABLA_CHECK(tensors[i].sizes() == first.sizes(),
                "stack: expected tensors of one shape, got {} (tensor #0) and {} "
                "(tensor #{})",
                describe(first), describe(tensors[i]), i);
    parts.push_back(tensors[i].unsqueeze(d));
  }
  return cat(parts, d);
}

namespace {

// The gradient of x from its pieces' gradients (the split node's backward). Note [Split
// backward]: one node owns every piece, so x's gradient is written once, piece by piece (cat),
// where separate narrow() views each made an x-sized zero buffer that the engine then summed.
// When the pieces' gradients already lie side by side in one buffer, as a kernel that knows
// they are pieces of one tensor writes them (the fused attention backward for q, k, v split
// from one projection), that buffer is the gradient and nothing is copied.
Tensor join_gradients(const TensorList& grads, const Shape& x_sizes, int64_t d) {
  const Tensor& first = grads.front();
  bool side_by_side = true;
  int64_t offset = first.storage_offset();
  for (const Tensor& g : grads) {
    if (g.storage().get() != first.storage().get() || g.strides() != first.strides() ||
        g.storage_offset() != offset) {
      side_by_side = false;
      break;
    }
    offset += g.size(d) * g.stride(d);
  }
  // (With create_graph the pieces carry history that an alias would drop: cat keeps it.)
  if (side_by_side && !GradMode::is_enabled() && is_non_overlapping_and_dense(x_sizes, first.strides())) {
    return ops::alias(first, x_sizes, first.strides(), first.storage_offset());
  }
  return cat(grads, d);
}

// x cut along d into pieces of `sizes` (which sum to x.size(d)): views of x, with one backward
// node for all of them (Note [Split backward]).
TensorList split_views(const Tensor& x, int64_t d, const Shape& sizes) {
  TensorList out;
  int64_t start = 0;
  for (int64_t s : sizes) {
    Shape piece = x.sizes();
    piece[d] = s;
    out.push_back(ops::alias(x, piece, x.strides(), x.storage_offset() + start * x.stride(d)));
    start += s;
  }
  if (autograd::needs_grad({x})) {
    autograd::record("split", {x}, out, {}, [d, x_sizes = x.sizes()](autograd::BackwardContext& ctx) {
      return TensorList{join_gradients(ctx.grads, x_sizes, d)};
    });
    // Views of a tensor that requires grad: in-place writes to them are refused, as for narrow().
    for (Tensor& v : out) v.impl()->autograd_meta().is_view_of_grad_tensor = true;
  }
  return out;
}

}  // namespace

TensorList split(const Tensor& x, int64_t split_size, int64_t dim) {
  ops::check_defined("split", x, "x");
  NABLA_CHECK(x.dim() > 0, "split: expected a tensor of at least 1 dim, got {}", describe(x));
  const int64_t d = wrap_dim(dim, x.dim(), "split");
  const int64_t size = x.size(d);
  NABLA_CHECK(split_size > 0 || (split_size == 0 && size == 0),
              "split: expected a positive split_size, got {} for {}", split_size, describe(x));
  // An empty dim still gives one (empty) piece, as in PyTorch.
  const int64_t pieces = size == 0 ? 1 : (size + split_size - 1) / split_size;
  Shape sizes;
  for (int64_t i = 0; i < pieces; ++i) sizes.push_back(std::min(split_size, size - i * split_size));
  return split_views(x, d, sizes);
}

TensorList split_with_sizes(const Tensor& x, const Shape& sizes, int64_t dim) {
  ops::check_defined("split_with_sizes", x, "x");
  NABLA_CHECK(x.dim() > 0, "split_with_sizes: expected a tensor of at least 1 dim, got {}", describe(x));
  const int64_t d = wrap_dim(dim, x.dim(), "split_with_sizes");
  int64_t total = 0;
  for (int64_t s : sizes) {
    NABLA_CHECK(s >= 0, "split_with_sizes: sizes must be non-negative, got {}", shape_str(sizes));
    total += s;
  }
  NABLA_CHECK(total == x.size(d), "split_with_sizes: sizes {} sum to {}, but dim {} of {} has size {}",
              shape_str(sizes), total, d, describe(x), x.size(d));
  return split_views(x, d, sizes);
}

TensorList chunk(const Tensor& x, int64_t chunks, int64_t dim) {
  ops::check_defined("chunk", x, "x");
  NABLA_CHECK(chunks > 0, "chunk: expected a positive number of chunks, got {}", chunks);
  NABLA_CHECK(x.dim() > 0, "chunk: expected a tensor of at least 1 dim, got {}", describe(x));
  const int64_t d = wrap_dim(dim, x.dim(), "chunk");
  const int64_t size = x.size(d);
  if (size == 0) return split_with_sizes(x, Shape(chunks, 0), d);  // `chunks` empty pieces, as in PyTorch
  return split(x, (size + chunks - 1) / chunks, d);
}

Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index) {
  check_index_tensor("index_select", x, index);
  NABLA_CHECK(index.dim() <= 1, "index_select: expected a 1-d index, got {}", describe(index));
  const int64_t d = wrap_dim(dim, x.dim(), "index_select");
  Shape out_sizes(x.sizes());
  out_sizes[d] = index.numel();
  Tensor out = Tensor::empty(out_sizes, x.options());
  check_index_values("index_select", index, x, d);
  ops::dispatch(
      "index_select", x, [&] { ops::cpu::index_select(x, d, index, out); },
      [&] { ops::cuda::index_select(x, d, index, out); });
  if (autograd::needs_grad({x})) {
    autograd::record("index_select", {x}, {out}, /*save=*/{index},
                     [d, sizes = x.sizes()](autograd::BackwardContext& ctx) {
                       const Tensor& g = ctx.grad();
                       return TensorList{index_add(zeros(sizes, g.options()), d, ctx.saved[0], g)};
                     });
  }
  return out;
}

Tensor gather(const Tensor& x, int64_t dim, const Tensor& index) {
  check_index_tensor("gather", x, index);
  NABLA_CHECK(index.dim() == x.dim(), "gather: expected an index with the {} dims of x {}, got {}", x.dim(),
              describe(x), describe(index));
  const int64_t d = wrap_dim(dim, x.dim(), "gather");
  for (int64_t k = 0; k < x.dim(); ++k) {
    NABLA_CHECK(
        k == d || index.size(k) <= x.size(k),
        "gather: index {} is larger than x {} in dim {} (expected index.size(k) <= x.size(k) for k != {})",
        describe(index), describe(x), k, d);
  }
  Tensor out = Tensor::empty(index.sizes(), x.options());
  check_index_values("gather", index, x, d);
  ops::dispatch(
      "gather", x, [&] { ops::cpu::gather(x, d, index, out); }, [&] { ops::cuda::gather(x, d, index, out); });
  if (autograd::needs_grad({x})) {
    autograd::record("gather", {x}, {out}, /*save=*/{index},
                     [d, sizes = x.sizes()](autograd::BackwardContext& ctx) {
                       const Tensor& g = ctx.grad();
                       return TensorList{scatter_add(zeros(sizes, g.options()), d, ctx.saved[0], g)};
                     });
  }
  return out;
}

Tensor index_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& source) {
  check_index_tensor("index_add", x, index);
  ops::check_defined("index_add", source, "source");
  ops::check_same_device("index_add", {x, source});
  NABLA_CHECK(index.dim() <= 1, "index_add: expected a 1-d index, got {}", describe(index));
  NABLA_CHECK(source.dtype() == x.dtype(), "index_add: expected source of x's dtype, got x {} and source {}",
              describe(x), describe(source));
  const int64_t d = wrap_dim(dim, x.dim(), "index_add");
  Shape expected(x.sizes());
  expected[d] = index.numel();
  NABLA_CHECK(source.sizes() == expected,
              "index_add: expected source of shape {} (x {} with dim {} sized by the {} indices), got {}",
              shape_str(expected), describe(x), d, index.numel(), describe(source));
  check_index_values("index_add", index, x, d);
  Tensor out = accumulation_base(x);
  ops::dispatch(
      "index_add_", x, [&] { ops::cpu::index_add_(out, d, index, source); },
      [&] { ops::cuda::index_add_(out, d, index, source); });
  if (autograd::needs_grad({x, source})) {
    autograd::record("index_add", {x, source}, {out}, /*save=*/{index}, [d](autograd::BackwardContext& ctx) {
      const Tensor& g = ctx.grad();
      return TensorList{ctx.needs(0) ? g : Tensor(),
                        ctx.needs(1) ? index_select(g, d, ctx.saved[0]) : Tensor()};
    });
  }
  return out;
}

Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
  check_index_tensor("scatter_add", x, index);
  ops::check_defined("scatter_add", src, "src");
  ops::check_same_device("scatter_add", {x, src});
  NABLA_CHECK(src.dtype() == x.dtype(), "scatter_add: expected src of x's dtype, got x {} and src {}",
              describe(x), describe(src));
  NABLA_CHECK(index.dim() == x.dim() && src.dim() == x.dim(),
              "scatter_add: expected x, index and src of one rank, got x {}, index {} and src {}",
              describe(x), describe(index), describe(src));
  const int64_t d = wrap_dim(dim, x.dim(), "scatter_add");
  for (int64_t k = 0; k < x.dim(); ++k) {
    NABLA_CHECK(index.size(k) <= src.size(k) && (k == d || index.size(k) <= x.size(k)),
                "scatter_add: index {} is larger than src {} or x {} in dim {} (expected index.size(k) <= "
                "src.size(k), and <= x.size(k) for k != {})",
                describe(index), describe(src), describe(x), k, d);
  }
  check_index_values("scatter_add", index, x, d);
  Tensor out = accumulation_base(x);
  ops::dispatch(
      "scatter_add_", x, [&] { ops::cpu::scatter_add_(out, d, index, src); },
      [&] { ops::cuda::scatter_add_(out, d, index, src); });
  if (autograd::needs_grad({x, src})) {
    autograd::record("scatter_add", {x, src}, {out}, /*save=*/{index},
                     [d, src_sizes = src.sizes()](autograd::BackwardContext& ctx) {
                       const Tensor& g = ctx.grad();
                       return TensorList{
                           ctx.needs(0) ? g : Tensor(),
                           ctx.needs(1) ? pad_to(gather(g, d, ctx.saved[0]), src_sizes) : Tensor()};
                     });
  }
  return out;
}

namespace {

// Checks index_copy's operands and returns the wrapped dim: source is x with dim sized by the index.
int64_t check_index_copy(const char* op, const Tensor& x, int64_t dim, const Tensor& index,
                         const Tensor& source) {
  check_index_tensor(op, x, index);
  ops::check_defined(op, source, "source");
  ops::check_same_device(op, {x, source});
  NABLA_CHECK(index.dim() <= 1, "{}: expected a 1-d index, got {}", op, describe(index));
  NABLA_CHECK(source.dtype() == x.dtype(), "{}: expected source of x's dtype, got x {} and source {}", op,
              describe(x), describe(source));
  const int64_t d = wrap_dim(dim, x.dim(), op);
  Shape expected(x.sizes());
  expected[d] = index.numel();
  NABLA_CHECK(source.sizes() == expected,
              "{}: expected source of shape {} (x {} with dim {} sized by the {} indices), got {}", op,
              shape_str(expected), describe(x), d, index.numel(), describe(source));
  check_index_values(op, index, x, d);
  return d;
}

// index_copy_ writes x in place: x must not repeat elements (an expanded view) nor share memory
// with source, or the writes would race on CUDA and depend on their order on the CPU.
void check_writable(const char* op, const Tensor& x, const Tensor& source) {
  for (int64_t k = 0; k < x.dim(); ++k) {
    NABLA_CHECK(x.stride(k) != 0 || x.size(k) <= 1,
                "{}: x {} repeats its elements along dim {} (stride 0, an expanded view); write into a "
                "tensor that owns each element (clone() it)",
                op, describe(x), k);
  }
  NABLA_CHECK(x.storage().get() != source.storage().get(),
              "{}: source shares x's memory; pass a copy (source.clone())", op);
}

void write_index_copy(const Tensor& out, int64_t d, const Tensor& index, const Tensor& source) {
  ops::dispatch(
      "index_copy_", out, [&] { ops::cpu::index_copy_(out, d, index, source); },
      [&] { ops::cuda::index_copy_(out, d, index, source); });
}

}  // namespace

Tensor index_copy(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& source) {
  const int64_t d = check_index_copy("index_copy", x, dim, index, source);
  Tensor out = accumulation_base(x);
  write_index_copy(out, d, index, source);
  if (autograd::needs_grad({x, source})) {
    // x's gradient is the output's with the overwritten slices zeroed; source's, those slices.
    autograd::record("index_copy", {x, source}, {out}, /*save=*/{index},
                     [d, source_sizes = source.sizes()](autograd::BackwardContext& ctx) {
                       const Tensor& g = ctx.grad();
                       const Tensor& i = ctx.saved[0];
                       return TensorList{
                           ctx.needs(0) ? index_copy(g, d, i, zeros(source_sizes, g.options())) : Tensor(),
                           ctx.needs(1) ? index_select(g, d, i) : Tensor()};
                     });
  }
  return out;
}

Tensor& index_copy_(Tensor& x, int64_t dim, const Tensor& index, const Tensor& source) {
  const int64_t d = check_index_copy("index_copy_", x, dim, index, source);
  check_writable("index_copy_", x, source);
  autograd::check_inplace(x, "index_copy_");
  if (autograd::needs_grad({x, source})) {
    // Recorded as the out-of-place op, whose result x takes over (value and history).
    return ops::commit_in_place(x, index_copy(x, d, index, source));
  }
  write_index_copy(x, d, index, source);
  x.bump_version();
  return x;
}

}  // namespace nabla
