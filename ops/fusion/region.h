// Internal (ops). The step compiler's IR: a region of pointwise ops recorded in program order
// instead of launched (Note [The step compiler] in docs/design/step-compiler.md).
//
// A region holds values and ops. A value is either an input (a tensor the region reads and did
// not produce) or the result of one op; it carries what eager mode would have stored: dtype,
// sizes and strides (in elements). `live_out` marks the results read after the region (by a later
// op, by autograd, by the caller): only those, and the ones another kernel of the region reads,
// are ever written to memory. Plain C++: built and tested without CUDA.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "nabla/core/dtype.h"
#include "nabla/core/shape.h"
#include "nabla/ops/detail/op_enums.h"
#include "nabla/ops/detail/reduce_layout.h"

namespace nabla::ops::fusion {

struct Value {
  DType dtype = kFloat32;
  Shape sizes;
  Shape strides;          // elements
  int producer = -1;      // the op computing it; -1 for an input of the region
  bool live_out = false;  // read after the region: must be written
};

enum class OpKind : uint8_t {
  Unary,   // unary(args[0]) with params
  Binary,  // binary(args[0], args[1]) with alpha
  Where,   // args[0] ? args[1] : args[2]
  Cast,    // args[0] converted to the result's dtype
  Reduce,  // the sum (or mean) of args[0] over `dims`; the result is dense over the kept dims,
           // in args[0]'s memory order (Note [Fused reductions] in ops/fusion/plan.cpp)
  Fill,    // params.a everywhere, no args: the zeros around a slice's gradient (Note [Padded
           // slices] in ops/fusion/recorder.cpp)
};

struct Op {
  OpKind kind = OpKind::Unary;
  UnaryOp unary = UnaryOp::Count;
  BinaryOp binary = BinaryOp::Count;
  UnaryParams params{};
  double alpha = 1.0;
  Shape dims = {};    // Reduce: the reduced dims of args[0], ascending
  bool mean = false;  // Reduce: divide by the number of reduced elements
  std::vector<int> args;
  int result = -1;
};

class Region {
 public:
  // An input: a tensor read by the region, laid out as given (contiguous when strides is empty).
  int input(DType dtype, Shape sizes, Shape strides = {});
  // An op whose result is laid out as given. The recorder passes the eager output's layout; the
  // helpers below take PyTorch's rules (broadcast sizes, contiguous strides) for hand-made graphs.
  int add(Op op, DType dtype, Shape sizes, Shape strides = {});

  int unary(UnaryOp op, int x, UnaryParams params = {});
  int binary(BinaryOp op, int a, int b, double alpha = 1.0);
  int where(int cond, int a, int b);
  int cast(int x, DType dtype);
  int fill(double value, DType dtype, Shape sizes);
  // The sum or mean of x over `dims` (ascending), as ops/reduce.cpp allocates it: contiguous,
  // with the reduced dims kept as size 1 or dropped.
  int reduce(int x, Shape dims, bool keepdim, bool mean);

  void mark_live_out(int value) { values_.at(static_cast<size_t>(value)).live_out = true; }
  // Makes a result an input: its op is dropped, and the value is read from memory as given.
  // For work done outside the region that writes the value itself (Note [Batch norm and its
  // ReLU] in recorder_held.cpp). Values keep their numbers.
  void detach(int value);

  const std::vector<Value>& values() const { return values_; }
  const std::vector<Op>& ops() const { return ops_; }
  const Value& value(int v) const { return values_.at(static_cast<size_t>(v)); }
  const Op& op(int o) const { return ops_.at(static_cast<size_t>(o)); }
  bool empty() const { return ops_.empty(); }
  void clear();

  // One line per op, for logs and test failures: "%3 = gelu(%2) bf16[8, 64]".
  std::string dump() const;

 private:
  std::vector<Value> values_;
  std::vector<Op> ops_;
};

// What a kernel generated for the op computes its arithmetic in: float for the 16-bit floats and
// float32, double for float64, bool for bool (opmath_t on CUDA, compute_t on the CPU).
const char* compute_type_name(DType dtype);
// Whether the compiler can fuse the op: floating values (bool for comparisons, masks and
// conditions), and the kinds a generated kernel can express. The rest run as recorded.
bool fusible(const Region& region, const Op& op);
std::string describe(const Region& region, const Op& op);

// The (A, O, B, I) block (Note [Reduction layout]) a fused reduction of `in` over `dims` reads,
// when it can read it in place and write a result laid out as `out_sizes`/`out_strides` (the
// front end's fresh contiguous result, keepdim or not) directly: the input dense, its runs in the
// block's form, the kept dims in the result's order, and not the two-stage NCHW per-channel
// case. nullopt otherwise: that reduction runs as the eager kernel does.
std::optional<ReduceLayout> reduce_layout(const Value& in, const Shape& dims, const Shape& out_sizes,
                                          const Shape& out_strides);
std::optional<ReduceLayout> reduce_layout(const Region& region, const Op& op);

}  // namespace nabla::ops::fusion
