// Internal (ops). The step compiler's planner: which ops of a region become one kernel, and which
// values those kernels write (Note [Fusion groups] in docs/design/step-compiler.md).
#pragma once

#include <string>
#include <vector>

#include "nabla/ops/fusion/region.h"

namespace nabla::ops::fusion {

struct Group {
  Shape sizes;               // the iteration: every op of the group has these result sizes, but
                             // a reduction, whose input has them
  int reduce = -1;           // the group's reduction, or -1: a pointwise group
  std::vector<int> ops;      // program order
  std::vector<int> row_ops;  // ops of `ops` after the reduction on its result's shape, one value
                             // per row (Note [One-pass rows] in plan.cpp); the rest after it are
                             // the epilogue, on the group's sizes
  std::vector<int> inputs;   // values read from outside the group, in order of first use
  std::vector<int> outputs;  // values written: live out of the region, or read by a later group
  bool fused = false;        // a generated kernel; false: one op run as recorded (not fusible,
                             // or alone in its group, where the eager kernel is as good)
};

struct Plan {
  std::vector<Group> groups;  // an order that runs every producer before its readers
  std::vector<int> dead;      // ops whose results nothing reads: never run
};

// Groups the live ops of `region`. An op joins the latest group of its result's sizes that
// comes no earlier than any group it reads from, so groups stay in dependency order; an op the
// compiler cannot fuse is a group of its own. A reduction joins the group computing its input,
// which it closes (Note [Fused reductions] in plan.cpp), but for the ops a row reduction's kernel
// can compute after the fold (Note [One-pass rows]).
Plan plan_groups(const Region& region);

// "group 0 fused [8, 64]: ops 0 1 2, in %0 %1, out %4", one line per group, for golden tests.
std::string dump(const Plan& plan);

}  // namespace nabla::ops::fusion
