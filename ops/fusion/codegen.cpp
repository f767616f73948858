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

namespace {

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

// A double as source text that reads back to the same bits: a hex literal when finite.
std::string double_literal(double x) {
  if (std::isfinite(x)) return fmt::format("{:a}", x);
  return fmt::format("__longlong_as_double(0x{:016x}ULL)", std::bit_cast<uint64_t>(x));
}

// x converted to the compute type `c` ("float" or "double"), as static_cast<C>(x) would.
std::string scalar_as(const char* c, double x) {
  return fmt::format("static_cast<{}>({})", c, double_literal(x));
}

std::string enum_arg(const char* type, int index, const char* name) {
  return fmt::format("{}({}) /* {} */", type, index, name);
}

class Writer {
 public:
  Writer(const Region& region, const Group& group) : region_(region), group_(group) {}

  KernelSource write();

 private:
  KernelSource write_reduction();
  std::vector<std::string> compute_lines(const std::vector<int>& ops) const;
  void check_index32(KernelSource& kernel) const;
  bool dense(size_t operand) const;
  std::string offset_of(size_t operand) const;
  std::string expression(const Op& op) const;
  bool read_inside(int value) const;
  // Appends one line of source, indented, to text_.
  void line(int indent, const std::string& s);
  // Lines turning the offset in index_ into the coordinates c0 (outermost) .. c{n-1} of dims_.
  void coordinate_lines(int indent, const char* suffix);
  // "aligned(p.p[k], bytes) && ..." for the operands taken four at a time (`wide`).
  std::string aligned_check(const std::vector<int>& operands, const std::vector<bool>& wide) const;
  // Four neighbouring elements (Note [Vectorized fused kernels]): the inputs' loads at `at` (four
  // for wide ones, one for the rest), the ops once per element, the outputs' four-wide stores;
  // operands not in `use` are neither loaded nor stored, and `per_element` ends each element.
  void four_wide(int indent, const std::vector<int>& operands, size_t n_out, const std::vector<bool>& wide,
                 const std::vector<std::string>& at, const std::vector<std::string>& compute,
                 const std::vector<bool>& use, const std::string& per_element);
  // Which operands in `use` a four-wide body takes four at a time (`wide`), and whether all allow
  // it (Note [Vectorized fused kernels]): with coordinates, the innermost dim a multiple of 4 and
  // each operand contiguous along it (its other strides multiples of 4) or, for an input,
  // broadcast; without, the operands at the index (index_). Every output in `use` must be wide.
  bool wide_operands(const std::vector<std::string>& offsets, const std::vector<bool>& use, size_t n_out,
                     bool coordinates, std::vector<bool>& wide) const;
  // The ops of `candidates` (program order) that computing `roots` needs, in program order.
  std::vector<int> needed_ops(const std::vector<int>& candidates, const std::vector<int>& roots) const;
  // Whether one of `ops` reads value v.
  bool reads(const std::vector<int>& ops, int v) const;
  // The epilogue of a one-pass row reduction (Note [One-pass rows] in plan.cpp): struct Then.
  void then_lines(const KernelSource& kernel, const std::vector<std::string>& offsets,
                  const std::vector<int>& prologue, const std::vector<int>& epilogue,
                  const std::string& result_value);

