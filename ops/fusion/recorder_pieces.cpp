// The recorder's pieces and slices: cat computed in place, a slice's gradient as pieces with zeros
// around it, sums of such gradients piece by piece, and slices of held results computed again
// for the slice. The rest of the Recorder's members are in recorder.cpp and recorder_held.cpp.
#include <algorithm>
#include <functional>
#include <set>
#include <unordered_map>
#include <utility>

#include "nabla/core/cuda/stream.h"
#include "nabla/core/dispatch.h"
#include "nabla/core/error.h"
#include "nabla/ops/detail/alias.h"
#include "nabla/ops/fusion/recorder.h"

namespace nabla::ops::fusion {

// Note [Concatenation in place]: cat copies each piece into its slot of a fresh output. When a
// piece is a held result (rotary embedding's two rotated halves, say), the copy is recorded as
// a cast into that slot (a view of the output) and fuses into the piece's group: the group
// stores the piece straight into the output, and the piece itself, which nobody reads after
// cat, is never written. A slot is live out through the output's storage. Reading the output
// afterwards (through its own tensor, not a slot) flushes first, as any other view of a held
// result does, so it is complete by then. A cast of the whole output (rotary's `.to(x.dtype())`)
// is recorded as casts of its pieces into the slots of the cast's output instead, so the group
// stores the cast pieces and the uncast output is not written either unless someone holds it.
bool Recorder::cat(const TensorList& inputs, int64_t dim, const Tensor& out) {
  if (flushing_ || nabla::detail::t_dispatch_depth > 0 || !out.is_cuda() || out.numel() == 0) return false;
  bool held = false;
  for (const Tensor& t : inputs) {
    if (t.device() != out.device()) return false;
    const int v = result_of(t);
    held = held || (v >= 0 && region_.value(v).producer >= 0);
  }
  if (!held) return false;  // nothing to gain over the copies
  const int flushes = stats_.flushes;
  bool piecewise = true;
  CatRecord record{.out = out.impl_ptr(), .dim = dim, .pieces = {}};
  int64_t offset = 0;
  for (const Tensor& t : inputs) {
    const Tensor slot = narrow_alias(out, dim, offset, t.size(dim));
    if (t.numel() > 0) {
      // Cannot refuse now: the checks above are cast's, and they hold for every piece.
      const size_t before = slots_.size();
      NABLA_ASSERT(cast(t, slot), "recorder: a piece of cat was refused after the checks");
      // A piece that is itself a cat (or its cast) was recorded as several values: this output
      // cannot be cast piecewise then (its record would name one of them).
      if (slots_.size() != before + 1) piecewise = false;
      record.pieces.emplace_back(static_cast<int>(slots_.size()) - 1, offset);
    }
    offset += t.size(dim);
  }
  // Only a cat whose pieces all sit in this region (no flush came between them) can be cast piecewise.
  if (piecewise && stats_.flushes == flushes) cats_[out.impl()] = std::move(record);
  return true;
}

bool Recorder::cast_pieces(const CatRecord& cat, const Tensor& out) {
  if (flushing_ || nabla::detail::t_dispatch_depth > 0 || !out.is_cuda() || out.device() != device_ ||
      !(stream_ == nabla::cuda::current_stream(out.device().index)) ||
      region_.ops().size() + cat.pieces.size() > kMaxHeldOps) {
    return false;
  }
  CatRecord next{.out = out.impl_ptr(), .dim = cat.dim, .pieces = {}};
  for (const auto& [v, offset] : cat.pieces) {
    const int64_t length = region_.value(v).sizes[static_cast<size_t>(cat.dim)];
    add({.kind = OpKind::Cast, .args = {v}}, narrow_alias(out, cat.dim, offset, length));
    next.pieces.emplace_back(static_cast<int>(slots_.size()) - 1, offset);
  }
  cats_[out.impl()] = std::move(next);
  return true;
}

// Note [Padded slices]: a slice's gradient is zeros with the slice's gradient written at the
// slice (slice_backward in ops/view.cpp). When that gradient is a held result, the zeros and the
// copy are recorded as the pieces of the output, as a cat's are: fills around a copy of g into
// its slot. Nothing is written unless someone reads the output. The sum autograd makes of two
// such gradients of one tensor (rotary embedding's two halves, each sliced from q) is recorded
// piece by piece (binary_pieces): each slot of the sum is the sum of the two pieces there, so
// q's gradient is one fused kernel storing each half where it belongs, and the padded gradients,
// which nobody reads after the sum, are never written. The sum adds the zeros as eager mode
// does, so the bits are those of eager mode (-0 + 0 is +0).
bool Recorder::pad(const Tensor& g, int64_t dim, int64_t start, const Tensor& out) {
  if (flushing_ || nabla::detail::t_dispatch_depth > 0 || !out.is_cuda() || g.numel() == 0 ||
      g.dtype() != out.dtype() || g.dim() != out.dim() || region_.ops().size() + 3 > kMaxHeldOps) {
    return false;
  }
  for (int64_t d = 0; d < g.dim(); ++d) {
    if (d != dim && g.size(d) != out.size(d)) return false;
  }
  const int v = result_of(g);
  if (v < 0 || region_.value(v).producer < 0) return false;    // only a held result gains
  if (!accepts({&g}, out) || result_of(g) != v) return false;  // accepts may have flushed
  const int64_t length = g.size(dim), n = out.size(dim);
  CatRecord record{.out = out.impl_ptr(), .dim = dim, .pieces = {}};
  const auto piece = [&](Op op, int64_t from, int64_t to) {
    if (to <= from) return;
    add(std::move(op), narrow_alias(out, dim, from, to - from));
    record.pieces.emplace_back(static_cast<int>(slots_.size()) - 1, from);
  };
  piece({.kind = OpKind::Fill, .params = {.a = 0.0}, .args = {}}, 0, start);
  piece({.kind = OpKind::Cast, .args = {v}}, start, start + length);
  piece({.kind = OpKind::Fill, .params = {.a = 0.0}, .args = {}}, start + length, n);
  cats_[out.impl()] = std::move(record);
  return true;
}

const Recorder::CatRecord* Recorder::pieces_of(const Tensor& t) const {
  const auto it = cats_.find(t.impl());
  if (it == cats_.end() || it->second.out.lock().get() != t.impl()) return nullptr;
  return &it->second;
}

bool Recorder::binary_pieces(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out, double alpha) {
  const CatRecord* ra = pieces_of(a);
  const CatRecord* rb = pieces_of(b);
  if (ra == nullptr || rb == nullptr || ra->dim != rb->dim || ra->pieces.size() != rb->pieces.size() ||
      a.sizes() != out.sizes() || b.sizes() != out.sizes() || flushing_ ||
      nabla::detail::t_dispatch_depth > 0 || !out.is_cuda() || out.device() != device_ ||
      !(stream_ == nabla::cuda::current_stream(out.device().index)) ||
      region_.ops().size() + ra->pieces.size() > kMaxHeldOps) {
    return false;
  }
  const int64_t dim = ra->dim;
  const auto length = [&](int v) { return region_.value(v).sizes[static_cast<size_t>(dim)]; };
  for (size_t i = 0; i < ra->pieces.size(); ++i) {
    const auto [va, oa] = ra->pieces[i];
    const auto [vb, ob] = rb->pieces[i];
    if (oa != ob || length(va) != length(vb)) return false;
  }
  CatRecord next{.out = out.impl_ptr(), .dim = dim, .pieces = {}};
  const CatRecord pa = *ra, pb = *rb;  // copies: cats_ grows below
  for (size_t i = 0; i < pa.pieces.size(); ++i) {
    const auto [va, offset] = pa.pieces[i];
    const int vb = pb.pieces[i].first;
    add({.kind = OpKind::Binary, .binary = op, .alpha = alpha, .args = {va, vb}},
        narrow_alias(out, dim, offset, length(va)));
    next.pieces.emplace_back(static_cast<int>(slots_.size()) - 1, offset);
  }
  cats_[out.impl()] = std::move(next);
  return true;
}

namespace {
// Dense strides for `sizes`, the dims in the order `like` lays them out (outermost: the largest
// stride): a slice's intermediate, if the executor must make it, takes only the slice's memory.
Shape dense_in_order_of(const Shape& sizes, const Shape& like) {
  std::vector<size_t> order(sizes.size());
  for (size_t d = 0; d < order.size(); ++d) order[d] = d;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return like[a] > like[b]; });
  Shape strides(sizes.size(), 1);
  int64_t next = 1;
  for (size_t i = order.size(); i-- > 0;) {
    strides[order[i]] = next;
    next *= std::max<int64_t>(sizes[order[i]], 1);
  }
  return strides;
}
}  // namespace

