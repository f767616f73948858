#include "nabla/ops/fusion/plan.h"

#include <algorithm>

#include <fmt/format.h>

#include "nabla/ops/cuda/reduce/geometry.h"

namespace nabla::ops::fusion {

namespace {

struct Building {
  Group group;
  bool joinable = true;              // false: an op the compiler cannot fuse, alone
  bool closed = false;               // a reduction ended it: only row ops and the epilogue join it
  bool rows = false;                 // closed by a reduction that may take row ops and an epilogue
  std::vector<int> row_values;       // the reduction's result and the row ops' results
  std::vector<int> epilogue_values;  // the epilogue ops' results
};

// Note [One-pass rows]: a row reduction whose rows are contiguous (A == 1, I == 1) and whose
// result keeps the reduced dims runs a warp or a block per row, and after the fold every lane of
// the row can hold the row's result (reduce_rows_then in reduce/fold.cuh). So the ops reading
// that result (row ops: a norm's `+ eps` and `rsqrt`, a mean's backward scale, which may also
// read values from before the group with one value per row, such as a saved `rstd`) join the
// kernel, computed once per row, and so do ops of the group's sizes reading a row value or the
// epilogue's (the epilogue: the norm's `x * r * w`, its backward's `dx`), with the group's values
// and values from before it: the lanes walk their row again, computing the group's values from
// its inputs again (a row is a few kB, still in L1 or L2). The fold's order is the eager
// kernel's, and every formula is the op's, so the bits are the eager ops'. It needs one split per
// row, which rows_never_split (reduce/geometry.h) promises for plan_launch on a device of at most
// kMaxSms SMs. An op whose value a later reduction reads (through pointwise ops of its sizes: a
// composed LayerNorm's `x - mean` feeds its variance; a per-row loss feeds its mean) stays out of
// the row phase, so that reduction can join the op's own group instead of running eagerly on a
// value written to memory.
constexpr int64_t kMaxSms = 1024;

bool one_pass_rows(const Region& region, const Op& reduction) {
  const auto layout = reduce_layout(region, reduction);
  if (!layout || layout->a != 1 || layout->i != 1 || layout->b < 2) return false;
  if (region.value(reduction.result).sizes.size() != region.value(reduction.args[0]).sizes.size())
    return false;
  return cuda::reduction::rows_never_split(layout->b, layout->o, kMaxSms);
}

// Whether `op` can join the row phase of `b` (group number g), a group closed by a one-pass row
// reduction: as a row op (reading row values, and values from before the group laid out as the
// reduction's result, one per row; its result laid out so too), or as an epilogue op (the group's
// sizes, reading a row value or an epilogue value). Ops that read neither go where they would
// without the reduction, so a later reduction of theirs can still join their group. Sets *row
// for a row op.
bool joins_rows(const Region& region, const Building& b, int g, const std::vector<int>& group_of,
                const std::vector<bool>& feeds_reduction, const Op& op, bool* row) {
  if (feeds_reduction[static_cast<size_t>(op.result)]) return false;
  const auto has = [](const std::vector<int>& xs, int v) {
    return std::find(xs.begin(), xs.end(), v) != xs.end();
  };
  const Value& out = region.value(op.result);
  const Value& result = region.value(region.op(b.group.reduce).result);
  const auto per_row = [&](const Value& v) { return v.sizes == result.sizes && v.strides == result.strides; };
  bool reads_row = false, row_args = per_row(out), reads_epilogue = false;
  for (int a : op.args) {
    const bool is_row = has(b.row_values, a);
    reads_row = reads_row || is_row;
    reads_epilogue = reads_epilogue || has(b.epilogue_values, a);
    row_args = row_args && (is_row || (group_of[static_cast<size_t>(a)] != g && per_row(region.value(a))));
  }
  *row = reads_row && row_args;
  return *row || (out.sizes == b.group.sizes && (reads_row || reads_epilogue));
}

// Which values a reduction reads, directly or through fusible pointwise ops of the value's sizes.
std::vector<bool> feeds_reduction(const Region& region) {
  std::vector<bool> feeds(region.values().size(), false);
  for (auto it = region.ops().rbegin(); it != region.ops().rend(); ++it) {
    const Op& op = *it;
    const bool reduction = op.kind == OpKind::Reduce;
    if (!reduction && !(feeds[static_cast<size_t>(op.result)] && fusible(region, op))) continue;
    for (int a : op.args) {
      if (reduction || region.value(a).sizes == region.value(op.result).sizes)
        feeds[static_cast<size_t>(a)] = true;
    }
  }
  return feeds;
}

// Which ops something reads: a result live out of the region, or an argument of a live op.
std::vector<bool> live_ops(const Region& region) {
  const auto& ops = region.ops();
  std::vector<bool> needed(region.values().size(), false), live(ops.size(), false);
  for (size_t v = 0; v < needed.size(); ++v) needed[v] = region.values()[v].live_out;
  for (size_t o = ops.size(); o-- > 0;) {
    if (!needed[static_cast<size_t>(ops[o].result)]) continue;
    live[o] = true;
    for (int a : ops[o].args) needed[static_cast<size_t>(a)] = true;
  }
  return live;
}

// Note [Recomputed values]: a pointwise value that later groups read but nothing after the region
// does is cheaper to compute again in each of those groups than to write and read back: a fused
// kernel is bound by memory, not arithmetic. This happens where a reduction closed the group that
// computed the value (RMSNorm's backward reads g * w both in its statistic's sum and after it).
// When every group reading such a value can compute it (from region inputs, its own values, or
// values written anyway, through at most kMaxChain ops of the reader's iteration), the ops are
// copied into each reader, and the group it was planned in no longer writes it. The copies use
// the same formulas, so the bits do not change.
constexpr int kMaxChain = 3;

// Whether group g can compute value v itself; adds the ops it needs to `chain` (program order).
bool chain_into(const Region& region, const std::vector<Building>& building, const std::vector<int>& group_of,
                int v, size_t g, std::vector<int>& chain) {
  const Value& value = region.value(v);
  if (value.producer < 0 || value.live_out || value.sizes != building[g].group.sizes) return false;
  const Op& op = region.op(value.producer);
  if (op.kind == OpKind::Reduce || !fusible(region, op)) return false;
  if (static_cast<int>(chain.size()) >= kMaxChain) return false;
  const auto computed_in_g = [&](int a) {
    const auto& own = building[g].group.ops;
    return std::find(own.begin(), own.end(), region.value(a).producer) != own.end() ||
           std::find(chain.begin(), chain.end(), region.value(a).producer) != chain.end();
  };
  for (int a : op.args) {
    const Value& arg = region.value(a);
    if (arg.producer < 0 || arg.live_out || computed_in_g(a)) continue;
    const int from = group_of[static_cast<size_t>(a)];
    if (from >= 0 && !building[static_cast<size_t>(from)].joinable) continue;  // an eager op writes it
    if (!chain_into(region, building, group_of, a, g, chain)) return false;
  }
  if (std::find(chain.begin(), chain.end(), value.producer) != chain.end()) return true;
  if (static_cast<int>(chain.size()) >= kMaxChain) return false;  // counted after the arguments' ops
  chain.push_back(value.producer);
  return true;
}

void recompute_across_groups(const Region& region, std::vector<Building>& building,
                             const std::vector<int>& group_of) {
  for (size_t v = 0; v < region.values().size(); ++v) {
    const int home = group_of[v];
    if (home < 0 || region.values()[v].live_out) continue;
    std::vector<size_t> readers;
    for (size_t g = 0; g < building.size(); ++g) {
      if (static_cast<int>(g) == home) continue;
      for (int o : building[g].group.ops) {
        const auto& args = region.op(o).args;
        if (std::find(args.begin(), args.end(), static_cast<int>(v)) != args.end()) {
          readers.push_back(g);
          break;
        }
      }
    }
    if (readers.empty()) continue;
    std::vector<std::vector<int>> chains(readers.size());
    bool all = true;
    for (size_t k = 0; k < readers.size() && all; ++k) {
      all = building[readers[k]].joinable &&
            chain_into(region, building, group_of, static_cast<int>(v), readers[k], chains[k]);
    }
    if (!all) continue;
    for (size_t k = 0; k < readers.size(); ++k) {
      auto& own = building[readers[k]].group.ops;
      for (int o : chains[k]) {
        if (std::find(own.begin(), own.end(), o) == own.end()) own.push_back(o);
      }
      std::sort(own.begin(), own.end());  // program order is dependency order
    }
  }
}

}  // namespace

Plan plan_groups(const Region& region) {
  const auto& ops = region.ops();
  const std::vector<bool> live = live_ops(region);
  const std::vector<bool> feeds = feeds_reduction(region);
  std::vector<int> group_of(region.values().size(), -1);  // the group computing each value
  std::vector<Building> building;
  Plan plan;
  for (size_t o = 0; o < ops.size(); ++o) {
    if (!live[o]) {
      plan.dead.push_back(static_cast<int>(o));
      continue;
    }
    const Op& op = ops[o];
    int bound = 0;  // the earliest group it may join: none before a group it reads from
    for (int a : op.args) bound = std::max(bound, group_of[static_cast<size_t>(a)]);
    const bool reduction = op.kind == OpKind::Reduce;
    const Shape& sizes = region.value(reduction ? op.args[0] : op.result).sizes;
    int chosen = -1;
    bool row = false;  // a row op (Note [One-pass rows])
    if (reduction) {
      // Note [Fused reductions]: a reduction runs in the kernel computing its input, each of
      // whose elements that kernel then visits once, in the reduction's order; the group's other
      // ops ride along. It is the group's last op: nothing can read its result in the same pass.
      const int g = group_of[static_cast<size_t>(op.args[0])];
      if (g >= 0 && fusible(region, op) && reduce_layout(region, op) &&
          building[static_cast<size_t>(g)].joinable && !building[static_cast<size_t>(g)].closed) {
        chosen = g;
      }
    } else if (fusible(region, op)) {
      for (int g = static_cast<int>(building.size()) - 1; g >= bound; --g) {
        const Building& b = building[static_cast<size_t>(g)];
        if (!b.joinable) continue;
        if ((!b.closed && b.group.sizes == sizes) ||
            (b.rows && joins_rows(region, b, g, group_of, feeds, op, &row))) {
          chosen = g;
          break;
        }
      }
    }
    if (chosen < 0) {
      Building& b = building.emplace_back();
      b.group.sizes = sizes;
      b.joinable = !reduction && fusible(region, op);
      chosen = static_cast<int>(building.size()) - 1;
    }
    Building& target = building[static_cast<size_t>(chosen)];
    target.group.ops.push_back(static_cast<int>(o));
    if (reduction) {
      target.group.reduce = static_cast<int>(o);
      target.closed = true;
      target.rows = target.joinable && one_pass_rows(region, op);
      target.row_values = {op.result};
    } else if (row) {
      target.group.row_ops.push_back(static_cast<int>(o));
      target.row_values.push_back(op.result);
    } else if (target.rows) {
      target.epilogue_values.push_back(op.result);
    }
    group_of[static_cast<size_t>(op.result)] = chosen;
  }

  recompute_across_groups(region, building, group_of);

  // What each group computes, reads from outside, and which results someone else reads. A value
  // recomputed in several groups is written, if at all, by the group it was planned in.
  const size_t n_values = region.values().size();
  std::vector<std::vector<bool>> computes(building.size(), std::vector<bool>(n_values, false));
  for (size_t g = 0; g < building.size(); ++g) {
    for (int o : building[g].group.ops)
      computes[g][static_cast<size_t>(ops[static_cast<size_t>(o)].result)] = true;
  }
  std::vector<bool> read_elsewhere(n_values, false);
  for (size_t g = 0; g < building.size(); ++g) {
    for (int o : building[g].group.ops) {
      for (int a : ops[static_cast<size_t>(o)].args) {
        if (!computes[g][static_cast<size_t>(a)]) read_elsewhere[static_cast<size_t>(a)] = true;
      }
    }
  }
  // An op whose every reader computes its value again leaves its own group.
  for (size_t g = 0; g < building.size(); ++g) {
    std::vector<int>& own = building[g].group.ops;
    std::vector<bool> needed(n_values, false);
    std::vector<int> kept;
    for (auto it = own.rbegin(); it != own.rend(); ++it) {
      const Op& op = ops[static_cast<size_t>(*it)];
      const auto r = static_cast<size_t>(op.result);
      // A copy (Note [Recomputed values]) stays only where its own group reads it; the group it
      // was planned in writes it if anyone else does.
      const bool primary = group_of[r] == static_cast<int>(g);
      if (!(needed[r] || (primary && (region.value(op.result).live_out || read_elsewhere[r])))) continue;
      kept.push_back(*it);
      for (int a : op.args) needed[static_cast<size_t>(a)] = true;
    }
    own.assign(kept.rbegin(), kept.rend());
    std::erase_if(building[g].group.row_ops,
                  [&](int o) { return std::find(own.begin(), own.end(), o) == own.end(); });
  }
  for (size_t g = 0; g < building.size(); ++g) {
    Group& group = building[g].group;
    if (group.ops.empty()) continue;
    for (int o : group.ops) {
      const Op& op = ops[static_cast<size_t>(o)];
      for (int a : op.args) {
        if (!computes[g][static_cast<size_t>(a)] &&
            std::find(group.inputs.begin(), group.inputs.end(), a) == group.inputs.end()) {
          group.inputs.push_back(a);
        }
      }
      const bool primary = group_of[static_cast<size_t>(op.result)] == static_cast<int>(g);
      if (primary && (region.value(op.result).live_out || read_elsewhere[static_cast<size_t>(op.result)])) {
        group.outputs.push_back(op.result);
      }
    }
    group.fused = building[g].joinable && group.ops.size() > 1;
    plan.groups.push_back(std::move(group));
  }
  return plan;
}

std::string dump(const Plan& plan) {
  const auto list = [](const std::vector<int>& xs, const char* prefix) {
    std::string s;
    for (int x : xs) s += fmt::format(" {}{}", prefix, x);
    return s;
  };
  std::string s;
  for (size_t g = 0; g < plan.groups.size(); ++g) {
    const Group& group = plan.groups[g];
    s += fmt::format("group {} {} {}: ops{}, in{}, out{}{}{}\n", g, group.fused ? "fused" : "eager",
                     shape_str(group.sizes), list(group.ops, ""), list(group.inputs, "%"),
                     list(group.outputs, "%"),
                     group.reduce >= 0 ? fmt::format(", reduce {}", group.reduce) : "",
                     group.row_ops.empty() ? "" : fmt::format(", rows{}", list(group.row_ops, "")));
  }
  if (!plan.dead.empty()) s += fmt::format("dead:{}\n", list(plan.dead, ""));
  return s;
}

}  // namespace nabla::ops::fusion