  const Region& region_;
  const Group& group_;
  CoalescedDims dims_;
  size_t shift_ = 0;         // dims_.strides[operand + shift_] are the operand's
  std::string index_ = "i";  // the variable holding the offset of a dense operand
  std::string index_type_;
  std::string text_;  // the kernel's body being written
};

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
      line(indent, fmt::format("const {} v{} = ld_{}(p.p[{}], {});", type_of(k), operands[k], suffix_of(k), k,
                               at[k]));
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

// Whether an operand in `use` is addressed through coordinates (not at the index e, nor at 0).
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
  const auto load = [&](size_t k, const std::string& offset) {
    const Value& v = region_.value(kernel.operands[k]);
    return fmt::format("const {} v{} = ld_{}(p.p[{}], {});", compute_type_name(v.dtype), kernel.operands[k],
                       type_suffix(v.dtype), k, offset);
  };
  const auto store = [&](size_t k, const std::string& offset) {
    const Value& v = region_.value(kernel.operands[k]);
    return fmt::format("st_{}(p.p[{}], {}, v{});", type_suffix(v.dtype), k, offset, kernel.operands[k]);
  };
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
    for (size_t k = n_out; k < kernel.operands.size(); ++k) line(indent, load(k, offsets[k]));
    for (const std::string& c : compute) line(indent, c);
    for (size_t k = 0; k < n_out; ++k) line(indent, store(k, offsets[k]));
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

// Note [Generated reductions]: a group ending in a reduction (Note [Fused reductions] in
// plan.cpp) becomes the eager reduction kernels' bodies (ops/cuda/reduce/fold.cuh) instantiated
// with a Source that computes the reduced element from the group's pointwise ops instead of
// loading it, and stores the group's other outputs on the way, and a Fold that is the eager
// SumOp. The launch is planned as the eager one is (plan_launch), and the Source counts 16-byte
// boundaries as the intermediate's fresh buffer would have them, so each output adds the same
// elements in the same order as the eager ops: the same bits. Element e of the iteration is at
// offset e of the reduced input in its memory order (the input is dense in that order; other
// operands are addressed through the coordinates, or by e where they share the layout).
KernelSource Writer::write_reduction() {
  const Op& reduction = region_.op(group_.reduce);
  const int input = reduction.args.at(0), result = reduction.result;
  const Value& in = region_.value(input);
  const std::optional<ReduceLayout> layout = reduce_layout(region_, reduction);
  NABLA_ASSERT(layout.has_value(), "fusion codegen: {} cannot be read in place",
               describe(region_, reduction));

  // Before the reduction, its prologue; after it, the row ops and the epilogue (Note [One-pass
  // rows] in plan.cpp). Row values (the result and the row ops') live in registers, one per row.
  std::vector<int> prologue, epilogue;
  std::vector<int> row_values{result};
  for (int o : group_.ops) {
    const bool row = std::find(group_.row_ops.begin(), group_.row_ops.end(), o) != group_.row_ops.end();
    if (o < group_.reduce) {
      prologue.push_back(o);
    } else if (row) {
      row_values.push_back(region_.op(o).result);
    } else if (o != group_.reduce) {
      epilogue.push_back(o);
    }
  }
  const auto is_row = [&](int v) {
    return std::find(row_values.begin(), row_values.end(), v) != row_values.end();
  };
  const bool then = !group_.row_ops.empty() || !epilogue.empty();

  KernelSource kernel;
  kernel.kind = layout->i == 1 ? KernelKind::ReduceRows : KernelKind::ReduceColumns;
  kernel.one_pass = then;
  kernel.operands = group_.outputs;
  kernel.operands.insert(kernel.operands.end(), group_.inputs.begin(), group_.inputs.end());
  kernel.numel = numel_of(group_.sizes);
  kernel.a = layout->a;
  kernel.o = layout->o;
  kernel.b = layout->b;
  kernel.i = layout->i;
  kernel.vector = static_cast<int>(16 / itemsize(in.dtype));
  const char* c = compute_type_name(in.dtype);
  kernel.acc_bytes = in.dtype == kFloat64 ? 8 : 4;

  // The iteration in the input's memory order: the input first, so its strides order the dims.
  // Row values are stored by row, not by element.
  std::vector<IterationOperand> iteration;
  iteration.reserve(kernel.operands.size() + 1);
  iteration.push_back({in.sizes, in.strides, 1});
  for (int v : kernel.operands) {
    const Value& value = region_.value(is_row(v) ? input : v);
    iteration.push_back({value.sizes, value.strides, 1});
  }
  dims_ = coalesce_dims(group_.sizes, iteration);
  shift_ = 1;
  index_ = "e";
  check_index32(kernel);
  index_type_ = kernel.index32 ? "unsigned" : "long long";
  const char* suffix = kernel.index32 ? "u" : "ll";

  text_.clear();
  std::vector<std::string> offsets;
  for (size_t k = 0; k < kernel.operands.size(); ++k)
    offsets.push_back(is_row(kernel.operands[k]) ? "" : offset_of(k));
  const size_t n_out = group_.outputs.size();
  const int V = kernel.vector;

  // The source computes the reduced element and stores the prologue's outputs; it loads only the
  // inputs those need.
  std::vector<int> source_roots{input};
  std::vector<bool> source_use(kernel.operands.size(), false);
  for (size_t k = 0; k < n_out; ++k) {
    const int v = kernel.operands[k];
    if (!is_row(v) && region_.value(v).producer < group_.reduce) {
      source_roots.push_back(v);
      source_use[k] = true;
    }
  }
  const std::vector<int> source_ops = needed_ops(prologue, source_roots);
  for (size_t k = n_out; k < kernel.operands.size(); ++k)
    source_use[k] = reads(source_ops, kernel.operands[k]);
  const std::vector<std::string> compute = compute_lines(source_ops);
  const bool coordinates = needs_coordinates(offsets, source_use);

  line(0, "struct Source {");
  line(2, fmt::format("using Value = {};", c));
  line(2, fmt::format("static constexpr int kVector = {};", V));
  line(2, fmt::format("Pointers<{}> p;", kernel.operands.size()));
  line(2, fmt::format(
              "__device__ long long to_boundary(long long e) const {{ return ({0} - e % {0}) % {0}; }}", V));
  line(2, fmt::format("__device__ __forceinline__ {} operator()(long long e_) const {{", c));
  line(4, fmt::format("const {0} e = static_cast<{0}>(e_);", index_type_));
  if (coordinates) coordinate_lines(4, suffix);
  for (size_t k = n_out; k < kernel.operands.size(); ++k) {
    if (!source_use[k]) continue;
    const Value& v = region_.value(kernel.operands[k]);
    line(4, fmt::format("const {} v{} = ld_{}(p.p[{}], {});", compute_type_name(v.dtype), kernel.operands[k],
                        type_suffix(v.dtype), k, offsets[k]));
  }
  for (const std::string& op : compute) line(4, op);
  for (size_t k = 0; k < n_out; ++k) {
    if (!source_use[k]) continue;
    line(4, fmt::format("st_{}(p.p[{}], {}, v{});", type_suffix(region_.value(kernel.operands[k]).dtype), k,
                        offsets[k], kernel.operands[k]));
  }
  line(4, fmt::format("return v{};", input));
  line(2, "}");
  line(2, fmt::format("__device__ void load_vector(long long e, {} (&v)[{}]) const {{", c, V));
  // Note [Vectorized fused reductions]: the fold asks for kVector elements at a time from e (a
  // multiple of kVector); operands at offset e are then read and written four at a time, as the
  // eager fold reads its input, when their pointers are aligned for it (checked here, else one
  // element at a time). The values and their order are those of the scalar path.
  // With coordinates, each four are computed from their first element's (the innermost dim is a
  // multiple of 4, so the four share the other coordinates).
  // Only the rows kernel asks for vectors (fold_contiguous); the columns kernel folds element by
  // element.
  std::vector<bool> wide;
  if (kernel.kind == KernelKind::ReduceRows && V % 4 == 0 &&
      wide_operands(offsets, source_use, n_out, coordinates, wide)) {
    line(4, fmt::format("if ({}) {{", aligned_check(kernel.operands, wide)));
    for (int c4 = 0; c4 < V; c4 += 4) {
      line(6, "{");
      line(8, fmt::format("const {0} e4 = static_cast<{0}>(e + {1});", index_type_, c4));
      index_ = "e4";
      if (coordinates) coordinate_lines(8, suffix);
      std::vector<std::string> at;
      for (size_t k = 0; k < kernel.operands.size(); ++k)
        at.push_back(offsets[k].empty() ? "" : offset_of(k));
      index_ = "e";
      four_wide(8, kernel.operands, n_out, wide, at, compute, source_use,
                fmt::format("v[{}j] = v{};", c4 == 0 ? "" : fmt::format("{} + ", c4), input));
      line(6, "}");
    }
    line(6, "return;");
    line(4, "}");
  }
  line(4, "#pragma unroll");
  line(4, fmt::format("for (int j = 0; j < {}; ++j) v[j] = (*this)(e + j);", V));
  line(2, "}");
  line(0, "};");
  line(0, "");
  // The eager SumOp (reduce/sum.cu): a float accumulator for float32 and the 16-bit floats.
  const int64_t divisor = reduction.mean ? layout->reduce_size() : 1;
  const std::string result_value = fmt::format("a / static_cast<{}>({}LL)", c, divisor);
  const auto y =
      std::find(kernel.operands.begin(), kernel.operands.begin() + static_cast<long>(n_out), result);
  line(0, "struct Fold {");
  line(2, fmt::format("using In = {};", c));
  line(2, fmt::format("using Acc = {};", c));
  line(2, fmt::format("Pointers<{}> p;", kernel.operands.size()));
  line(2, fmt::format("__device__ {0} init() const {{ return {0}(0); }}", c));
  line(2, fmt::format("__device__ void update({0}& a, {0} v, long long) const {{ a += v; }}", c));
  line(2, fmt::format("__device__ {0} combine({0} a, {0} b) const {{ return a + b; }}", c));
  if (y != kernel.operands.begin() + static_cast<long>(n_out)) {
    line(2, fmt::format("__device__ void write(long long k, {} a) const {{ st_{}(p.p[{}], k, {}); }}", c,
                        type_suffix(region_.value(result).dtype), y - kernel.operands.begin(), result_value));
  } else {
    line(2, fmt::format("__device__ void write(long long, {}) const {{}}  // read only by the row's ops", c));
  }
  line(0, "};");
  line(0, "");
  if (then) then_lines(kernel, offsets, prologue, epilogue, result_value);
  const bool rows = kernel.kind == KernelKind::ReduceRows;
  line(0, fmt::format("extern \"C\" __global__ void __launch_bounds__({}) NABLA_KERNEL(Pointers<{}> p, "
                      "nabla::ops::cuda::reduction::Geometry g, {}* partial) {{",
                      rows ? 512 : 256, kernel.operands.size(), c));
  if (then) {
    line(2, "nabla::ops::cuda::reduction::reduce_rows_then(Fold{p}, Source{p}, g, Then{p});");
  } else {
    line(2, fmt::format("nabla::ops::cuda::reduction::{}(Fold{{p}}, Source{{p}}, g, partial);",
                        rows ? "reduce_rows" : "reduce_columns"));
  }
  line(0, "}");
  line(0, fmt::format(
              "extern \"C\" __global__ void __launch_bounds__(256) NABLA_KERNEL_partials(Pointers<{}> p, "
              "const {}* partial, long long outputs, long long splits) {{",
              kernel.operands.size(), c));
  line(2, "nabla::ops::cuda::reduction::reduce_partials(Fold{p}, partial, outputs, splits);");
  line(0, "}");

  kernel.name = fmt::format("nabla_fused_{:016x}", fnv1a(text_));
  std::string body = text_;
  for (size_t at = body.find("NABLA_KERNEL"); at != std::string::npos; at = body.find("NABLA_KERNEL", at)) {
    body.replace(at, std::string("NABLA_KERNEL").size(), kernel.name);
  }
  std::string header = fmt::format(
      "// Generated by nabla's step compiler (ops/fusion/codegen.cpp): {} ops over {}, "
      "reduced as (A, O, B, I) = ({}, {}, {}, {}){}.\n",
      group_.ops.size(), shape_str(group_.sizes), kernel.a, kernel.o, kernel.b, kernel.i,
      then ? ", one pass per row" : "");
  for (int o : group_.ops) header += "//   " + describe(region_, region_.op(o)) + "\n";
  kernel.source = header +
                  fmt::format("#include \"{}\"\n#include \"{}\"\n\nusing namespace nabla_fusion;\n\n",
                              kPreludeName, kFoldName) +
                  body;
  return kernel;
}

// Note [One-pass rows] (plan.cpp): after the fold, every lane of row k holds its sum `a`. The row
// ops run on it once per lane (lane 0 stores the row outputs), then the lanes walk the row's
// elements e = k * B + j again: the inputs the epilogue needs are loaded, the prologue values it
// reads computed again with the same formulas, the epilogue computed and stored. Four elements
// at a time where every operand allows it (as in Note [Vectorized fused kernels]), else one.
void Writer::then_lines(const KernelSource& kernel, const std::vector<std::string>& offsets,
                        const std::vector<int>& prologue, const std::vector<int>& epilogue,
                        const std::string& result_value) {
  const Op& reduction = region_.op(group_.reduce);
  const int result = reduction.result;
  const Value& out = region_.value(result);
  const size_t n_out = group_.outputs.size();
  const char* suffix = kernel.index32 ? "u" : "ll";
  const char* c = compute_type_name(region_.value(reduction.args[0]).dtype);

  std::vector<bool> row_out(kernel.operands.size(), false), use(kernel.operands.size(), false);
  std::vector<int> roots;
  for (size_t k = 0; k < n_out; ++k) {
    const int v = kernel.operands[k];
    const int producer = region_.value(v).producer;
    const bool row =
        std::find(group_.row_ops.begin(), group_.row_ops.end(), producer) != group_.row_ops.end();
    row_out[k] = row;
    use[k] = !row && producer > group_.reduce;
    if (use[k]) roots.push_back(v);
  }
  std::vector<int> walk = needed_ops(prologue, [&] {
    std::vector<int> args;
    for (int o : epilogue) {
      for (int a : region_.op(o).args) args.push_back(a);
    }
    return args;
  }());
  walk.insert(walk.end(), epilogue.begin(), epilogue.end());
  walk = needed_ops(walk, roots);
  for (size_t k = n_out; k < kernel.operands.size(); ++k) use[k] = reads(walk, kernel.operands[k]);
  const std::vector<std::string> compute = compute_lines(walk);

  line(0, "struct Then {");
  line(2, fmt::format("Pointers<{}> p;", kernel.operands.size()));
  line(2, fmt::format("__device__ __forceinline__ void operator()(long long k, {} a, unsigned lane, unsigned "
                      "lanes) const {{",
                      c));
  std::string r = fmt::format("{} v{} = {};", compute_type_name(out.dtype), result, result_value);
  if (out.dtype == kFloat16 || out.dtype == kBFloat16)
    r += fmt::format("  v{0} = rnd_{1}(v{0});", result, type_suffix(out.dtype));
  line(4, r);
  // Values from before the group that row ops read are laid out as the result: one per row, at k.
  std::vector<bool> per_row(kernel.operands.size(), false);
  for (size_t k = n_out; k < kernel.operands.size(); ++k) {
    per_row[k] = reads(group_.row_ops, kernel.operands[k]);
    if (!per_row[k]) continue;
    const Value& v = region_.value(kernel.operands[k]);
    line(4, fmt::format("const {} v{} = ld_{}(p.p[{}], k);", compute_type_name(v.dtype), kernel.operands[k],
                        type_suffix(v.dtype), k));
  }
  for (const std::string& s : compute_lines(group_.row_ops)) line(4, s);
  std::string stores;
  for (size_t k = 0; k < n_out; ++k) {
    if (!row_out[k]) continue;
    stores += fmt::format(" st_{}(p.p[{}], k, v{});", type_suffix(region_.value(kernel.operands[k]).dtype), k,
                          kernel.operands[k]);
  }
  if (!stores.empty()) line(4, fmt::format("if (lane == 0) {{{} }}", stores));
  for (size_t k = n_out; k < kernel.operands.size(); ++k) use[k] = use[k] && !per_row[k];  // loaded above
  const bool coordinates = needs_coordinates(offsets, use);
  if (walk.empty()) {
    line(2, "}");
    line(0, "};");
    line(0, "");
    return;
  }
  line(4, fmt::format("const {0} row = static_cast<{0}>(k) * {1}{2};", index_type_, kernel.b, suffix));

  // Four at a time: B a multiple of 4 (so e is), and the operands as wide_operands says.
  std::vector<bool> wide;
  const bool vectorize = kernel.b % 4 == 0 && wide_operands(offsets, use, n_out, coordinates, wide);
  if (vectorize) {
    line(4, fmt::format("if ({}) {{", aligned_check(kernel.operands, wide)));
    line(6, fmt::format("for ({0} col = lane * 4{1}; col < {2}{1}; col += lanes * 4{1}) {{", index_type_,
                        suffix, kernel.b));
    line(8, fmt::format("const {} e = row + col;", index_type_));
    if (coordinates) coordinate_lines(8, suffix);
    four_wide(8, kernel.operands, n_out, wide, offsets, compute, use, "");
    line(6, "}");
    line(6, "return;");
    line(4, "}");
  }
  line(4, fmt::format("for ({0} col = lane; col < {1}{2}; col += lanes) {{", index_type_, kernel.b, suffix));
  line(6, fmt::format("const {} e = row + col;", index_type_));
  if (coordinates) coordinate_lines(6, suffix);
  for (size_t k = n_out; k < kernel.operands.size(); ++k) {
    if (!use[k]) continue;
    const Value& v = region_.value(kernel.operands[k]);
    line(6, fmt::format("const {} v{} = ld_{}(p.p[{}], {});", compute_type_name(v.dtype), kernel.operands[k],
                        type_suffix(v.dtype), k, offsets[k]));
  }
  for (const std::string& s : compute) line(6, s);
  for (size_t k = 0; k < n_out; ++k) {
    if (!use[k]) continue;
    line(6, fmt::format("st_{}(p.p[{}], {}, v{});", type_suffix(region_.value(kernel.operands[k]).dtype), k,
                        offsets[k], kernel.operands[k]));
  }
  line(4, "}");
  line(2, "}");
  line(0, "};");
  line(0, "");
}

}  // namespace

uint64_t fnv1a(const std::string& text, uint64_t seed) {
  uint64_t h = seed;
  for (unsigned char ch : text) {
    h ^= ch;
    h *= 0x100000001b3ULL;
  }
  return h;
}

KernelSource generate_kernel(const Region& region, const Group& group) {
  return Writer(region, group).write();
}

}  // namespace nabla::ops::fusion