// Note [Slices of held results]: cat's backward hands each piece of its gradient on as a slice,
// and rotary embedding's backward reads its cast gradient through two halves. A fused kernel
// cannot read another kernel's register through a slice, so such a read used to write the whole
// result first (a flush). Instead, the ops computing the result are recorded again over the
// slice: each region input narrowed as the slice is (an input broadcast along the sliced dim is
// read as it is), each op the same with its arguments so narrowed. The slice's values are then
// computed in the reader's kernel, by the same formulas on the same inputs, so the bits are the
// same, and the whole result is never written unless someone still holds it. Chains of at most
// kMaxPushedOps ops, without reductions; a slice along one dim (a narrow). The same layout and
// expands are push_down_expand's (above).
namespace {
constexpr int kMaxPushedOps = 16;
}  // namespace

bool Recorder::viewed_result(size_t w, const Tensor& t) const {
  const Slot& slot = slots_[w];
  const Value& value = region_.value(static_cast<int>(w));
  return value.producer >= 0 && !slot.tensor.defined() && value.dtype == t.dtype() &&
         value.sizes.size() == t.sizes().size() && slot.storage.lock() == t.storage();
}

// A held result read through an expand of it (a mean's or a sum's backward with keepdim,
// `(g * scale).expand(sizes)`; RMSNorm's backward through its statistic): the reader broadcasts
// the result as the IR's ops broadcast size-1 dims, so the expanded view is recorded as a copy of
// the result in registers, and the norm's backward stays in one region. Same rank only (the IR
// aligns dims from the right, so a result with dims dropped would line up wrongly).
bool Recorder::push_down_expand(const Tensor& t) {
  if (region_.ops().size() + 1 >= kMaxHeldOps) return false;
  for (size_t w = 0; w < slots_.size(); ++w) {
    const Value& value = region_.value(static_cast<int>(w));
    if (!viewed_result(w, t) || slots_[w].offset != t.storage_offset()) continue;
    bool expands = true;
    for (size_t d = 0; d < value.sizes.size() && expands; ++d) {
      const auto k = static_cast<int64_t>(d);
      if (value.sizes[d] == t.size(k)) {
        expands = t.size(k) == 1 || t.stride(k) == value.strides[d];
      } else {
        expands = value.sizes[d] == 1 && t.stride(k) == 0;
      }
    }
    if (!expands) continue;
    // Never live out: the result it copies is written whenever its storage (t's) is held, so t's
    // memory is right then without a broadcast store. So the slot names t but not its storage,
    // and by_storage_ keeps naming the result.
    const int v =
        add_virtual({.kind = OpKind::Cast, .args = {static_cast<int>(w)}}, t.dtype(), t.sizes(), t.strides());
    slots_[static_cast<size_t>(v)].impl = t.impl_ptr();
    by_impl_[t.impl()] = v;
    return true;
  }
  return false;
}

