// Internal (ops). The code generator's writer of one fused group, shared by codegen.cpp (the
// pointwise kernels and the pieces every kernel uses) and codegen_reduction.cpp (Note [Generated
// reductions], Note [One-pass rows]). Plain C++ that only writes text.
#pragma once

#include <string>
#include <vector>

#include "nabla/ops/detail/iteration.h"
#include "nabla/ops/fusion/codegen.h"

namespace nabla::ops::fusion::codegen_detail {

// "f32", "bf16", ...: the suffix of the prelude's loads and stores for a dtype.
const char* type_suffix(DType dtype);
// A double as source text that reads back to the same bits: a hex literal when finite.
std::string double_literal(double x);
// x converted to the compute type `c` ("float" or "double"), as static_cast<C>(x) would.
std::string scalar_as(const char* c, double x);
std::string enum_arg(const char* type, int index, const char* name);
// Whether an operand in `use` is addressed through coordinates (not at the index e, nor at 0).
bool needs_coordinates(const std::vector<std::string>& offsets, const std::vector<bool>& use);

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
  // "const float v3 = ld_bf16(p.p[k], at);" and "st_bf16(p.p[k], at, v3);" for operand k.
  std::string load_line(const std::vector<int>& operands, size_t k, const std::string& at) const;
  std::string store_line(const std::vector<int>& operands, size_t k, const std::string& at) const;
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

}  // namespace nabla::ops::fusion::codegen_detail
