// Internal (ops). The step compiler's code generator: one fused group of a plan as CUDA C++,
// compiled at run time with NVRTC (ops/cuda/fusion). Plain C++ that only writes text, so the
// generated source is tested against golden files on any machine (Note [Generated kernels] in
// docs/design/step-compiler.md).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "nabla/ops/fusion/plan.h"

namespace nabla::ops::fusion {

// The header every generated kernel includes, by the name NVRTC is given it under.
inline constexpr const char* kPreludeName = "nabla_fusion_prelude.cuh";
// The reduction kernels' bodies, included by generated reductions (ops/cuda/reduce/fold.cuh).
inline constexpr const char* kFoldName = "nabla/ops/cuda/reduce/fold.cuh";
inline constexpr int kFusedBlockSize = 256;

enum class KernelKind : uint8_t {
  Pointwise,      // a grid-stride loop over numel elements
  ReduceRows,     // a reduction's rows kernel (reduce/fold.cuh), and <name>_partials
  ReduceColumns,  // a reduction's columns kernel, and <name>_partials
};

struct KernelSource {
  KernelKind kind = KernelKind::Pointwise;
  std::string name;           // nabla_fused_<hash of the body>: equal bodies, equal names
  std::string source;         // CUDA C++ defining one extern "C" kernel taking Pointers<operands>
  std::vector<int> operands;  // the values behind the kernel's pointers: outputs, then inputs
  int64_t numel = 0;          // the threads' iteration: the group's elements
  int per_thread = 1;         // elements a thread takes at once (4 in a vectorized kernel)
  bool index32 = true;        // every offset fits 32 bits (the index is unsigned 32-bit then)
  // A reduction's (A, O, B, I) block, the input elements per 16 bytes and the accumulator's
  // size: what the launch is planned from (reduce/geometry.h), as for the eager kernel.
  int64_t a = 1, o = 1, b = 1, i = 1;
  int vector = 0;
  int acc_bytes = 0;
  // A row reduction with row ops or an epilogue after its fold (Note [One-pass rows] in
  // ops/fusion/plan.cpp): it must run with one split per row.
  bool one_pass = false;

  bool is_reduction() const { return kind != KernelKind::Pointwise; }
  std::string partials_name() const { return name + "_partials"; }
};

// The kernel of a fused group (group.fused): a pointwise loop, or a reduction whose elements the
// group's pointwise ops compute (Note [Fused reductions] in plan.cpp). Sizes and strides are
// constants of the source: a captured step's shapes are fixed, and constant divisors compile to
// multiplies.
KernelSource generate_kernel(const Region& region, const Group& group);

// FNV-1a, 64-bit: kernel names here, and the compiled-kernel cache's keys.
uint64_t fnv1a(const std::string& text, uint64_t seed = 0xcbf29ce484222325ULL);

}  // namespace nabla::ops::fusion
