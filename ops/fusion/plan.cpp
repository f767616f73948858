#include "nabla/ops/fusion/plan.h"

#include <algorithm>

#include <fmt/format.h>

namespace nabla::ops::fusion {

namespace {

struct Building {
  Group group;
  bool joinable = true;  // false: an op the compiler cannot fuse, alone
  bool closed = false;   // a reduction ended it: nothing joins it any more
};

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

}  // namespace

Plan plan_groups(const Region& region) {
  const auto& ops = region.ops();
  const std::vector<bool> live = live_ops(region);
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
        if (b.joinable && !b.closed && b.group.sizes == sizes) {
          chosen = g;
          break;
        }
      }
    }
    if (chosen < 0) {
      building.push_back({.group = {.sizes = sizes}, .joinable = !reduction && fusible(region, op)});
      chosen = static_cast<int>(building.size()) - 1;
    }
    Building& target = building[static_cast<size_t>(chosen)];
    target.group.ops.push_back(static_cast<int>(o));
    if (reduction) {
      target.group.reduce = static_cast<int>(o);
      target.closed = true;
    }
    group_of[static_cast<size_t>(op.result)] = chosen;
  }

  // What each group reads from outside, and which of its results someone else reads.
  std::vector<bool> read_elsewhere(region.values().size(), false);
  for (size_t g = 0; g < building.size(); ++g) {
    for (int o : building[g].group.ops) {
      for (int a : ops[static_cast<size_t>(o)].args) {
        if (group_of[static_cast<size_t>(a)] != static_cast<int>(g))
          read_elsewhere[static_cast<size_t>(a)] = true;
      }
    }
  }
  for (size_t g = 0; g < building.size(); ++g) {
    Group& group = building[g].group;
    for (int o : group.ops) {
      const Op& op = ops[static_cast<size_t>(o)];
      for (int a : op.args) {
        const bool inside = group_of[static_cast<size_t>(a)] == static_cast<int>(g);
        if (!inside && std::find(group.inputs.begin(), group.inputs.end(), a) == group.inputs.end()) {
          group.inputs.push_back(a);
        }
      }
      if (region.value(op.result).live_out || read_elsewhere[static_cast<size_t>(op.result)]) {
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
    s += fmt::format("group {} {} {}: ops{}, in{}, out{}{}\n", g, group.fused ? "fused" : "eager",
                     shape_str(group.sizes), list(group.ops, ""), list(group.inputs, "%"),
                     list(group.outputs, "%"),
                     group.reduce >= 0 ? fmt::format(", reduce {}", group.reduce) : "");
  }
  if (!plan.dead.empty()) s += fmt::format("dead:{}\n", list(plan.dead, ""));
  return s;
}

}  // namespace nabla::ops::fusion
