// The code generator's reductions: Note [Generated reductions] and Note [One-pass rows] (the
// writer is codegen_writer.h's; pointwise kernels are codegen.cpp's).
#include <algorithm>
#include <optional>

#include <fmt/format.h>

#include "nabla/core/error.h"
#include "nabla/ops/fusion/codegen_writer.h"

namespace nabla::ops::fusion::codegen_detail {

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
    line(4, load_line(kernel.operands, k, offsets[k]));
  }
  for (const std::string& op : compute) line(4, op);
  for (size_t k = 0; k < n_out; ++k) {
    if (!source_use[k]) continue;
    line(4, store_line(kernel.operands, k, offsets[k]));
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
    line(4, load_line(kernel.operands, k, "k"));
  }
  for (const std::string& s : compute_lines(group_.row_ops)) line(4, s);
  std::string stores;
  for (size_t k = 0; k < n_out; ++k) {
    if (!row_out[k]) continue;
    stores += " " + store_line(kernel.operands, k, "k");
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
    line(6, load_line(kernel.operands, k, offsets[k]));
  }
  for (const std::string& s : compute) line(6, s);
  for (size_t k = 0; k < n_out; ++k) {
    if (!use[k]) continue;
    line(6, store_line(kernel.operands, k, offsets[k]));
  }
  line(4, "}");
  line(2, "}");
  line(0, "};");
  line(0, "");
}

}  // namespace nabla::ops::fusion::codegen_detail
