#include "nabla/ops/fusion/codegen.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <optional>

#include <fmt/format.h>

#include "nabla/core/error.h"
#include "nabla/ops/detail/iteration.h"
#include "nabla/ops/detail/op_kinds.h"
#include "nabla/ops/fusion/codegen_writer.h"

namespace nabla::ops::fusion {

// Note [Generated kernels]: a fused group becomes one grid-stride loop over its elements. Each
// thread turns its linear index into coordinates of the coalesced iteration (coalesce_dims,
// shared with the eager kernels), loads its inputs, computes every op of the group with the
// formulas the eager kernels use (detail/elementwise_formulas.h, included through the prelude),
// and stores the group's outputs. Two rules keep a fused kernel's results bitwise equal to the
// eager kernels':
//   - a 16-bit value read again inside the kernel is rounded to its dtype first (rnd_f16,
//     rnd_bf16), as eager mode's store and reload would;
//   - no multiply and add are contracted into an FMA: NVRTC compiles with --fmad=false, as nvcc
//     does the eager pointwise kernels (ops/CMakeLists.txt). An empty asm statement between two
//     ops does not suffice: it hides the value from NVVM, not from ptxas, which contracts a
//     mul.f32 in one op with an add.f32 in the next (seen on the H200). The math library's own
//     FMAs are explicit and run either way.

namespace codegen_detail {

const char* type_suffix(DType dtype) {
  switch (dtype) {
    case kFloat32:
      return "f32";
    case kFloat16:
      return "f16";
    case kBFloat16:
      return "bf16";
    case kFloat64:
      return "f64";
    case kBool:
      return "b8";
    default:
      NABLA_ASSERT(false, "fusion codegen: dtype {} reached the code generator", dtype_name(dtype));
  }
}

std::string double_literal(double x) {
  if (std::isfinite(x)) return fmt::format("{:a}", x);
  return fmt::format("__longlong_as_double(0x{:016x}ULL)", std::bit_cast<uint64_t>(x));
}

std::string scalar_as(const char* c, double x) {
  return fmt::format("static_cast<{}>({})", c, double_literal(x));
}

std::string enum_arg(const char* type, int index, const char* name) {
  return fmt::format("{}({}) /* {} */", type, index, name);
}

void Writer::line(int indent, const std::string& s) {
  text_.append(static_cast<size_t>(indent), ' ');
  text_ += s;
  text_ += '\n';
}

void Writer::coordinate_lines(int indent, const char* suffix) {
  line(indent, fmt::format("{} r = {};", index_type_, index_));
  for (size_t d = dims_.sizes.size(); d-- > 0;) {
    if (d == 0) {
      line(indent, fmt::format("const {} c0 = r;", index_type_));
    } else {
      line(indent,
           fmt::format("const {0} c{1} = r % {2}{3};  r /= {2}{3};", index_type_, d, dims_.sizes[d], suffix));
    }
  }
}

std::string Writer::load_line(const std::vector<int>& operands, size_t k, const std::string& at) const {
  const Value& v = region_.value(operands[k]);
  return fmt::format("const {} v{} = ld_{}(p.p[{}], {});", compute_type_name(v.dtype), operands[k],
                     type_suffix(v.dtype), k, at);
}

std::string Writer::store_line(const std::vector<int>& operands, size_t k, const std::string& at) const {
  const Value& v = region_.value(operands[k]);
  return fmt::format("st_{}(p.p[{}], {}, v{});", type_suffix(v.dtype), k, at, operands[k]);
}

std::string Writer::aligned_check(const std::vector<int>& operands, const std::vector<bool>& wide) const {
  std::string aligned;
  for (size_t k = 0; k < operands.size(); ++k) {
    if (!wide[k]) continue;
    const size_t bytes = std::min<size_t>(16, 4 * itemsize(region_.value(operands[k]).dtype));
    aligned += fmt::format("{}aligned(p.p[{}], {})", aligned.empty() ? "" : " && ", k, bytes);
  }
  return aligned.empty() ? "true" : aligned;
}

void Writer::four_wide(int indent, const std::vector<int>& operands, size_t n_out,
                       const std::vector<bool>& wide, const std::vector<std::string>& at,
                       const std::vector<std::string>& compute, const std::vector<bool>& use,
                       const std::string& per_element) {
  const auto type_of = [&](size_t k) { return compute_type_name(region_.value(operands[k]).dtype); };
  const auto suffix_of = [&](size_t k) { return type_suffix(region_.value(operands[k]).dtype); };
  for (size_t k = n_out; k < operands.size(); ++k) {
    if (!use[k]) continue;
    if (wide[k]) {
      line(indent,
           fmt::format("{} x{}[4];  ld4_{}(p.p[{}], {}, x{});", type_of(k), k, suffix_of(k), k, at[k], k));
    } else {
      line(indent, load_line(operands, k, at[k]));
    }
  }
  for (size_t k = 0; k < n_out; ++k) {
    if (use[k]) line(indent, fmt::format("{} y{}[4];", type_of(k), k));
  }
  line(indent, "#pragma unroll");
  line(indent, "for (int j = 0; j < 4; ++j) {");
  for (size_t k = n_out; k < operands.size(); ++k) {
    if (use[k] && wide[k])
      line(indent + 2, fmt::format("const {} v{} = x{}[j];", type_of(k), operands[k], k));
  }
  for (const std::string& c : compute) line(indent + 2, c);
  for (size_t k = 0; k < n_out; ++k) {
    if (use[k]) line(indent + 2, fmt::format("y{}[j] = v{};", k, operands[k]));
  }
  if (!per_element.empty()) line(indent + 2, per_element);
  line(indent, "}");
  for (size_t k = 0; k < n_out; ++k) {
    if (use[k]) line(indent, fmt::format("st4_{}(p.p[{}], {}, y{});", suffix_of(k), k, at[k], k));
  }
}

bool needs_coordinates(const std::vector<std::string>& offsets, const std::vector<bool>& use) {
  for (size_t k = 0; k < offsets.size(); ++k) {
    if (use[k] && !offsets[k].empty() && offsets[k] != "e" && offsets[k] != "0") return true;
  }
  return false;
}

bool Writer::wide_operands(const std::vector<std::string>& offsets, const std::vector<bool>& use,
                           size_t n_out, bool coordinates, std::vector<bool>& wide) const {
  wide.assign(offsets.size(), false);
  const size_t inner = dims_.sizes.size() - 1;
  bool ok = !coordinates || dims_.sizes[inner] % 4 == 0;
  for (size_t k = 0; k < offsets.size(); ++k) {
    if (!use[k]) continue;
    if (!coordinates) {
      wide[k] = offsets[k] == index_;
    } else {
      const auto& strides = dims_.strides[k + shift_];
      wide[k] = strides[inner] == 1;
      for (size_t d = 0; d < inner && wide[k]; ++d) ok = ok && (dims_.sizes[d] == 1 || strides[d] % 4 == 0);
      ok = ok && (wide[k] || strides[inner] == 0);
    }
    ok = ok && (k >= n_out || wide[k]);
  }
  return ok;
}

std::vector<int> Writer::needed_ops(const std::vector<int>& candidates, const std::vector<int>& roots) const {
  std::vector<bool> need(region_.values().size(), false);
  for (int v : roots) need[static_cast<size_t>(v)] = true;
  std::vector<int> kept;
  for (auto it = candidates.rbegin(); it != candidates.rend(); ++it) {
    const Op& op = region_.op(*it);
    if (!need[static_cast<size_t>(op.result)]) continue;
    kept.push_back(*it);
    for (int a : op.args) need[static_cast<size_t>(a)] = true;
  }
  return {kept.rbegin(), kept.rend()};
}

bool Writer::reads(const std::vector<int>& ops, int v) const {
  return std::any_of(ops.begin(), ops.end(), [&](int o) {
    const auto& args = region_.op(o).args;
    return std::find(args.begin(), args.end(), v) != args.end();
  });
}

// The ops, one line each, reading and defining v<value>.
std::vector<std::string> Writer::compute_lines(const std::vector<int>& ops) const {
  std::vector<std::string> compute;
  for (int o : ops) {
    const Op& op = region_.op(o);
    const Value& out = region_.value(op.result);
    std::string s = fmt::format("{} v{} = {};", compute_type_name(out.dtype), op.result, expression(op));
    if (read_inside(op.result)) {
      if (out.dtype == kFloat16 || out.dtype == kBFloat16) {
        s += fmt::format("  v{} = rnd_{}(v{});", op.result, type_suffix(out.dtype), op.result);
      }
    }
    compute.push_back(std::move(s));
  }
  return compute;
}

// Whether every offset of the iteration fits 32 bits (then the index is unsigned).
void Writer::check_index32(KernelSource& kernel) const {
  constexpr int64_t kLimit = int64_t{1} << 31;
  kernel.index32 = kernel.numel < kLimit;
  for (const auto& strides : dims_.strides) {
    int64_t furthest = 0;
    for (size_t d = 0; d < dims_.sizes.size(); ++d) {
      if (strides[d] < 0) kernel.index32 = false;
      furthest += (dims_.sizes[d] - 1) * std::abs(strides[d]);
    }
    if (furthest >= kLimit) kernel.index32 = false;
  }
}

bool Writer::read_inside(int value) const {
  for (int o : group_.ops) {
    for (int a : region_.op(o).args) {
      if (a == value) return true;
    }
  }
  return false;
}

// Whether the operand is laid out densely in the iteration's order: its offset is the index.
bool Writer::dense(size_t operand) const {
  int64_t expected = 1;
  for (size_t d = dims_.sizes.size(); d-- > 0;) {
    if (dims_.sizes[d] != 1 && dims_.strides[operand + shift_][d] != expected) return false;
    expected *= dims_.sizes[d];
  }
  return true;
}

// The operand's element offset: the index itself where dense, else from the coordinates c0
// (outermost) .. c{n-1}.
std::string Writer::offset_of(size_t operand) const {
  if (dense(operand)) return index_;
  const auto& strides = dims_.strides[operand + shift_];
  std::string s;
  for (size_t d = 0; d < dims_.sizes.size(); ++d) {
    const int64_t st = strides[d];
    if (st == 0 || dims_.sizes[d] == 1) continue;
    if (!s.empty()) s += " + ";
    s += st == 1 ? fmt::format("c{}", d) : fmt::format("c{} * {}", d, st);
  }
  return s.empty() ? "0" : s;
}

std::string Writer::expression(const Op& op) const {
  const Value& out = region_.value(op.result);
  const auto arg = [&](size_t k) { return fmt::format("v{}", op.args.at(k)); };
  const char* c = compute_type_name(out.dtype);
  switch (op.kind) {
    case OpKind::Unary: {
      const auto index = static_cast<int>(op.unary);
      if (is_comparison(op.unary)) {
        return fmt::format("compare_scalar<{}>(static_cast<double>({}), {})",
                           enum_arg("UnaryOp", index, name(op.unary)), arg(0), double_literal(op.params.a));
      }
      const double a = op.params.a, b = op.params.b;
      const int pow_mode = a == 2.0 ? 2 : a == 0.5 ? 1 : 0;  // UnaryScalars::from
      return fmt::format("unary<{}>({}, UnaryScalars<{}>{{{}, {}, {}, {}, {}}})",
                         enum_arg("UnaryOp", index, name(op.unary)), arg(0), c, scalar_as(c, a),
                         scalar_as(c, b), double_literal(a), double_literal(b), pow_mode);
    }
    case OpKind::Binary: {
      const std::string kind = enum_arg("BinaryOp", static_cast<int>(op.binary), name(op.binary));
      const DType in = region_.value(op.args[0]).dtype;
      if (in == kBool) return fmt::format("logical<{}>({}, {})", kind, arg(0), arg(1));
      if (is_comparison(op.binary)) return fmt::format("compare<{}>({}, {})", kind, arg(0), arg(1));
      return fmt::format("binary<{}>({}, {}, {})", kind, arg(0), arg(1), scalar_as(c, op.alpha));
    }
    case OpKind::Where:
      return fmt::format("{} ? {} : {}", arg(0), arg(1), arg(2));
    case OpKind::Reduce:
      break;  // the reduction kernel's own fold, not an expression
    case OpKind::Fill:
      return scalar_as(c, op.params.a);
    case OpKind::Cast: {
      const DType from = region_.value(op.args[0]).dtype;
      if (out.dtype == kBool && from != kBool) {
        return fmt::format("{} != static_cast<{}>(0)", arg(0), compute_type_name(from));
      }
      return fmt::format("static_cast<{}>({})", c, arg(0));
    }
  }
  NABLA_ASSERT(false, "fusion codegen: an op kind without an expression");
}

KernelSource Writer::write() {
  NABLA_ASSERT(group_.fused && !group_.outputs.empty(),
               "fusion codegen: group is not a fused group with outputs");
  if (group_.reduce >= 0) return write_reduction();
  KernelSource kernel;
  kernel.operands = group_.outputs;
  kernel.operands.insert(kernel.operands.end(), group_.inputs.begin(), group_.inputs.end());
  kernel.numel = numel_of(group_.sizes);

  std::vector<IterationOperand> layout;
  layout.reserve(kernel.operands.size());
  for (int v : kernel.operands) layout.push_back({region_.value(v).sizes, region_.value(v).strides, 1});
  dims_ = coalesce_dims(group_.sizes, layout);

  check_index32(kernel);
  index_type_ = kernel.index32 ? "unsigned" : "long long";
  const char* suffix = kernel.index32 ? "u" : "ll";

  const size_t n_out = group_.outputs.size();
  const std::vector<std::string> compute = compute_lines(group_.ops);

  text_.clear();
  // Operands at the loop index ("i") or at one element ("0") need no coordinates.
  std::vector<std::string> offsets;
  bool coordinates = false;
  for (size_t k = 0; k < kernel.operands.size(); ++k) {
    offsets.push_back(offset_of(k));
    coordinates = coordinates || (offsets.back() != "i" && offsets.back() != "0");
  }
  // One element per thread: coordinates, loads, the ops, stores.
  const auto scalar_body = [&](int indent) {
    if (coordinates) coordinate_lines(indent, suffix);
    for (size_t k = n_out; k < kernel.operands.size(); ++k)
      line(indent, load_line(kernel.operands, k, offsets[k]));
    for (const std::string& c : compute) line(indent, c);
    for (size_t k = 0; k < n_out; ++k) line(indent, store_line(kernel.operands, k, offsets[k]));
  };
  const auto scalar_loop = [&](int indent, const std::string& first) {
    line(indent, fmt::format("for ({0} i = {1}{0}(blockIdx.x) * {2}{3} + threadIdx.x; i < {4}{3}; "
                             "i += {0}(gridDim.x) * {2}{3}) {{",
                             index_type_, first, kFusedBlockSize, suffix, kernel.numel));
    scalar_body(indent + 2);
    line(indent, "}");
  };

  // Note [Vectorized fused kernels]: each thread takes four neighbouring elements of the
  // innermost dim, with one vector load and store per operand laid out along it (stride 1 there,
  // and its other strides multiples of 4, so the four are one aligned access) and one scalar load
  // for all four per operand broadcast along it (stride 0), as the eager kernels do with dense
  // operands. That covers the broadcast weights and statistics of norms and the tables and slices
  // of rotary embeddings, not only dense chains. The alignment of the pointers is checked on the
  // device (else the scalar loop runs). Where every operand is dense, the last numel % 4
  // elements take the scalar loop; with coordinates, the innermost dim is a multiple of 4.
  const int64_t vector_numel = kernel.numel - kernel.numel % 4;
  std::vector<bool> wide;  // loaded or stored four at a time
  const bool vectorize = vector_numel > 0 && wide_operands(offsets, std::vector<bool>(offsets.size(), true),
                                                           n_out, coordinates, wide);
  if (vectorize) {
    kernel.per_thread = 4;
    // The offsets of the first of each thread's four elements, at index b.
    index_ = "b";
    std::vector<std::string> at_b;
    for (size_t k = 0; k < kernel.operands.size(); ++k) at_b.push_back(offset_of(k));
    line(2, fmt::format("if ({}) {{", aligned_check(kernel.operands, wide)));
    line(4, fmt::format("for ({0} b = ({0}(blockIdx.x) * {1}{2} + threadIdx.x) * 4{2}; b < {3}{2}; "
                        "b += {0}(gridDim.x) * {4}{2}) {{",
                        index_type_, kFusedBlockSize, suffix, vector_numel, 4 * kFusedBlockSize));
    if (coordinates) coordinate_lines(6, suffix);
    index_ = "i";
    four_wide(6, kernel.operands, n_out, wide, at_b, compute, std::vector<bool>(kernel.operands.size(), true),
              "");
    line(4, "}");
    if (vector_numel < kernel.numel) scalar_loop(4, fmt::format("{}{} + ", vector_numel, suffix));
    line(4, "return;");
    line(2, "}");
  }
  scalar_loop(2, "");
  const std::string body = text_;

  const std::string signature_tail = fmt::format(
      "(nabla_fusion::Pointers<{}> p) {{\n  using namespace nabla_fusion;\n", kernel.operands.size());
  const std::string kernel_text = signature_tail + body + "}\n";
  kernel.name = fmt::format("nabla_fused_{:016x}", fnv1a(kernel_text));

  std::string header =
      fmt::format("// Generated by nabla's step compiler (ops/fusion/codegen.cpp): {} ops over {}.\n",
                  group_.ops.size(), shape_str(group_.sizes));
  for (int o : group_.ops) header += "//   " + describe(region_, region_.op(o)) + "\n";
  kernel.source =
      header + fmt::format("#include \"{}\"\n\n", kPreludeName) +
      fmt::format("extern \"C\" __global__ void __launch_bounds__({}) {}", kFusedBlockSize, kernel.name) +
      kernel_text;
  return kernel;
}

}  // namespace codegen_detail

uint64_t fnv1a(const std::string& text, uint64_t seed) {
  uint64_t h = seed;
  for (unsigned char ch : text) {
    h ^= ch;
    h *= 0x100000001b3ULL;
  }
  return h;
}

KernelSource generate_kernel(const Region& region, const Group& group) {
  return codegen_detail::Writer(region, group).write();
}

}  // namespace nabla::ops::fusion
