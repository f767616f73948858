#include "nabla/ops/fusion/region.h"

#include <algorithm>

#include <fmt/format.h>

#include "nabla/core/error.h"
#include "nabla/ops/detail/op_kinds.h"

namespace nabla::ops::fusion {

namespace {

bool storable(DType t) {
  return t == kFloat32 || t == kFloat16 || t == kBFloat16 || t == kFloat64 || t == kBool;
}

}  // namespace

int Region::input(DType dtype, Shape sizes, Shape strides) {
  if (strides.empty()) strides = contiguous_strides(sizes);
  NABLA_ASSERT(strides.size() == sizes.size(), "fusion::Region::input: {} strides for {} sizes",
               strides.size(), sizes.size());
  values_.push_back({.dtype = dtype, .sizes = std::move(sizes), .strides = std::move(strides)});
  return static_cast<int>(values_.size()) - 1;
}

int Region::add(Op op, DType dtype, Shape sizes, Shape strides) {
  for (int a : op.args) {
    NABLA_ASSERT(a >= 0 && a < static_cast<int>(values_.size()), "fusion::Region::add: no value %{}", a);
  }
  if (strides.empty()) strides = contiguous_strides(sizes);
  const int result = static_cast<int>(values_.size());
  op.result = result;
  values_.push_back({.dtype = dtype,
                     .sizes = std::move(sizes),
                     .strides = std::move(strides),
                     .producer = static_cast<int>(ops_.size())});
  ops_.push_back(std::move(op));
  return result;
}

int Region::unary(UnaryOp op, int x, UnaryParams params) {
  const Value& v = value(x);
  return add({.kind = OpKind::Unary, .unary = op, .params = params, .args = {x}},
             is_comparison(op) ? kBool : v.dtype, v.sizes);
}

int Region::binary(BinaryOp op, int a, int b, double alpha) {
  const Value &va = value(a), &vb = value(b);
  DType dtype = va.dtype == vb.dtype ? va.dtype : kFloat32;  // a mixed float pair computes in float32
  if (is_comparison(op)) dtype = kBool;
  return add({.kind = OpKind::Binary, .binary = op, .alpha = alpha, .args = {a, b}}, dtype,
             broadcast_shapes(va.sizes, vb.sizes, "fusion::Region::binary"));
}

int Region::where(int cond, int a, int b) {
  Shape sizes = broadcast_shapes(value(cond).sizes, value(a).sizes, "fusion::Region::where");
  sizes = broadcast_shapes(sizes, value(b).sizes, "fusion::Region::where");
  return add({.kind = OpKind::Where, .args = {cond, a, b}}, value(a).dtype, sizes);
}

int Region::cast(int x, DType dtype) {
  return add({.kind = OpKind::Cast, .args = {x}}, dtype, value(x).sizes);
}

int Region::fill(double value, DType dtype, Shape sizes) {
  return add({.kind = OpKind::Fill, .params = {.a = value}, .args = {}}, dtype, std::move(sizes));
}

int Region::reduce(int x, Shape dims, bool keepdim, bool mean) {
  const Value& v = value(x);
  Shape sizes;
  for (size_t d = 0; d < v.sizes.size(); ++d) {
    const bool reduced = std::find(dims.begin(), dims.end(), static_cast<int64_t>(d)) != dims.end();
    if (!reduced) {
      sizes.push_back(v.sizes[d]);
    } else if (keepdim) {
      sizes.push_back(1);
    }
  }
  return add({.kind = OpKind::Reduce, .dims = std::move(dims), .mean = mean, .args = {x}}, v.dtype,
             std::move(sizes));
}

void Region::detach(int value) {
  Value& v = values_.at(static_cast<size_t>(value));
  if (v.producer < 0) return;
  const int dropped = v.producer;
  ops_.erase(ops_.begin() + dropped);
  v.producer = -1;
  for (Value& w : values_) {
    if (w.producer > dropped) --w.producer;
  }
}

void Region::clear() {
  values_.clear();
  ops_.clear();
}

const char* compute_type_name(DType dtype) {
  if (dtype == kBool) return "bool";
  if (dtype == kFloat64) return "double";
  return "float";
}

bool fusible(const Region& region, const Op& op) {
  const Value& out = region.value(op.result);
  if (!storable(out.dtype)) return false;
  for (int a : op.args) {
    if (!storable(region.value(a).dtype)) return false;
  }
  const auto arg = [&](size_t k) -> const Value& { return region.value(op.args.at(k)); };
  switch (op.kind) {
    case OpKind::Unary:
      // Scalar comparisons read any floating input; the rest compute in the input's dtype.
      if (!is_floating(arg(0).dtype)) return false;
      return is_comparison(op.unary) ? out.dtype == kBool : out.dtype == arg(0).dtype;
    case OpKind::Binary: {
      const DType a = arg(0).dtype, b = arg(1).dtype;
      if (a != b) return is_mixed_float_pair(op.binary, a, b) && out.dtype == kFloat32;
      if (a == kBool) return is_logical_op(op.binary) && out.dtype == kBool;
      return is_comparison(op.binary) ? out.dtype == kBool : out.dtype == a;
    }
    case OpKind::Where:
      return arg(0).dtype == kBool && arg(1).dtype == out.dtype && arg(2).dtype == out.dtype;
    case OpKind::Cast:
      return true;
    case OpKind::Reduce:
      return is_floating(arg(0).dtype) && out.dtype == arg(0).dtype;
    case OpKind::Fill:
      return true;
  }
  return false;
}

std::string describe(const Region& region, const Op& op) {
  std::string what;
  switch (op.kind) {
    case OpKind::Unary:
      what = name(op.unary);
      break;
    case OpKind::Binary:
      what = name(op.binary);
      break;
    case OpKind::Where:
      what = "where";
      break;
    case OpKind::Cast:
      what = "cast";
      break;
    case OpKind::Reduce:
      what = op.mean ? "mean" : "sum";
      break;
    case OpKind::Fill:
      what = "fill";
      break;
  }
  std::string args;
  for (int a : op.args) args += fmt::format("{}%{}", args.empty() ? "" : ", ", a);
  if (op.kind == OpKind::Reduce) args += fmt::format(", dims {}", shape_str(op.dims));
  if (op.kind == OpKind::Fill) args = fmt::format("{}", op.params.a);
  const Value& out = region.value(op.result);
  return fmt::format("%{} = {}({}) {}{}", op.result, what, args, dtype_name(out.dtype), shape_str(out.sizes));
}

std::optional<ReduceLayout> reduce_layout(const Value& in, const Shape& dims, const Shape& out_sizes,
                                          const Shape& out_strides) {
  const auto nd = static_cast<int64_t>(in.sizes.size());
  if (!is_floating(in.dtype) || nd == 0 || dims.empty()) return std::nullopt;
  const std::vector<bool> reduced = reduced_mask(nd, dims);
  std::optional<ReduceLayout> layout =
      plan_reduce_layout_in_place(in.sizes, in.strides, reduced, ReduceBlock::two_runs);
  if (!layout || layout->reduce_size() == 0 || layout->outputs() == 0) return std::nullopt;
  if (layout->a > 1 && layout->i == 1 && layout->b >= 128) return std::nullopt;  // two stages
  // The result, contiguous over the kept dims (with or without the reduced ones as size 1),
  // must be where the kernel writes output k: at k.
  Shape kept_sizes;
  for (int64_t d = 0; d < nd; ++d) {
    if (!reduced[static_cast<size_t>(d)]) kept_sizes.push_back(in.sizes[static_cast<size_t>(d)]);
  }
  if (out_sizes.size() != kept_sizes.size() && out_sizes.size() != in.sizes.size()) return std::nullopt;
  if (out_strides != contiguous_strides(out_sizes)) return std::nullopt;
  const Shape kept_strides = contiguous_strides(kept_sizes);
  size_t k = 0;
  for (int64_t d = 0; d < nd; ++d) {
    if (reduced[static_cast<size_t>(d)]) continue;
    if (kept_sizes[k] != 1 && layout->out_strides[static_cast<size_t>(d)] != kept_strides[k])
      return std::nullopt;
    ++k;
  }
  return layout;
}

std::optional<ReduceLayout> reduce_layout(const Region& region, const Op& op) {
  if (op.kind != OpKind::Reduce) return std::nullopt;
  const Value& out = region.value(op.result);
  return reduce_layout(region.value(op.args.at(0)), op.dims, out.sizes, out.strides);
}

std::string Region::dump() const {
  std::string s;
  for (const Op& op : ops_) {
    s += describe(*this, op);
    if (value(op.result).live_out) s += " live-out";
    s += '\n';
  }
  return s;
}

}  // namespace nabla::ops::fusion