bool Recorder::push_down(const Tensor& t) {
  if (t.dim() == 0) return false;
  if (push_down_expand(t)) return true;
  // The held result t narrows along one dim (the same layout is an expand, above).
  int u = -1;
  int64_t dim = -1, start = 0;
  for (size_t w = 0; w < slots_.size() && u < 0; ++w) {
    const Value& value = region_.value(static_cast<int>(w));
    if (!viewed_result(w, t) || value.strides != t.strides()) continue;
    int64_t d = -1;
    bool fits = true;
    for (size_t k = 0; k < value.sizes.size(); ++k) {
      if (value.sizes[k] == t.size(static_cast<int64_t>(k))) continue;
      fits = fits && d < 0 && t.size(static_cast<int64_t>(k)) < value.sizes[k];
      d = static_cast<int64_t>(k);
    }
    if (!fits || d < 0) continue;
    const int64_t delta = t.storage_offset() - slots_[w].offset;
    const int64_t stride = value.strides[static_cast<size_t>(d)];
    if (stride <= 0 || delta % stride != 0 || delta / stride < 0 ||
        delta / stride > value.sizes[static_cast<size_t>(d)] - t.size(d)) {
      continue;
    }
    start = delta / stride;
    u = static_cast<int>(w);
    dim = d;
  }
  // Room for the chain and the op reading the slice.
  if (u < 0 || region_.ops().size() + kMaxPushedOps >= kMaxHeldOps) return false;
  const auto rank = static_cast<int64_t>(region_.value(u).sizes.size());
  const int64_t full = region_.value(u).sizes[static_cast<size_t>(dim)], length = t.size(dim);
  // The dim of value w that the slice narrows, or -1 where w is the same for every slice.
  const auto sliced_dim = [&](int w) -> int64_t {
    const Value& value = region_.value(w);
    const int64_t k = dim - (rank - static_cast<int64_t>(value.sizes.size()));
    return k < 0 || value.sizes[static_cast<size_t>(k)] == 1 ? -1 : k;
  };
  // First whether the chain can be recorded again, then recording it: nothing half done.
  std::set<int> seen;
  int ops = 0;
  std::function<bool(int)> fits = [&](int w) {
    const int64_t k = sliced_dim(w);
    if (k < 0 || !seen.insert(w).second) return true;
    const Value& value = region_.value(w);
    if (value.sizes[static_cast<size_t>(k)] != full) return false;
    if (value.producer < 0) return slots_[static_cast<size_t>(w)].tensor.defined();
    const Op& op = region_.op(value.producer);
    if (op.kind == OpKind::Reduce || ++ops > kMaxPushedOps) return false;
    return std::all_of(op.args.begin(), op.args.end(), fits);
  };
  if (!fits(u)) return false;
  std::unordered_map<int, int> sliced;
  std::function<int(int)> slice_of = [&](int w) -> int {
    const int64_t k = sliced_dim(w);
    if (k < 0) return w;
    if (const auto it = sliced.find(w); it != sliced.end()) return it->second;
    const Value value = region_.value(w);  // a copy: values grow below
    int result = -1;
    if (value.producer < 0) {
      result = value_of(narrow_alias(slots_[static_cast<size_t>(w)].tensor, k, start, length));
    } else {
      Op op = region_.op(value.producer);
      for (int& a : op.args) a = slice_of(a);
      if (w == u) {
        add(std::move(op), t);
        result = static_cast<int>(slots_.size()) - 1;
      } else {
        Shape sizes = value.sizes;
        sizes[static_cast<size_t>(k)] = length;
        result = add_virtual(std::move(op), value.dtype, sizes, dense_in_order_of(sizes, value.strides));
      }
    }
    sliced[w] = result;
    return result;
  };
  slice_of(u);
  return true;
}

int Recorder::add_virtual(Op op, DType dtype, const Shape& sizes, const Shape& strides) {
  const int v = region_.add(std::move(op), dtype, sizes, strides);
  slots_.push_back({});  // no tensor holds it: never live out
  ++stats_.recorded_ops;
  return v;
}

}  // namespace nabla::ops::fusion
